#!/usr/bin/env python3
"""Headless-Chromium check of the HTML accuracy report (DESIGN.md §7).

Usage: html_screenshot_test.py PATH/TO/report_render_test

1. Runs `report_render_test --gtest_filter=*WriteSample*` with KILN_HTML_OUT set, which writes a
   sample report page (markup in names, NaN/Inf, a failing output, a suggestion, 132 tensors)
   and a 3016-tensor page (KILN_HTML_OUT_LARGE).
2. Loads it in headless Chromium (network disabled by a resolver rule, and recorded in a net
   log), takes a 1280x2000 screenshot and dumps the DOM after the page's script ran.
3. Checks: no console message of any kind from the page (the page logs nothing, so every
   CONSOLE line is an error: a script exception, an invalid SVG attribute such as x="NaN", ...),
   no request from the page to anything but file://, the filter script ran, and the screenshot
   is a real rendering: many colours, enough ink, and the chart's precision colours as many
   separate bars (not only the legend swatches), plus a red non-finite marker besides the
   legend's.

Exit codes: 0 pass, 1 fail, 77 skipped (no Chromium; ctest SKIP_RETURN_CODE). Stdlib only.
"""

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

SKIP = 77
WIDTH, HEIGHT = 1280, 2000

# The chart colours of engine/report/render_util.cc (PrecisionColor, kNonFiniteColor).
PRECISION_COLOURS = {
    "fp32": (0x4C, 0x78, 0xA8),
    "fp16": (0xF5, 0x85, 0x18),
    "bf16": (0x54, 0xA2, 0x4B),
    "none": (0x9D, 0x9D, 0x9D),
}
NON_FINITE_RED = (0xD6, 0x27, 0x28)
# Per channel: the bars are flat fills, drawn exactly; a little slack covers colour management.
COLOUR_TOLERANCE = 6
# Each float precision has at least this many bars in the sample (18 layers: 54 fp16, 36 bf16,
# 18 fp32 columns); adjacent bars of one colour may touch, so ask for well under that.
MIN_BAR_COMPONENTS = {"fp32": 8, "fp16": 8, "bf16": 8}

# A pixel row of the chart region crosses at least this many separate bars.
CHART_ROW_MIN_BARS = 5

# Chromium's own start-up noise on a machine without D-Bus, GPU or a user session: reported,
# never a failure. Page problems come as CONSOLE lines (see the module doc).
NOISE = re.compile(
    r"dbus|bus\.cc|gpu|vaapi|sandbox|bluez|idle_linux|viz|gl_|egl|vulkan|angle|"
    r"unexpected operator|fontconfig|crashpad|cert_verify|ssl|network_service|"
    r"upower|screensaver|Floss",
    re.IGNORECASE,
)


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def find_chromium():
    override = os.environ.get("KILN_CHROMIUM")
    if override:
        return override
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


def write_sample(test_binary, html_path, large_path):
    env = dict(os.environ, KILN_HTML_OUT=html_path, KILN_HTML_OUT_LARGE=large_path)
    run = subprocess.run(
        [test_binary, "--gtest_filter=*WriteSample*"],
        env=env, capture_output=True, text=True, timeout=120)
    if run.returncode != 0 or not os.path.isfile(html_path) or not os.path.isfile(large_path):
        fail("writing the sample page failed:\n" + run.stdout + run.stderr)
    if "[  SKIPPED ]" in run.stdout:
        fail("WriteSample skipped although KILN_HTML_OUT was set")
    with open(html_path, encoding="utf-8") as f:
        return f.read()


def run_chromium(chromium, profile, args):
    command = [
        chromium, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
        "--v=0", "--user-data-dir=" + profile, "--no-first-run",
        "--disable-background-networking", "--host-resolver-rules=MAP * ~NOTFOUND",
    ] + args
    return subprocess.run(command, capture_output=True, text=True, timeout=180)


# ---------------------------------------------------------------------------------------------
# PNG decoding (8-bit RGB / RGBA, non-interlaced: what Chromium writes).


def decode_png(path):
    """Returns (width, height, rows) with rows a list of bytes objects of RGB triples."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail(path + " is not a PNG")
    pos, idat, header = 8, [], None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    if header is None:
        fail("PNG without IHDR")
    width, height, depth, colour_type, _, _, interlace = header
    if depth != 8 or colour_type not in (2, 6) or interlace != 0:
        fail("unsupported PNG: depth %d, colour type %d, interlace %d"
             % (depth, colour_type, interlace))
    bpp = 3 if colour_type == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    if len(raw) != height * (stride + 1):
        fail("PNG data size %d, expected %d" % (len(raw), height * (stride + 1)))
    rows, prev = [], bytearray(stride)
    for y in range(height):
        base = y * (stride + 1)
        filt = raw[base]
        line = bytearray(raw[base + 1:base + 1 + stride])
        if filt == 0:
            pass
        elif filt == 1:  # Sub
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif filt == 2:  # Up
            for i in range(stride):
                line[i] = (line[i] + prev[i]) & 0xFF
        elif filt == 3:  # Average
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif filt == 4:  # Paeth
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        else:
            fail("bad PNG filter type %d in row %d" % (filt, y))
        prev = line
        if bpp == 4:  # drop alpha: the page background is opaque white
            rgb = bytearray(width * 3)
            rgb[0::3], rgb[1::3], rgb[2::3] = line[0::4], line[1::4], line[2::4]
            rows.append(bytes(rgb))
        else:
            rows.append(bytes(line))
    return width, height, rows


def near(colour, target):
    return all(abs(c - t) <= COLOUR_TOLERANCE for c, t in zip(colour, target))


def components(points):
    """Number of 4-connected components of a set of (x, y) pixels."""
    seen, count = set(), 0
    for start in points:
        if start in seen:
            continue
        count += 1
        stack = [start]
        seen.add(start)
        while stack:
            x, y = stack.pop()
            for q in ((x + 1, y), (x - 1, y), (x, y + 1), (x, y - 1)):
                if q in points and q not in seen:
                    seen.add(q)
                    stack.append(q)
    return count


def check_screenshot(path):
    width, height, rows = decode_png(path)
    print("screenshot: %dx%d" % (width, height))
    if (width, height) != (WIDTH, HEIGHT):
        fail("screenshot is %dx%d, expected %dx%d" % (width, height, WIDTH, HEIGHT))

    distinct, ink = set(), 0
    targets = dict(PRECISION_COLOURS, red=NON_FINITE_RED)
    pixels = {name: set() for name in targets}
    chart_rows = []  # (y, first x, last x) of rows crossing at least CHART_ROW_MIN_BARS bars
    for y, row in enumerate(rows):
        triples = list(zip(row[0::3], row[1::3], row[2::3]))
        row_colours = set(triples)
        distinct |= row_colours
        ink += sum(1 for t in triples if t[0] < 240 or t[1] < 240 or t[2] < 240)
        hits = {name: [c for c in row_colours if near(c, rgb)] for name, rgb in targets.items()}
        for name, colours in hits.items():
            if colours:
                wanted = set(colours)
                pixels[name].update((x, y) for x, t in enumerate(triples) if t in wanted)
        # Chart rows cross many bars; the legend and the table rows hold at most 3 swatches.
        bar_colours = set(hits["fp32"] + hits["fp16"] + hits["bf16"])
        if bar_colours:
            xs = [x for x, t in enumerate(triples) if t in bar_colours]
            runs = 1 + sum(1 for a, b in zip(xs, xs[1:]) if b != a + 1)
            if runs >= CHART_ROW_MIN_BARS:
                chart_rows.append((y, xs[0], xs[-1]))

    ink_fraction = ink / float(width * height)
    print("distinct colours: %d, non-white pixels: %.1f%%" % (len(distinct), 100 * ink_fraction))
    if len(distinct) < 64:
        fail("only %d distinct colours: the page did not render" % len(distinct))
    if ink_fraction < 0.05:
        fail("only %.2f%% non-white pixels: blank page" % (100 * ink_fraction))

    counts = {}
    for name, points in pixels.items():
        counts[name] = components(points)
        print("colour %-4s %s: %6d pixels in %3d separate shapes"
              % (name, "#%02x%02x%02x" % targets[name], len(points), counts[name]))
    for name, minimum in MIN_BAR_COMPONENTS.items():
        if counts[name] < minimum:
            fail("%s bars missing from the chart: %d shapes of its colour (legend swatch "
                 "included), want >= %d" % (name, counts[name], minimum))
    if counts["none"] < 1:
        fail("the 'none' precision colour is absent")
    if counts["red"] < 2:
        fail("no red non-finite marker in the chart (only %d red shapes; the legend has one)"
             % counts["red"])

    # The chart region: the bounding box of the rows that cross many bars.
    if not chart_rows:
        fail("no pixel row crosses %d bars or more: no chart" % CHART_ROW_MIN_BARS)
    y0, y1 = chart_rows[0][0], chart_rows[-1][0]
    x0, x1 = min(r[1] for r in chart_rows), max(r[2] for r in chart_rows)
    box_ink = 0
    for y in range(y0, y1 + 1):
        row = rows[y]
        for x in range(x0, x1 + 1):
            r, g, b = row[3 * x], row[3 * x + 1], row[3 * x + 2]
            box_ink += r < 240 or g < 240 or b < 240
    box_fraction = box_ink / float((x1 - x0 + 1) * (y1 - y0 + 1))
    print("chart region: x %d-%d, y %d-%d (%d rows crossing >= %d bars), %.1f%% non-white"
          % (x0, x1, y0, y1, len(chart_rows), CHART_ROW_MIN_BARS, 100 * box_fraction))
    if x1 - x0 < width // 2:
        fail("chart only %d px wide: it should span the page" % (x1 - x0))
    if len(chart_rows) < 100:
        fail("only %d pixel rows cross %d bars or more: chart too flat"
             % (len(chart_rows), CHART_ROW_MIN_BARS))
    if box_fraction < 0.10:
        fail("chart region only %.1f%% non-white" % (100 * box_fraction))


def check_console(stderr, page_name):
    page_errors, noise = [], 0
    for line in stderr.splitlines():
        if "CONSOLE" in line or "Uncaught" in line:
            page_errors.append(line)
        elif ":ERROR:" in line:
            if page_name in line or "file://" in line:
                page_errors.append(line)
            elif NOISE.search(line):
                noise += 1
            else:
                # Unknown browser error unrelated to the page: show it, do not fail on it.
                print("note: browser error line (not from the page): " + line.strip())
    print("console: %d page messages, %d ignored browser noise lines" % (len(page_errors), noise))
    if page_errors:
        fail("the page logged to the console:\n  " + "\n  ".join(page_errors))


def check_net_log(path):
    """Fails if the page (network isolation key file://) requested any non-file URL."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    try:
        log = json.loads(text)
    except ValueError:
        # A log cut short at exit lacks its closing brackets; Chromium documents this.
        log = json.loads(text.rstrip().rstrip(",") + "]}")
    start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    page_requests = []
    for event in log.get("events", []):
        params = event.get("params") or {}
        if event.get("type") != start_job or "url" not in params:
            continue
        if "file://" in str(params.get("network_isolation_key", "")):
            page_requests.append(params["url"])
    remote = [u for u in page_requests if not u.startswith("file:")]
    print("network: %d requests from the page, %d not file://" % (len(page_requests), len(remote)))
    if remote:
        fail("the page requested remote resources: " + ", ".join(remote))


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    chromium = find_chromium()
    if chromium is None:
        print("SKIP: no chromium or chromium-browser on PATH")
        return SKIP
    print("chromium: " + chromium)
    with tempfile.TemporaryDirectory(prefix="kiln_html_") as tmp:
        html_path = os.path.join(tmp, "report.html")
        large_path = os.path.join(tmp, "large.html")
        html = write_sample(sys.argv[1], html_path, large_path)
        rows = html.count('<tr id="t')
        print("sample page: %d bytes, %d tensor rows" % (len(html), rows))
        url = "file://" + html_path
        png = os.path.join(tmp, "shot.png")
        net_log = os.path.join(tmp, "net.json")
        shot = run_chromium(chromium, os.path.join(tmp, "profile1"), [
            "--window-size=%d,%d" % (WIDTH, HEIGHT), "--screenshot=" + png,
            "--log-net-log=" + net_log, url])
        if shot.returncode != 0 or not os.path.isfile(png):
            fail("chromium --screenshot failed (%d):\n%s" % (shot.returncode, shot.stderr))
        check_console(shot.stderr, os.path.basename(html_path))
        check_net_log(net_log)

        dom = run_chromium(chromium, os.path.join(tmp, "profile2"), ["--dump-dom", url])
        check_console(dom.stderr, os.path.basename(html_path))
        expected = "%d of %d shown" % (rows, rows)
        if expected not in dom.stdout:
            fail("the filter script did not run: %r not in the DOM" % expected)
        print("script: ran (%r)" % expected)

        check_screenshot(png)

        # The 3016-tensor page: aggregated chart columns, a long table; still no console message
        # and the script filters every row.
        with open(large_path, encoding="utf-8") as f:
            large_rows = f.read().count('<tr id="t')
        large = run_chromium(chromium, os.path.join(tmp, "profile3"),
                             ["--dump-dom", "file://" + large_path])
        check_console(large.stderr, os.path.basename(large_path))
        expected = "%d of %d shown" % (large_rows, large_rows)
        if large_rows < 3000 or expected not in large.stdout:
            fail("large page: %r not in the DOM (%d rows)" % (expected, large_rows))
        print("large page: %d bytes, script ran (%r)" % (os.path.getsize(large_path), expected))
        keep = os.environ.get("KILN_SCREENSHOT_KEEP")
        if keep:
            shutil.copyfile(png, keep)
            shutil.copyfile(html_path, os.path.splitext(keep)[0] + ".html")
            print("kept " + keep)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
