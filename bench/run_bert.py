#!/usr/bin/env python3
"""Kiln vs ONNX Runtime at the BERT-base shapes, measured in the same run.

1. Generates a BERT-base-shaped encoder (hidden 768, 12 heads, 12 layers, FFN 3072, sequence
   128, batch 1, LayerNormalization, GELU via Erf, random weights; the input is the embedded
   sequence [1, 128, 768]) as ONNX opset 17.
2. Times the MatMul kernels at that model's shapes in fp32, bf16 and fp16 with kiln_bench
   (the kernel the registry picks on this CPU, and the reference kernel), and ONNX Runtime's
   MatMul on the same shapes (fp32; fp16 when this ORT build has a CPU fp16 MatMul; ORT has no
   CPU bf16 MatMul) with the same thread count.
3. Times the whole encoder with `kiln build --policy fp32|bf16|fp16` and `kiln run --repeat`
   (latency of the loaded engine, best of the repeats) against ORT's fp32 session.run.

Usage: bench/run_bert.py [--build-dir build] [--threads 2] [--out /tmp/kiln_bert]
Not a test: nothing asserts speed.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HIDDEN, HEADS, LAYERS, FFN, SEQ = 768, 12, 12, 3072, 128
HEAD = HIDDEN // HEADS

# name, batch, M, K, N, B is a weight (constant) rather than an activation
SHAPES = [
    ("qkv_out_768x768", 1, SEQ, HIDDEN, HIDDEN, True),
    ("ffn_up_768x3072", 1, SEQ, HIDDEN, FFN, True),
    ("ffn_down_3072x768", 1, SEQ, FFN, HIDDEN, True),
    ("attn_scores_12x128x64x128", HEADS, SEQ, HEAD, SEQ, False),
    ("attn_context_12x128x128x64", HEADS, SEQ, SEQ, HEAD, False),
]


def bert_model(path, rng):
    nodes, inits = [], []

    def w(name, shape, scale=0.02):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def const(name, values, dtype=np.int64):
        inits.append(numpy_helper.from_array(np.array(values, dtype=dtype), name))
        return name

    def node(op, ins, outs, **attrs):
        nodes.append(helper.make_node(op, ins, outs, **attrs))
        return outs[0]

    split_heads = const("split_heads", [1, SEQ, HEADS, HEAD])
    merge_heads = const("merge_heads", [1, SEQ, HIDDEN])
    scale = const("scale", 1.0 / np.sqrt(HEAD), np.float32)
    half, one = const("half", 0.5, np.float32), const("one", 1.0, np.float32)
    rsqrt2 = const("rsqrt2", 1.0 / np.sqrt(2.0), np.float32)
    x = "hidden"
    for l in range(LAYERS):
        p = f"l{l}_"

        def linear(inp, k, n, name):
            y = node("MatMul", [inp, w(p + name + "_w", (k, n))], [p + name + "_mm"])
            return node("Add", [y, w(p + name + "_b", (n,))], [p + name])

        def heads(t, perm, name):
            r = node("Reshape", [t, split_heads], [p + name + "_r"])
            return node("Transpose", [r], [p + name + "_t"], perm=perm)

        q = heads(linear(x, HIDDEN, HIDDEN, "q"), [0, 2, 1, 3], "qh")
        k = heads(linear(x, HIDDEN, HIDDEN, "k"), [0, 2, 3, 1], "kh")
        v = heads(linear(x, HIDDEN, HIDDEN, "v"), [0, 2, 1, 3], "vh")
        s = node("Mul", [node("MatMul", [q, k], [p + "scores"]), scale], [p + "scaled"])
        probs = node("Softmax", [s], [p + "probs"], axis=-1)
        ctx = node("MatMul", [probs, v], [p + "ctx"])
        ctx = node("Transpose", [ctx], [p + "ctx_t"], perm=[0, 2, 1, 3])
        ctx = node("Reshape", [ctx, merge_heads], [p + "ctx_r"])
        attn = linear(ctx, HIDDEN, HIDDEN, "o")
        x = node("LayerNormalization", [node("Add", [x, attn], [p + "res1"]),
                                         w(p + "ln1_g", (HIDDEN,), 1.0), w(p + "ln1_b", (HIDDEN,))],
                 [p + "ln1"], axis=-1, epsilon=1e-12)
        h = linear(x, HIDDEN, FFN, "ffn1")
        erf = node("Erf", [node("Mul", [h, rsqrt2], [p + "g0"])], [p + "g1"])
        g = node("Mul", [node("Mul", [h, half], [p + "g2"]), node("Add", [erf, one], [p + "g3"])],
                 [p + "gelu"])
        f = linear(g, FFN, HIDDEN, "ffn2")
        x = node("LayerNormalization", [node("Add", [x, f], [p + "res2"]),
                                         w(p + "ln2_g", (HIDDEN,), 1.0), w(p + "ln2_b", (HIDDEN,))],
                 [p + "ln2"], axis=-1, epsilon=1e-12)
    nodes.append(helper.make_node("Identity", [x], ["output"]))
    graph = helper.make_graph(
        nodes, "bert_base_encoder",
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, [1, SEQ, HIDDEN])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, SEQ, HIDDEN])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def ort_session(model, threads):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def time_call(fn, min_time=0.3):
    fn()
    fn()
    best, total, n = float("inf"), 0.0, 0
    while total < min_time or n < 5:
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        best, total, n = min(best, dt), total + dt, n + 1
    return best


def ort_matmul_ms(shape, dtype, threads, rng):
    name, batch, m, k, n, weight = shape
    np_t = {"float": np.float32, "float16": np.float16}[dtype]
    onnx_t = {"float": TensorProto.FLOAT, "float16": TensorProto.FLOAT16}[dtype]
    a_shape = [batch, m, k] if batch > 1 else [m, k]
    b_shape = [batch, k, n] if batch > 1 else [k, n]
    a = rng.uniform(-1, 1, a_shape).astype(np_t)
    b = rng.uniform(-1, 1, b_shape).astype(np_t)
    inputs = [helper.make_tensor_value_info("a", onnx_t, a_shape)]
    inits = []
    if weight:
        inits.append(numpy_helper.from_array(b, "b"))
    else:
        inputs.append(helper.make_tensor_value_info("b", onnx_t, b_shape))
    y_shape = a_shape[:-1] + [n]
    g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "mm", inputs,
                          [helper.make_tensor_value_info("y", onnx_t, y_shape)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    try:
        sess = ort_session(model, threads)
    except Exception as e:  # no CPU kernel for this dtype in this ORT build
        return None
    feeds = {"a": a} if weight else {"a": a, "b": b}
    try:
        return time_call(lambda: sess.run(None, feeds)) * 1e3
    except Exception:
        return None


def kiln_bench_ms(build_dir, threads):
    exe = os.path.join(build_dir, "bench", "kiln_bench")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    # Repetitions, keeping the best: the cores may be shared, and an OpenMP barrier waiting for a
    # preempted thread costs a whole time slice.
    out = subprocess.run([exe, "--benchmark_filter=^MatMul/", "--benchmark_format=json",
                          "--benchmark_repetitions=5"],
                         check=True, capture_output=True, text=True, env=env).stdout
    results = {}
    for b in json.loads(out)["benchmarks"]:
        if b.get("run_type") == "aggregate":
            continue
        _, dtype, which, shape = b["name"].split("/")[:4]
        r = (b["real_time"], b.get("GFLOPS", 0), b.get("label", ""))
        key = (dtype, which, shape)
        if key not in results or r[0] < results[key][0]:
            results[key] = r
    return results


def write_tensor(path, array):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(array).SerializeToString())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--build-dir", default=os.path.join(here, "..", "build"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "kiln_bert"))
    ap.add_argument("--skip-model", action="store_true", help="kernel table only")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    os.makedirs(args.out, exist_ok=True)

    print(f"threads: {args.threads} (Kiln OMP_NUM_THREADS, ORT intra_op_num_threads)")
    kiln = kiln_bench_ms(args.build_dir, args.threads)
    ort = {(dt, s[0]): ort_matmul_ms(s, dt, args.threads, rng) for s in SHAPES
           for dt in ("float", "float16")}

    print("\nMatMul at BERT-base shapes (ms, best of 5 repetitions; ratio = ORT fp32 time / Kiln time, "
          ">1 means Kiln is faster)")
    hdr = f"{'shape':28} {'dtype':9} {'isa':7} {'kiln ms':>8} {'GFLOP/s':>8} {'ref ms':>8} " \
          f"{'ORT ms':>8} {'ORT f32':>8} {'vs ORT f32':>10} {'vs same dt':>10}"
    print(hdr)
    print("-" * len(hdr))
    for s in SHAPES:
        for dt in ("float", "bfloat16", "float16"):
            best = kiln.get((dt, "best", s[0]))
            refr = kiln.get((dt, "ref", s[0]))
            if best is None:
                continue
            o32 = ort[("float", s[0])]
            osame = ort.get((dt, s[0]))
            fmt = lambda v: f"{v:8.3f}" if v is not None else f"{'n/a':>8}"
            ratio = lambda o: f"{o / best[0]:10.2f}" if o is not None else f"{'n/a':>10}"
            print(f"{s[0]:28} {dt:9} {best[2]:7} {best[0]:8.3f} {best[1]:8.1f} "
                  f"{fmt(refr[0] if refr else None)} {fmt(osame)} {fmt(o32)} {ratio(o32)} "
                  f"{ratio(osame)}")

    if args.skip_model:
        return
    model_path = os.path.join(args.out, "bert_base.onnx")
    bert_model(model_path, rng)
    x = rng.standard_normal((1, SEQ, HIDDEN)).astype(np.float32)
    sess = ort_session(onnx.load(model_path), args.threads)
    ort_ms = time_call(lambda: sess.run(None, {"hidden": x}), 1.0) * 1e3

    kiln_exe = os.path.join(args.build_dir, "tools", "kiln")
    in_dir, out_dir = os.path.join(args.out, "in"), os.path.join(args.out, "out")
    os.makedirs(in_dir, exist_ok=True)
    os.makedirs(out_dir, exist_ok=True)
    write_tensor(os.path.join(in_dir, "input_0.pb"), x)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    print("\nBERT-base encoder, 12 layers, sequence 128, batch 1 (ms)")
    print(f"{'precision':10} {'kiln (engine latency)':>24} {'ORT session.run':>16} {'ratio':>7}")
    for policy in ("fp32", "bf16", "fp16"):
        engine = os.path.join(args.out, f"bert_{policy}.kiln")
        b = subprocess.run([kiln_exe, "build", model_path, "--policy", policy, "-o", engine],
                           capture_output=True, text=True, env=env)
        if b.returncode != 0:
            msg = (b.stderr.strip().splitlines() or ["?"])[-1]
            print(f"{policy:10} {'not built: ' + msg[:90]}")
            continue
        r = subprocess.run([kiln_exe, "run", engine, "--inputs", in_dir, "--outputs", out_dir,
                            "--repeat", "10"], check=True, capture_output=True, text=True, env=env)
        kiln_ms = float(r.stdout.split("latency over")[1].split("min ")[1].split(" ms")[0])
        y = numpy_helper.to_array(onnx.load_tensor(os.path.join(out_dir, "output_0.pb")))
        err = float(np.max(np.abs(y.astype(np.float32) - sess.run(None, {"hidden": x})[0])))
        print(f"{policy:10} {kiln_ms:24.2f} {ort_ms:16.2f} {ort_ms / kiln_ms:7.2f}   "
              f"(max |kiln - ORT fp32| = {err:.2e})")


if __name__ == "__main__":
    sys.exit(main())
