#!/usr/bin/env python3
"""Kiln's LSTM, GRU and RNN against ONNX Runtime on random single-node models (fp32).

Each case draws a configuration: direction (forward, reverse, bidirectional), sequence length
1-6, batch 1-5, input size 1-19, hidden size 1-130 (partial blocks of 16 units included), with or
without B, sequence_lens (0 to the sequence length; entry 0 full), initial_h, initial_c and P,
clip, input_forget, linear_before_reset, opset 7 / 14 / 22, and an activation set (the defaults,
and sets of the optional functions with activation_alpha / activation_beta). W, R, B and P are
initializers; X, sequence_lens and the initial states are graph inputs. Kiln builds and runs the
model through the CLI (`kiln build`, `kiln run --threads 1|2`) and every output is compared with
ONNX Runtime's: a case fails when an element differs by more than 1e-4 * (1 + |ORT's|).

Activation alpha / beta values are always given in full: ONNX Runtime takes 0 for an alpha or
beta an activation uses but the node leaves out (ThresholdedRelu, Affine, ScaledTanh), where
Kiln follows the operator docs ("the same as of corresponding ONNX operators": ThresholdedRelu
alpha 1, Affine alpha 1 beta 0; ScaledTanh, an op without defaults, alpha 1 beta 1).

Usage: bench/recurrent_vs_ort.py [--build-dir build] [--cases N] [--seed S]
Not a test; prints the failing cases and a summary line.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
ACTIVATIONS = {
    "LSTM": [["Sigmoid", "Tanh", "Tanh"], ["HardSigmoid", "Elu", "Softsign"],
             ["Sigmoid", "ScaledTanh", "Affine"], ["LeakyRelu", "Softplus", "ThresholdedRelu"],
             ["Sigmoid", "Relu", "Relu"]],
    "GRU": [["Sigmoid", "Tanh"], ["HardSigmoid", "Elu"], ["Sigmoid", "Softsign"],
            ["LeakyRelu", "Relu"]],
    "RNN": [["Tanh"], ["Relu"], ["Elu"], ["Softplus"], ["ScaledTanh"], ["HardSigmoid"]],
}


def make_model(op, cfg, rng):
    seq, batch, inp, hid = cfg["seq"], cfg["batch"], cfg["input"], cfg["hidden"]
    dirs = 2 if cfg["direction"] == "bidirectional" else 1
    gates = GATES[op]
    bound = 1.5 / np.sqrt(inp + hid)
    inits, inputs, feeds = [], [], {}
    slots = ["X", "W", "R", "", "", "", "", ""]

    def graph_input(name, value, elem=TensorProto.FLOAT):
        inputs.append(helper.make_tensor_value_info(name, elem, list(value.shape)))
        feeds[name] = value

    def init(name, value):
        inits.append(numpy_helper.from_array(value.astype(np.float32), name))

    graph_input("X", rng.uniform(-1, 1, (seq, batch, inp)).astype(np.float32))
    init("W", rng.uniform(-bound, bound, (dirs, gates * hid, inp)))
    init("R", rng.uniform(-bound, bound, (dirs, gates * hid, hid)))
    if cfg["bias"]:
        init("B", rng.uniform(-0.5, 0.5, (dirs, 2 * gates * hid)))
        slots[3] = "B"
    if cfg["lens"]:
        lens = rng.integers(0, seq + 1, batch).astype(np.int32)
        lens[0] = seq
        graph_input("L", lens, TensorProto.INT32)
        slots[4] = "L"
    if cfg["h0"]:
        graph_input("H0", rng.uniform(-1, 1, (dirs, batch, hid)).astype(np.float32))
        slots[5] = "H0"
    if op == "LSTM" and cfg["c0"]:
        graph_input("C0", rng.uniform(-1, 1, (dirs, batch, hid)).astype(np.float32))
        slots[6] = "C0"
    if op == "LSTM" and cfg["peep"]:
        init("P", rng.uniform(-0.5, 0.5, (dirs, 3 * hid)))
        slots[7] = "P"
    while slots[-1] == "":
        slots.pop()
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    attrs = dict(hidden_size=hid, direction=cfg["direction"], activations=cfg["acts"] * dirs,
                 activation_alpha=[0.3, 0.6, 0.9, 0.4, 0.7, 0.5],
                 activation_beta=[0.25, 0.7, 0.4, 0.6, 0.8, 0.3])
    if cfg["clip"]:
        attrs["clip"] = cfg["clip"]
    if op == "LSTM" and cfg["input_forget"]:
        attrs["input_forget"] = 1
    if op == "GRU":
        attrs["linear_before_reset"] = cfg["lbr"]
    node = helper.make_node(op, slots, outs, name="rec", **attrs)
    out_info = [helper.make_tensor_value_info(o, TensorProto.FLOAT,
                                              [f"{o}_{i}" for i in range(4 if o == "Y" else 3)])
                for o in outs]
    graph = helper.make_graph([node], "recurrent", inputs, out_info, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", cfg["opset"])])
    model.ir_version = 8
    return model, feeds


def run_kiln(kiln, model, feeds, folder, threads):
    path = os.path.join(folder, "model.onnx")
    onnx.save(model, path)
    in_dir, out_dir = os.path.join(folder, "in"), os.path.join(folder, "out")
    os.makedirs(in_dir)
    os.makedirs(out_dir)
    for i, vi in enumerate(model.graph.input):
        with open(os.path.join(in_dir, f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(feeds[vi.name], vi.name).SerializeToString())
    engine = os.path.join(folder, "model.kiln")
    for cmd in (["build", path, "-o", engine, "--quiet"],
                ["run", engine, "--inputs", in_dir, "--outputs", out_dir, "--threads",
                 str(threads)]):
        r = subprocess.run([kiln, *cmd], capture_output=True, text=True)
        if r.returncode != 0:
            return None, (r.stderr or r.stdout).strip()[-300:]
    return [numpy_helper.to_array(onnx.load_tensor(os.path.join(out_dir, f"output_{i}.pb")))
            for i in range(len(model.graph.output))], None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(os.path.dirname(__file__), "..", "build"))
    ap.add_argument("--cases", type=int, default=40, help="cases per op")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    kiln = os.path.join(args.build_dir, "tools", "kiln")
    rng = np.random.default_rng(args.seed)
    ran, failed, worst = 0, 0, 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for op in ("LSTM", "GRU", "RNN"):
            for k in range(args.cases):
                cfg = dict(seq=int(rng.integers(1, 7)), batch=int(rng.integers(1, 6)),
                           input=int(rng.integers(1, 20)),
                           hidden=int(rng.choice([1, 5, 16, 17, 33, 64, 130])),
                           direction=["forward", "reverse", "bidirectional"][k % 3],
                           bias=k % 4 != 1, lens=k % 2 == 1, h0=k % 3 != 0, c0=k % 5 != 0,
                           peep=k % 2 == 0, acts=ACTIVATIONS[op][k % len(ACTIVATIONS[op])],
                           clip=[0.7, 3.0][k % 2] if k % 4 == 3 else None,
                           input_forget=k % 7 == 3, lbr=k % 2, opset=[7, 14, 22][k % 3])
                model, feeds = make_model(op, cfg, rng)
                so = ort.SessionOptions()
                so.log_severity_level = 3
                want = ort.InferenceSession(model.SerializeToString(), so,
                                            providers=["CPUExecutionProvider"]).run(None, feeds)
                folder = os.path.join(tmp, f"{op}_{k}")
                os.makedirs(folder)
                got, err = run_kiln(kiln, model, feeds, folder, 1 + k % 2)
                ran += 1
                if err:
                    failed += 1
                    print(f"{op} {cfg}: Kiln failed: {err}")
                    continue
                rel = max(float(np.max(np.abs(g.astype(np.float64) - w) / (1 + np.abs(w))))
                          if w.size else 0.0 for g, w in zip(got, want))
                worst = max(worst, rel)
                if rel > 1e-4:
                    failed += 1
                    print(f"{op} {cfg}: max |Kiln - ORT| / (1 + |ORT|) = {rel:.3g}")
    print(f"{ran} cases, {failed} failed, largest |Kiln - ORT| / (1 + |ORT|) {worst:.3g}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
