#!/usr/bin/env python3
"""A stacked LSTM written with onnx.helper, for bench/run_all.py's lstm_2layer workload.

Two LSTM nodes (opset 14, forward, default activations, hidden 512, input 512), the first one's
Y [seq, 1, batch, hidden] squeezed to the second one's X; the model's output is the second one's
Y. Weights uniform in +-1/sqrt(hidden) (PyTorch's LSTM initialisation), biases included, no
initial states. The input is [seq, batch, input] = [100, 1, 512].

Usage: bench/lstm_model.py OUT.onnx [--layers N] [--hidden H] [--input I] [--seq S] [--batch B]
(writes the model; run_all.py generates it itself, it is not committed).
"""
import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LAYERS, HIDDEN, INPUT, SEQ, BATCH = 2, 512, 512, 100, 1


def lstm_model(path, rng, layers=LAYERS, hidden=HIDDEN, input_size=INPUT, seq=SEQ, batch=BATCH):
    """Writes the model to `path`; returns the shape of its one input."""
    nodes, inits = [], []
    bound = 1.0 / np.sqrt(hidden)

    def weight(name, shape):
        inits.append(numpy_helper.from_array(
            rng.uniform(-bound, bound, shape).astype(np.float32), name))
        return name

    inits.append(numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"))
    x, width = "x", input_size
    for i in range(layers):
        w = weight(f"W{i}", (1, 4 * hidden, width))
        r = weight(f"R{i}", (1, 4 * hidden, hidden))
        b = weight(f"B{i}", (1, 8 * hidden))
        y = f"y{i}"
        nodes.append(helper.make_node("LSTM", [x, w, r, b], [y], name=f"lstm{i}",
                                      hidden_size=hidden))
        if i + 1 < layers:
            nodes.append(helper.make_node("Squeeze", [y, "axis1"], [f"x{i + 1}"],
                                          name=f"squeeze{i}"))
            x, width = f"x{i + 1}", hidden
    graph = helper.make_graph(
        nodes, "lstm_stack",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, batch, input_size])],
        [helper.make_tensor_value_info(f"y{layers - 1}", TensorProto.FLOAT,
                                       [seq, 1, batch, hidden])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    onnx.save(model, path)
    return [seq, batch, input_size]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=LAYERS)
    ap.add_argument("--hidden", type=int, default=HIDDEN)
    ap.add_argument("--input", type=int, default=INPUT)
    ap.add_argument("--seq", type=int, default=SEQ)
    ap.add_argument("--batch", type=int, default=BATCH)
    a = ap.parse_args()
    lstm_model(a.out, np.random.default_rng(0), a.layers, a.hidden, a.input, a.seq, a.batch)


if __name__ == "__main__":
    main()
