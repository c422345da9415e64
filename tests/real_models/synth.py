"""Realistic inputs made with numpy alone (no PIL, no audio files), and the small post-processing
the real models' packages apply to their outputs (CTC decoding, YOLOX decoding and NMS, the
connected regions of a text probability map). Everything is deterministic (fixed seeds)."""
import struct
import zlib

import numpy as np

SR = 16000  # every audio model here takes 16 kHz


# ---- audio -----------------------------------------------------------------------------------

# (F1, F2, F3) of five vowels (a, i, u, e, o), adult male averages.
_VOWELS = [(730, 1090, 2440), (270, 2290, 3010), (300, 870, 2240), (530, 1840, 2480),
           (570, 840, 2410)]


def voiced(seconds, seed=0):
    """A synthetic voiced utterance: a glottal source (harmonics of a 100-155 Hz pitch contour
    with a -6 dB/octave tilt) shaped by the formants of a new vowel every 250 ms, with a
    syllable envelope and a little breath noise. Silero VAD scores it as speech (> 0.9)."""
    rng = np.random.default_rng(seed)
    n = int(seconds * SR)
    t = np.arange(n) / SR
    f0 = 120 + 25 * np.sin(2 * np.pi * 0.7 * t + seed) + 10 * np.sin(2 * np.pi * 3.1 * t)
    phase = 2 * np.pi * np.cumsum(f0) / SR
    syllable = (t * 4).astype(int) + seed
    x = np.zeros(n)
    for k in range(1, 40):
        fk = k * f0
        amp = np.zeros(n)
        for j, formants in enumerate(_VOWELS):
            m = (syllable % len(_VOWELS)) == j
            for f, bw, gain in zip(formants, (90, 110, 160), (1.0, 0.5, 0.25)):
                amp[m] += gain / (1 + ((fk[m] - f) / bw) ** 2)
        x += amp * (fk < SR / 2) / k * np.sin(k * phase)
    x *= np.clip(np.sin(np.pi * (t * 4 % 1)), 0, 1) ** 0.5
    x += 0.003 * rng.standard_normal(n)
    return (0.3 * x / np.abs(x).max()).astype(np.float32)


def silence(seconds, seed=1):
    """Room-noise silence: white noise at about -54 dBFS."""
    rng = np.random.default_rng(seed)
    return (0.002 * rng.standard_normal(int(seconds * SR))).astype(np.float32)


def _hz_to_mel(f):
    f = np.atleast_1d(np.asarray(f, np.float64))
    m = 3.0 * f / 200.0
    hi = f >= 1000.0
    m[hi] = 15.0 + np.log(f[hi] / 1000.0) * (27.0 / np.log(6.4))
    return m


def _mel_to_hz(m):
    m = np.atleast_1d(np.asarray(m, np.float64))
    f = 200.0 * m / 3.0
    hi = m >= 15.0
    f[hi] = 1000.0 * np.exp(np.log(6.4) / 27.0 * (m[hi] - 15.0))
    return f


def whisper_features(audio, seconds=8):
    """Whisper's log-mel features (80 Slaney mels, n_fft 400, hop 160, periodic Hann, centred
    reflect padding, log10 clamped 8 below its max, (x + 4) / 4) of `audio` zero-normalised and
    padded to `seconds`: what transformers' WhisperFeatureExtractor(chunk_length=8,
    do_normalize=True) and pipecat's Smart Turn v3 compute. Shape (80, 100 * seconds)."""
    n = SR * seconds
    x = np.zeros(n, np.float32)
    x[:min(len(audio), n)] = audio[:n]
    x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)
    padded = np.pad(x.astype(np.float64), (200, 200), mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(padded, 400)[::160]
    power = np.abs(np.fft.rfft(frames * np.hanning(401)[:-1], axis=-1)) ** 2
    edges = _mel_to_hz(np.linspace(_hz_to_mel(0.0)[0], _hz_to_mel(SR / 2)[0], 82))
    bins = np.linspace(0, SR // 2, 201)
    slopes = edges[None, :] - bins[:, None]
    diff = np.diff(edges)
    bank = np.maximum(0, np.minimum(-slopes[:, :-2] / diff[:-1], slopes[:, 2:] / diff[1:]))
    bank *= (2.0 / (edges[2:82] - edges[:80]))[None, :]
    log = np.log10(np.maximum(1e-10, bank.T @ power.T))[:, :-1]
    log = np.maximum(log, log.max() - 8.0)
    return ((log + 4.0) / 4.0).astype(np.float32)


# ---- text images -----------------------------------------------------------------------------

# A 5x7 dot-matrix font (HD44780 style): 7 rows of 5 bits per glyph.
_GLYPHS = {
    "0": "01110 10001 10011 10101 11001 10001 01110", "1": "00100 01100 00100 00100 00100 00100 01110",
    "2": "01110 10001 00001 00010 00100 01000 11111", "3": "11111 00010 00100 00010 00001 10001 01110",
    "4": "00010 00110 01010 10010 11111 00010 00010", "5": "11111 10000 11110 00001 00001 10001 01110",
    "6": "00110 01000 10000 11110 10001 10001 01110", "7": "11111 00001 00010 00100 01000 01000 01000",
    "8": "01110 10001 10001 01110 10001 10001 01110", "9": "01110 10001 10001 01111 00001 00010 01100",
    "A": "01110 10001 10001 10001 11111 10001 10001", "B": "11110 10001 10001 11110 10001 10001 11110",
    "C": "01110 10001 10000 10000 10000 10001 01110", "D": "11100 10010 10001 10001 10001 10010 11100",
    "E": "11111 10000 10000 11110 10000 10000 11111", "F": "11111 10000 10000 11110 10000 10000 10000",
    "G": "01110 10001 10000 10111 10001 10001 01111", "H": "10001 10001 10001 11111 10001 10001 10001",
    "I": "01110 00100 00100 00100 00100 00100 01110", "J": "00111 00010 00010 00010 00010 10010 01100",
    "K": "10001 10010 10100 11000 10100 10010 10001", "L": "10000 10000 10000 10000 10000 10000 11111",
    "M": "10001 11011 10101 10101 10001 10001 10001", "N": "10001 10001 11001 10101 10011 10001 10001",
    "O": "01110 10001 10001 10001 10001 10001 01110", "P": "11110 10001 10001 11110 10000 10000 10000",
    "Q": "01110 10001 10001 10001 10101 10010 01101", "R": "11110 10001 10001 11110 10100 10010 10001",
    "S": "01111 10000 10000 01110 00001 00001 11110", "T": "11111 00100 00100 00100 00100 00100 00100",
    "U": "10001 10001 10001 10001 10001 10001 01110", "V": "10001 10001 10001 10001 10001 01010 00100",
    "W": "10001 10001 10001 10101 10101 10101 01010", "X": "10001 10001 01010 00100 01010 10001 10001",
    "Y": "10001 10001 10001 01010 00100 00100 00100", "Z": "11111 00001 00010 00100 01000 10000 11111",
    " ": "00000 00000 00000 00000 00000 00000 00000",
}


def render_text(text, px=4, pad=2, ink=20, paper=235):
    """`text` (digits, capitals, spaces) as a grayscale uint8 image, each font dot a round px-wide
    dot, anti-aliased (drawn at 4x and averaged). Height 7 * px + 2 * pad * px."""
    ss = 4
    cols = []
    for ch in text:
        cols.append(np.array([[int(b) for b in row] for row in _GLYPHS[ch].split()], np.float32))
        cols.append(np.zeros((7, 1), np.float32))
    bitmap = np.pad(np.concatenate(cols, 1), pad)
    s = px * ss
    yy, xx = np.mgrid[0:s, 0:s]
    dot = (np.hypot(yy - (s - 1) / 2, xx - (s - 1) / 2) <= 0.62 * s).astype(np.float32)
    big = np.minimum(np.kron(bitmap, dot), 1)
    h, w = big.shape
    cover = big.reshape(h // ss, ss, w // ss, ss).mean((1, 3))
    return (paper - (paper - ink) * cover).astype(np.uint8)


def resize(img, height, width=None):
    """Bilinear resize (half-pixel centres) of an HxW or HxWxC image to `height` rows and
    `width` columns (default: keep the aspect ratio). Returns float32."""
    h, w = img.shape[:2]
    width = width or max(1, int(round(w * height / h)))
    ys = (np.arange(height) + 0.5) * h / height - 0.5
    xs = (np.arange(width) + 0.5) * w / width - 0.5
    y0 = np.clip(np.floor(ys).astype(int), 0, h - 1)
    x0 = np.clip(np.floor(xs).astype(int), 0, w - 1)
    y1, x1 = np.clip(y0 + 1, 0, h - 1), np.clip(x0 + 1, 0, w - 1)
    fy = np.clip(ys - y0, 0, 1)
    fx = np.clip(xs - x0, 0, 1)
    a = img.astype(np.float32)
    if a.ndim == 3:
        fx = fx[:, None]
        fyy = fy[:, None, None]
    else:
        fyy = fy[:, None]
    top = a[y0][:, x0] * (1 - fx) + a[y0][:, x1] * fx
    bottom = a[y1][:, x0] * (1 - fx) + a[y1][:, x1] * fx
    return (top * (1 - fyy) + bottom * fyy).astype(np.float32)


def text_page(lines, height=320, width=480, paper=240):
    """A grayscale page with text lines [(row, col, text, px)]."""
    page = np.full((height, width), paper, np.uint8)
    for y, x, text, px in lines:
        img = render_text(text, px=px, paper=paper)
        h, w = img.shape
        page[y:y + h, x:x + w] = np.minimum(page[y:y + h, x:x + w], img)
    return page


def captcha_scene(chars, seed, height=200, width=400):
    """A colour click-captcha-like scene (HxWx3 uint8): a smooth colour background with noise
    and characters [(row, col, char, px, (r, g, b))] alpha-blended on it."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    img = np.stack([120 + 60 * np.sin(xx / 40), 140 + 50 * np.cos(yy / 30),
                    160 + 40 * np.sin((xx + yy) / 50)], -1)
    img = img + rng.normal(0, 8, img.shape)
    for y, x, ch, px, colour in chars:
        alpha = 1 - render_text(ch, px=px, pad=1, ink=0, paper=255).astype(np.float32) / 255
        sub = img[y:y + alpha.shape[0], x:x + alpha.shape[1]]
        sub[:] = sub * (1 - alpha[..., None]) + np.array(colour) * alpha[..., None]
    return np.clip(img, 0, 255).astype(np.uint8)


# ---- files (for a content-type classifier) ---------------------------------------------------

def png_bytes(seed=0, size=48):
    """A valid RGB PNG of a noisy gradient."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size]
    img = np.stack([xx * 5, yy * 5, (xx + yy) * 2], -1) + rng.integers(0, 20, (size, size, 3))
    raw = b"".join(b"\x00" + row.tobytes() for row in np.clip(img, 0, 255).astype(np.uint8))

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


SAMPLE_FILES = {
    "python": b'''#!/usr/bin/env python3
"""Counts the words of the files named on the command line."""
import collections
import sys


def count_words(path):
    counts = collections.Counter()
    with open(path, encoding="utf-8") as f:
        for line in f:
            counts.update(word.lower() for word in line.split())
    return counts


def main(argv):
    total = collections.Counter()
    for path in argv[1:]:
        total += count_words(path)
    for word, n in total.most_common(20):
        print(f"{n:8d} {word}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
''',
    "cpp": b'''#include <iostream>
#include <map>
#include <string>
#include <vector>

namespace demo {

// Counts how often each word appears in the input stream.
std::map<std::string, int> CountWords(std::istream& in) {
  std::map<std::string, int> counts;
  std::string word;
  while (in >> word) ++counts[word];
  return counts;
}

}  // namespace demo

int main(int argc, char** argv) {
  std::vector<std::pair<int, std::string>> order;
  for (const auto& [word, n] : demo::CountWords(std::cin)) order.emplace_back(n, word);
  std::sort(order.rbegin(), order.rend());
  for (size_t i = 0; i < order.size() && i < 20; ++i) {
    std::cout << order[i].first << " " << order[i].second << "\\n";
  }
  return 0;
}
''',
    "json": b'''{
  "name": "kiln-demo",
  "version": "1.4.2",
  "models": [
    {"id": 1, "path": "models/mobilenet.onnx", "policy": "fp32-layernorm", "threads": 2},
    {"id": 2, "path": "models/vit_tiny.onnx", "policy": "bf16-layernorm", "threads": 4},
    {"id": 3, "path": "models/gpt2.onnx", "policy": "fp16-safe", "threads": 8}
  ],
  "report": {"html": true, "json": true, "atol": 0.01, "rtol": 0.01},
  "server": {"listen": "127.0.0.1:50051", "workers": 2, "cache_dir": "/var/cache/kiln"}
}
''',
    "html": b'''<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Build report</title>
  <link rel="stylesheet" href="style.css">
</head>
<body>
  <h1>Build report</h1>
  <table class="layers">
    <tr><th>Node</th><th>Op</th><th>Precision</th><th>max_abs</th></tr>
    <tr><td>/encoder/layer.0/attention</td><td>MatMul</td><td>fp16</td><td>0.0021</td></tr>
    <tr><td>/encoder/layer.0/ln</td><td>LayerNormalization</td><td>fp32</td><td>0.0001</td></tr>
  </table>
  <script src="chart.js"></script>
</body>
</html>
''',
    "shell": b'''#!/usr/bin/env bash
# Builds every model of a folder with the given policy and prints the engines' sizes.
set -euo pipefail
policy=${1:-fp32}
out=$(mktemp -d)
for model in models/*.onnx; do
  name=$(basename "$model" .onnx)
  if ! kiln build "$model" --policy "$policy" -o "$out/$name.kiln" --quiet; then
    echo "failed: $name" >&2
    continue
  fi
  du -h "$out/$name.kiln"
done
rm -rf "$out"
''',
    "png": png_bytes(),
}


def magika_features(data, beg_size=1024, end_size=1024, block_size=4096, padding=256):
    """Magika's model input for one file: the first beg_size bytes after stripping leading
    whitespace and the last end_size bytes after stripping trailing whitespace (both stripped
    when the file fits in one block), padded with `padding` (int32, beg then end)."""
    stripall = len(data) <= block_size
    beg = data[:block_size]
    beg = (beg.strip() if stripall else beg.lstrip())[:beg_size]
    end = data[-block_size:]
    end = (end.strip() if stripall else end.rstrip())[-end_size:] if end_size else b""
    b = list(beg) + [padding] * (beg_size - len(beg))
    e = [padding] * (end_size - len(end)) + list(end)
    return np.array(b + e, np.int32)


# ---- output decoding -------------------------------------------------------------------------

def ctc_decode(indices, blank=0):
    """Greedy CTC: collapse repeats, drop blanks; returns the list of class indices."""
    out, prev = [], None
    for i in indices:
        i = int(i)
        if i != prev and i != blank:
            out.append(i)
        prev = i
    return out


def components(mask):
    """Bounding boxes (y0, x0, y1, x1, pixels) of the 4-connected regions of a boolean mask, in
    a deterministic order (by their smallest flat index), by min-label propagation."""
    h, w = mask.shape
    none = h * w + 1
    labels = np.where(mask, np.arange(h * w).reshape(h, w), none)
    while True:
        p = np.pad(labels, 1, constant_values=none)
        nxt = np.minimum.reduce([labels, p[:-2, 1:-1], p[2:, 1:-1], p[1:-1, :-2], p[1:-1, 2:]])
        nxt = np.where(mask, nxt, none)
        if (nxt == labels).all():
            break
        labels = nxt
    boxes = []
    for lab in np.unique(labels[mask]):
        ys, xs = np.nonzero(labels == lab)
        boxes.append((int(ys.min()), int(xs.min()), int(ys.max()) + 1, int(xs.max()) + 1, len(ys)))
    return boxes


def yolox_boxes(raw, size=416, strides=(8, 16, 32)):
    """YOLOX head output [1, A, 5 + classes] -> (boxes x0,y0,x1,y1 in input pixels, scores)."""
    grids, steps = [], []
    for s in strides:
        n = size // s
        xv, yv = np.meshgrid(np.arange(n), np.arange(n))
        grids.append(np.stack((xv, yv), 2).reshape(-1, 2))
        steps.append(np.full((n * n, 1), s))
    grid, step = np.concatenate(grids), np.concatenate(steps)
    o = raw[0].astype(np.float64)
    xy = (o[:, :2] + grid) * step
    wh = np.exp(o[:, 2:4]) * step
    scores = o[:, 4] * o[:, 5:].max(1)
    return np.concatenate([xy - wh / 2, xy + wh / 2], 1), scores


def iou(a, b):
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def nms(boxes, scores, score_thr, iou_thr=0.45):
    """Greedy class-agnostic NMS (ddddocr's): indices kept, best first."""
    order = [int(i) for i in np.argsort(-scores) if scores[i] > score_thr]
    keep = []
    while order:
        i = order.pop(0)
        keep.append(i)
        order = [j for j in order if iou(boxes[i], boxes[j]) <= iou_thr]
    return keep
