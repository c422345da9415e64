#!/usr/bin/env python3
"""Kiln against ONNX Runtime over every workload, in one invocation, printed as one table.

For each workload and thread count T, ONNX Runtime (CPU provider, ORT_ENABLE_ALL,
intra_op_num_threads=T, inter_op_num_threads=1) and Kiln (`kiln build --policy P`, then
`kiln bench --threads T`, median latency of the loaded engine) run back to back on the same
batch-1 inputs, in --rounds rounds (default 3) of ORT then every Kiln engine; each side keeps its
lowest round median, so a round slowed by load elsewhere on the machine counts for neither. Kiln
is built under fp32, bf16-layernorm (plain bf16 on models without LayerNorm) and fp16; each
engine's outputs (`kiln run`) are compared with ORT's fp32 outputs: max_abs (the largest over the
outputs) and cosine (the lowest over the outputs). ORT ms is also a median.

Workloads (--workloads takes a regular expression over these names):
  bert_base        run_bert.py's onnx.helper BERT-base encoder (hidden 768, 12 layers, 12 heads,
                   sequence 128; input: the embedded sequence)
  bert_base_torch  a BERT-base with embeddings and attention mask exported by PyTorch
                   (bert_torch.py, run with /usr/bin/python3 and Debian's python3-torch; skipped
                   when that is missing; the export is kept in --out until bert_torch.py changes);
                   token ids random, the last 28 positions masked as padding
  light_*          ../shared/onnx-conformance/light (ResNet-50, VGG-19, DenseNet-121, ...), whose
                   ConstantOfShape weights are replaced by random He-scaled initializers (IR raised
                   to 4) so their outputs are not constant
  mobilenet_v2     generated here: MobileNetV2 1.0 at 224x224 (inverted residual blocks, Relu6 as
                   Clip, depthwise Conv), BatchNorm folded into Conv biases, 3.5M random parameters
  mnist_8, super_resolution_10, yunet, silero_vad_ifless
                   ../shared/trained-models (their shipped test inputs where there are some)
  silero_vad       silero-vad 6.2.3's model with nested Ifs (8k/16k branches, Conv and LSTM
                   inside), fetched by tests/real_models/fetch.py into $KILN_REAL_MODELS_CACHE or
                   build/real-models (skipped until fetched); the inputs of silero_vad_ifless
  lstm_2layer      generated here (lstm_model.py): two stacked LSTM nodes, hidden 512, input 512,
                   100 steps, batch 1, random weights
  gemm             kiln_bench: Kiln's fp32 and bf16 GEMM at large shapes in GFLOP/s, against the
                   fp32 peak of an AVX-512 FMA loop measured in the same run, and the rate of
                   the fp32 micro-kernel alone with its operands in L1 (the tile loop's ceiling)

Usage: bench/run_all.py [--build-dir build] [--threads 1,2] [--out DIR] [--workloads REGEX]
                        [--rounds N] [--quick]
Needs `kiln` and `kiln_bench` built in --build-dir. Not a test: nothing asserts speed. A workload
Kiln cannot build or run is reported under the table, never fatal.
"""
import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
except ImportError as e:
    sys.exit("run_all.py: %s; scripts/install-bench-deps.sh installs what the benchmarks need" % e)

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.normpath(os.path.join(HERE, "..", "..", "shared"))
sys.path.insert(0, HERE)
import lstm_model  # noqa: E402  (the onnx.helper stacked-LSTM generator)
import run_bert  # noqa: E402  (the onnx.helper BERT-base generator)

POLICIES = ("fp32", "bf16-layernorm", "fp16")
SHORT = {"fp32": "fp32", "bf16-layernorm": "bf16-ln", "fp16": "fp16"}
KILN_TIMEOUT_S = 1200


class Skip(Exception):
    """A workload that cannot be prepared on this machine (the message says why)."""


# ----------------------------------------------------------------------------- workloads
def bert_base(out, rng):
    path = os.path.join(out, "model.onnx")
    run_bert.bert_model(path, rng)
    return path, [rng.standard_normal((1, run_bert.SEQ, run_bert.HIDDEN)).astype(np.float32)]


def bert_base_torch(out, rng):
    path = os.path.join(out, "model.onnx")
    exporter = os.path.join(HERE, "bert_torch.py")
    if not os.path.exists(path) or os.path.getmtime(path) < os.path.getmtime(exporter):
        r = subprocess.run(["/usr/bin/python3", exporter, path], capture_output=True, text=True)
        if r.returncode != 0:
            raise Skip("PyTorch export failed (needs Debian's python3-torch): " + last_line(r))
    ids = rng.integers(0, 30522, (1, 128), dtype=np.int64)
    mask = np.ones((1, 128), dtype=np.int64)
    mask[:, 100:] = 0  # padded tail, as a batch of unequal sentences has
    return path, [ids, mask]


def random_param(model, name, shape, rng):
    """Random value of a weight of the given shape, scaled for the op that reads it."""
    users = {}
    for n in model.graph.node:
        for k, x in enumerate(n.input):
            users.setdefault(x, (n, k))
    node, k = users[name]
    while node.op_type in ("Unsqueeze", "Reshape") and k == 0:  # reshaped on the way to its use
        node, k = users[node.output[0]]
    if node.op_type == "BatchNormalization" and k == 1 and \
            users[node.output[0]][0].op_type in ("Sum", "Add"):
        # The last scale of a residual branch starts small, as in training recipes: without it
        # the residual sums double the variance per block and the logits saturate the softmax.
        return rng.uniform(0.1, 0.3, shape).astype(np.float32)
    if node.op_type == "Mul" or (node.op_type == "BatchNormalization" and k in (1, 4)):
        return rng.uniform(0.8, 1.2, shape).astype(np.float32)  # scale or variance
    if len(shape) < 2:
        return (0.05 * rng.standard_normal(shape)).astype(np.float32)  # bias or mean
    fan_in = np.prod(shape[1:])
    if node.op_type == "Gemm" and not any(a.name == "transB" and a.i for a in node.attribute):
        fan_in = shape[0]
    return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


def light(source):
    def make(out, rng):
        model = onnx.load(source)
        g = model.graph
        shapes = {i.name: numpy_helper.to_array(i) for i in g.initializer}
        replaced = [n for n in g.node if n.op_type == "ConstantOfShape" and n.input[0] in shapes]
        for n in replaced:
            value = random_param(model, n.output[0], tuple(shapes[n.input[0]]), rng)
            g.initializer.append(numpy_helper.from_array(value, n.output[0]))
        keep = [n for n in g.node if n not in replaced]
        del g.node[:]
        g.node.extend(keep)
        used = {x for n in g.node for x in n.input}
        for field in (g.initializer, g.input):  # IR 3 lists the shape initializers as inputs
            kept = [i for i in field if i.name in used]
            del field[:]
            field.extend(kept)
        model.ir_version = max(model.ir_version, 4)  # initializers need not be graph inputs
        path = os.path.join(out, "model.onnx")
        onnx.save(model, path)
        return path, [rng.standard_normal(s).astype(np.float32) for s in input_shapes(model)]
    return make


def mobilenet_v2(out, rng):
    nodes, inits = [], []

    def tensor(value):
        name = f"w{len(inits)}"
        inits.append(numpy_helper.from_array(np.asarray(value, dtype=np.float32), name))
        return name

    def conv(x, cin, cout, k=1, stride=1, group=1, act=True):
        fan_in = cin // group * k * k
        w = rng.standard_normal((cout, cin // group, k, k)) * np.sqrt((2.0 if act else 1.0) / fan_in)
        b = 0.01 * rng.standard_normal(cout)
        y = f"t{len(nodes)}"
        nodes.append(helper.make_node("Conv", [x, tensor(w), tensor(b)], [y], kernel_shape=[k, k],
                                      strides=[stride, stride], pads=[k // 2] * 4, group=group))
        if act:
            nodes.append(helper.make_node("Clip", [y, zero, six], [y + "_relu6"]))
            y += "_relu6"
        return y

    zero, six = tensor(0.0), tensor(6.0)
    x = conv("input", 3, 32, k=3, stride=2)
    cin = 32
    # (expansion t, channels c, repeats n, first stride s), as in the MobileNetV2 paper
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                       (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            h = conv(x, cin, hidden) if t != 1 else x
            h = conv(h, hidden, hidden, k=3, stride=stride, group=hidden)
            h = conv(h, hidden, c, act=False)
            if stride == 1 and cin == c:
                nodes.append(helper.make_node("Add", [x, h], [h + "_res"]))
                h += "_res"
            x, cin = h, c
    x = conv(x, cin, 1280)
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pool"]))
    nodes.append(helper.make_node("Flatten", ["pool"], ["flat"]))
    fc_w = tensor(rng.standard_normal((1000, 1280)) * np.sqrt(1.0 / 1280))
    nodes.append(helper.make_node("Gemm", ["flat", fc_w, tensor(np.zeros(1000))], ["logits"],
                                  transB=1))
    graph = helper.make_graph(
        nodes, "mobilenet_v2",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1000])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    path = os.path.join(out, "model.onnx")
    onnx.save(model, path)
    return path, [rng.standard_normal((1, 3, 224, 224)).astype(np.float32)]


def trained(folder, random_inputs=None):
    def make(out, rng):
        path = os.path.join(SHARED, "trained-models", folder, "model.onnx")
        shipped = sorted(glob.glob(os.path.join(os.path.dirname(path), "test_data_set_0",
                                                "input_*.pb")))
        if shipped:
            return path, [numpy_helper.to_array(onnx.load_tensor(p)) for p in shipped]
        return path, random_inputs(rng)
    return make


def yunet_inputs(rng):
    return [rng.uniform(0, 255, (1, 3, 640, 640)).astype(np.float32)]  # raw pixel values


def silero_inputs(rng):
    audio = (0.1 * rng.standard_normal((1, 512))).astype(np.float32)  # 32 ms at 16 kHz
    return [audio, np.array(16000, dtype=np.int64), np.zeros((2, 1, 128), dtype=np.float32)]


def fetched(folder, random_inputs):
    """A model tests/real_models/fetch.py extracts (its cache folder, as fetch.py picks it)."""
    def make(out, rng):
        cache = os.environ.get("KILN_REAL_MODELS_CACHE") or \
            os.path.join(HERE, "..", "build", "real-models")
        path = os.path.join(cache, folder, "model.onnx")
        if not os.path.exists(path):
            raise Skip(f"{path} is missing: tests/real_models/fetch.py --only {folder} fetches it")
        return path, random_inputs(rng)
    return make


def silero_nested_inputs(rng):
    """silero_inputs in this model's input order: input, state, sr."""
    audio, sr, state = silero_inputs(rng)
    return [audio, state, sr]


def lstm_2layer(out, rng):
    path = os.path.join(out, "model.onnx")
    shape = lstm_model.lstm_model(path, rng)
    return path, [rng.standard_normal(shape).astype(np.float32)]


def workloads():
    w = [("bert_base", bert_base), ("bert_base_torch", bert_base_torch)]
    for p in sorted(glob.glob(os.path.join(SHARED, "onnx-conformance", "light", "light_*.onnx"))):
        w.append((os.path.basename(p)[:-len(".onnx")], light(p)))
    w.append(("mobilenet_v2", mobilenet_v2))
    w += [("mnist_8", trained("mnist_8")), ("super_resolution_10", trained("super_resolution_10")),
          ("yunet", trained("yunet", yunet_inputs)),
          ("silero_vad_ifless", trained("silero_vad_ifless", silero_inputs)),
          ("silero_vad", fetched("silero_vad", silero_nested_inputs))]
    w.append(("lstm_2layer", lstm_2layer))
    return w


# ----------------------------------------------------------------------------- helpers
def input_names(model):
    inits = {i.name for i in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits]


def input_shapes(model):
    inits = {i.name for i in model.graph.initializer}
    return [[d.dim_value or 1 for d in i.type.tensor_type.shape.dim]
            for i in model.graph.input if i.name not in inits]


def last_line(result):
    lines = (result.stderr or result.stdout or "").strip().splitlines()
    if result.returncode < 0:
        return f"crashed with signal {-result.returncode}" + (f" ({lines[-1]})" if lines else "")
    return lines[-1] if lines else f"exit code {result.returncode}"


def ort_session(model_path, threads):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])


def ort_median_ms(sess, feeds, runs, warmup):
    for _ in range(warmup):
        sess.run(None, feeds)
    ms = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        ms.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ms)


def kiln(build_dir, *cmd):
    exe = os.path.join(build_dir, "tools", "kiln")
    try:
        return subprocess.run([exe, *cmd], capture_output=True, text=True, timeout=KILN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd, 1, "", f"timed out after {KILN_TIMEOUT_S} s")


def compare(kiln_dir, reference):
    """(max_abs, cosine) of Kiln's outputs against ORT's: worst over the outputs."""
    max_abs, cosine = 0.0, 1.0
    for i, ref in enumerate(reference):
        got = numpy_helper.to_array(onnx.load_tensor(os.path.join(kiln_dir, f"output_{i}.pb")))
        if got.shape != ref.shape:
            raise ValueError(f"output {i} has shape {got.shape}, ORT {ref.shape}")
        a, b = got.astype(np.float64).ravel(), ref.astype(np.float64).ravel()
        max_abs = max(max_abs, float(np.max(np.abs(a - b))) if a.size else 0.0)
        na, nb = np.linalg.norm(a), np.linalg.norm(b)
        cos = 1.0 if na == nb == 0 else float(a @ b / (na * nb)) if na * nb else 0.0
        cosine = min(cosine, cos)
    return max_abs, cosine


def write_inputs(folder, names, arrays):
    os.makedirs(folder, exist_ok=True)
    for f in glob.glob(os.path.join(folder, "*.pb")):
        os.remove(f)
    for i, (name, a) in enumerate(zip(names, arrays)):
        with open(os.path.join(folder, f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(a, name).SerializeToString())


# ----------------------------------------------------------------------------- table
COLS = [("workload", 22, "<"), ("thr", 3, ">"), ("ORT ms", 8, ">")] + \
       [(SHORT[p], 8, ">") for p in POLICIES] + [(SHORT[p], 7, ">") for p in POLICIES] + \
       [(SHORT[p], 17, "<") for p in POLICIES]


def row(cells):
    return " ".join(f"{c:{a}{w}}" for c, (_, w, a) in zip(cells, COLS)).rstrip()


def print_header():
    widths = [w for _, w, _ in COLS]
    groups = [(" ", sum(widths[:3]) + 2), ("Kiln ms (median)", sum(widths[3:6]) + 2),
              ("ORT ms / Kiln ms", sum(widths[6:9]) + 2),
              ("vs ORT fp32: max_abs cosine", sum(widths[9:]) + 2)]
    print(" | ".join(f"{g:^{w}}" for g, w in groups).rstrip())
    line = row([c for c, _, _ in COLS])
    print(line)
    print("-" * len(line))


def run_workload(name, make, args, threads, notes):
    out = os.path.join(args.out, name)
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    model_path, arrays = make(out, rng)
    names = input_names(onnx.load(model_path, load_external_data=False))
    in_dir = os.path.join(out, "in")
    write_inputs(in_dir, names, arrays)
    feeds = dict(zip(names, arrays))
    reference = ort_session(model_path, threads[0]).run(None, feeds)

    engines, accuracy, build_errors = {}, {}, {}
    for p in POLICIES:
        engine = os.path.join(out, f"{p}.kiln")
        r = kiln(args.build_dir, "build", model_path, "--policy", p, "-o", engine, "--quiet")
        if r.returncode != 0:
            build_errors[p] = last_line(r)
            continue
        out_dir = os.path.join(out, f"out_{p}")
        os.makedirs(out_dir, exist_ok=True)
        r = kiln(args.build_dir, "run", engine, "--inputs", in_dir, "--outputs", out_dir,
                 "--threads", str(threads[0]))
        if r.returncode != 0:
            notes.append(f"{name} {p}: kiln run failed: {last_line(r)}")
            continue
        engines[p] = engine
        try:
            accuracy[p] = compare(out_dir, reference)
        except ValueError as e:
            notes.append(f"{name} {p}: outputs not comparable: {e}")
    if len(build_errors) == len(POLICIES) and len(set(build_errors.values())) == 1:
        raise Skip("kiln build fails under every policy: " + build_errors[POLICIES[0]])
    notes += [f"{name} {p}: kiln build failed: {e}" for p, e in build_errors.items()]

    for t in threads:
        # --rounds rounds of ORT then each Kiln engine, back to back; each side keeps its lowest
        # round median: a round that a burst of load elsewhere on the machine slowed down is
        # dropped for both alike.
        sess = ort_session(model_path, t)
        ort_ms, kiln_ms, failed = float("inf"), {}, set()
        for _ in range(args.rounds):
            ort_ms = min(ort_ms, ort_median_ms(sess, feeds, args.runs, args.warmup))
            for p, engine in engines.items():
                if p in failed:
                    continue
                r = kiln(args.build_dir, "bench", engine, "--inputs", in_dir, "--runs",
                         str(args.runs), "--warmup", str(args.warmup), "--threads", str(t))
                m = re.search(r"median ([0-9.]+)", r.stdout)
                if r.returncode != 0 or not m:
                    notes.append(f"{name} {p} threads {t}: kiln bench failed: {last_line(r)}")
                    failed.add(p)
                    kiln_ms.pop(p, None)
                    continue
                kiln_ms[p] = min(kiln_ms.get(p, float("inf")), float(m.group(1)))
        cells = [name, t, f"{ort_ms:.2f}"]
        cells += [f"{kiln_ms[p]:.2f}" if p in kiln_ms else "-" for p in POLICIES]
        cells += [f"{ort_ms / kiln_ms[p]:.2f}" if p in kiln_ms else "-" for p in POLICIES]
        cells += [f"{accuracy[p][0]:.1e} {accuracy[p][1]:.6f}" if p in accuracy else "-"
                  for p in POLICIES]
        print(row(cells), flush=True)


# ----------------------------------------------------------------------------- GEMM
def run_gemm(args, threads, notes):
    exe = os.path.join(args.build_dir, "bench", "kiln_bench")
    print("\nGEMM: Kiln's fastest MatMul kernel on this CPU (kiln_bench, best of "
          f"{args.repetitions}) against the fp32 peak of an AVX-512 FMA loop; % of fp32 peak")
    hdr = (f"{'shape MxKxN':16} {'B':6} {'thr':>3} {'peak GF/s':>9} {'fp32 GF/s':>9} {'%peak':>6} "
           f"{'bf16 GF/s':>9} {'%peak':>6} {'bf16/fp32':>9}")
    print(hdr)
    print("-" * len(hdr))
    tiles = []
    for t in threads:
        r = subprocess.run([exe, f"--benchmark_filter=^Gemm/|^GemmPacked/|"
                                 f"^FmaPeak/threads:{t}/|^GemmTile/float/threads:{t}/",
                            "--benchmark_format=json",
                            f"--benchmark_repetitions={args.repetitions}"],
                           capture_output=True, text=True, env=dict(os.environ,
                                                                    OMP_NUM_THREADS=str(t)))
        if r.returncode != 0:
            notes.append(f"gemm threads {t}: kiln_bench failed: {last_line(r)}")
            continue
        best = {}
        for b in json.loads(r.stdout)["benchmarks"]:
            if b.get("run_type") == "aggregate" or "GFLOPS" not in b:
                continue
            key = b["run_name"].split("/min_time")[0]  # drop the run options
            best[key] = max(best.get(key, 0.0), b["GFLOPS"])
        peak = best.get(f"FmaPeak/threads:{t}")
        if peak is None:
            notes.append(f"gemm threads {t}: no FMA peak (CPU without AVX-512F)")
        pct = lambda v: f"{100 * v / peak:6.1f}" if peak else f"{'-':>6}"
        # B "plain": an activation, packed on every call; "weight": a constant packed at build
        # time, as engines run their weights.
        for shape in sorted({k.split("/")[2] for k in best if k.startswith("Gemm/")},
                            key=lambda s: [int(d) for d in s.split("x")]):
            for kind, prefix in (("plain", "Gemm"), ("weight", "GemmPacked")):
                f32 = best.get(f"{prefix}/float/{shape}")
                bf16 = best.get(f"{prefix}/bfloat16/{shape}")
                if not f32 or not bf16:
                    notes.append(f"gemm {shape} ({kind} B) threads {t}: a dtype did not run")
                    continue
                print(f"{shape:16} {kind:6} {t:3} {peak or 0:9.1f} {f32:9.1f} {pct(f32)} "
                      f"{bf16:9.1f} {pct(bf16)} {bf16 / f32:9.2f}")
        tile = best.get(f"GemmTile/float/threads:{t}")
        if tile:
            tiles.append(f"  threads {t}: {tile:.1f} GF/s, {pct(tile).strip()}% of the fp32 peak")
    if tiles:
        print("the fp32 6 x 64 micro-kernel alone, its operands in L1 (the ceiling of the GEMM's "
              "tile loop):")
        print("\n".join(tiles))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "kiln_run_all"),
                    help="work folder: models, inputs, engines, outputs")
    ap.add_argument("--workloads", default="", help="regular expression over workload names")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of ORT and Kiln per workload and thread count; each side's "
                         "lowest round median is kept (default 3)")
    ap.add_argument("--quick", action="store_true",
                    help="5 timed runs after 1 warm-up in 1 round, not 20/3 in --rounds")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    threads = [int(t) for t in args.threads.split(",")]
    args.runs, args.warmup, args.repetitions = (5, 1, 1) if args.quick else (20, 3, 3)
    if args.quick:
        args.rounds = 1
    selected = [(n, m) for n, m in workloads() if re.search(args.workloads, n)]
    os.makedirs(args.out, exist_ok=True)
    notes = []

    print(f"Kiln ({os.path.abspath(args.build_dir)}) vs ONNX Runtime {ort.__version__}, batch 1, "
          f"{args.runs} timed runs after {args.warmup} warm-up, lowest median of {args.rounds} "
          f"round(s); threads {args.threads} (ORT intra_op_num_threads, inter 1; kiln --threads)\n")
    if selected:
        print_header()
    for name, make in selected:
        try:
            run_workload(name, make, args, threads, notes)
        except Skip as e:
            notes.append(f"{name}: skipped: {e}")
        except Exception as e:  # one broken workload must not end the run
            notes.append(f"{name}: skipped: {type(e).__name__}: {str(e).strip()[:300]}")
    if re.search(args.workloads, "gemm"):
        run_gemm(args, threads, notes)
    if notes:
        print("\nnotes:")
        for n in notes:
            print("  " + n)


if __name__ == "__main__":
    sys.exit(main())
