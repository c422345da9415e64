#!/usr/bin/env python3
"""Exports the small recurrent and control-flow models of tests/models/torch_exports/ with
today's PyTorch, through both exporters: `torch.onnx.export(..., dynamo=True)` (torch.export +
onnxscript) and the legacy TorchScript exporter (`dynamo=False`). Each model is written as
<out>/<name>_<exporter>/model.onnx with test_data_set_<k>/input_<i>.pb and output_<i>.pb (the
ONNX backend-test layout), the outputs computed by ONNX Runtime on the exported model (the
reference real_models_test.py compares Kiln with). Seeds are fixed; weights are PyTorch's
default initialisation under that seed, so a re-run with the same torch version gives the same
files.

usage: export_torch.py [--out DIR] [--only NAME]...
(needs torch, onnxscript, onnx, onnxruntime; the files it writes are committed, so the test
itself needs neither torch nor onnxscript)
"""
import argparse
import logging
import os
import shutil
import sys
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(os.path.dirname(HERE), "models", "torch_exports")


class Lstm2(torch.nn.Module):
    """A 2-layer LSTM, sequence-first, zero initial state; all three outputs."""

    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.LSTM(input_size=16, hidden_size=32, num_layers=2)

    def forward(self, x):
        y, (h, c) = self.rnn(x)
        return y, h, c


class BiGru(torch.nn.Module):
    """A bidirectional GRU, sequence-first, zero initial state."""

    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.GRU(input_size=16, hidden_size=24, bidirectional=True)

    def forward(self, x):
        y, h = self.rnn(x)
        return y, h


class LstmBatchFirstInit(torch.nn.Module):
    """An LSTM with batch_first=True and initial states given as inputs."""

    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.LSTM(input_size=8, hidden_size=16, batch_first=True)

    def forward(self, x, h0, c0):
        y, (h, c) = self.rnn(x, (h0, c0))
        return y, h, c


class RnnBatchFirstInit(torch.nn.Module):
    """A 2-layer tanh RNN with batch_first=True and an initial state input."""

    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.RNN(input_size=8, hidden_size=16, num_layers=2, batch_first=True)

    def forward(self, x, h0):
        y, h = self.rnn(x, h0)
        return y, h


class Cond(torch.nn.Module):
    """torch.cond on a data-dependent predicate: one Linear+ReLU branch, one Linear+Tanh."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)

    def forward(self, x):
        def then_fn(x):
            return torch.relu(self.a(x)) * 2.0

        def else_fn(x):
            return torch.tanh(self.b(x)) - 1.0

        return torch.cond(x.sum() > 0, then_fn, else_fn, (x,))


def _randn(g, *shape):
    return torch.randn(*shape, generator=g)


# name -> (module class, input names, output names, exporters, test data sets as a function of a
# torch.Generator, dynamo dynamic_shapes, legacy dynamic_axes)
MODELS = {
    "lstm2": (Lstm2, ["x"], ["y", "h", "c"], ("dynamo", "legacy"),
              lambda g: [(_randn(g, 12, 2, 16),), (_randn(g, 5, 2, 16),)],
              {"x": {0: torch.export.Dim("seq", min=2, max=64)}}, {"x": {0: "seq"}}),
    "bigru": (BiGru, ["x"], ["y", "h"], ("dynamo", "legacy"),
              lambda g: [(_randn(g, 10, 3, 16),)], None, None),
    "lstm_bf_init": (LstmBatchFirstInit, ["x", "h0", "c0"], ["y", "h", "c"], ("dynamo", "legacy"),
                     lambda g: [(_randn(g, 2, 9, 8), 0.5 * _randn(g, 1, 2, 16),
                                 0.5 * _randn(g, 1, 2, 16))], None, None),
    "rnn_bf_init": (RnnBatchFirstInit, ["x", "h0"], ["y", "h"], ("dynamo", "legacy"),
                    lambda g: [(_randn(g, 2, 7, 8), 0.5 * _randn(g, 2, 2, 16))], None, None),
    # Two data sets: the predicate true (then branch) and false (else branch).
    "cond": (Cond, ["x"], ["y"], ("dynamo",),
             lambda g: [(_randn(g, 4, 8).abs() + 0.1,), (-_randn(g, 4, 8).abs() - 0.1,)],
             None, None),
}


def export_one(name, exporter, out_dir):
    cls, in_names, out_names, _, data_fn, dyn_shapes, dyn_axes = MODELS[name]
    torch.manual_seed(1234)
    model = cls().eval()
    g = torch.Generator().manual_seed(5678)
    data = data_fn(g)
    folder = os.path.join(out_dir, f"{name}_{exporter}")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    path = os.path.join(folder, "model.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            prog = torch.onnx.export(model, data[0], dynamo=True, input_names=in_names,
                                     output_names=out_names, dynamic_shapes=dyn_shapes,
                                     optimize=True, verbose=False)
            prog.save(path, external_data=False)
        else:
            torch.onnx.export(model, data[0], path, dynamo=False, input_names=in_names,
                              output_names=out_names, dynamic_axes=dyn_axes)
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for k, inputs in enumerate(data):
        feeds = {n: t.numpy() for n, t in zip(in_names, inputs)}
        outs = sess.run(None, feeds)
        with torch.no_grad():
            expected = model(*inputs)
        expected = expected if isinstance(expected, tuple) else (expected,)
        for o, e in zip(outs, expected):
            # The exported model must compute what PyTorch computes (fp32, same sums up to
            # ordering: 1e-5 on values of magnitude <= ~2).
            np.testing.assert_allclose(o, e.numpy(), rtol=1e-5, atol=1e-5)
        ds = os.path.join(folder, f"test_data_set_{k}")
        os.makedirs(ds)
        for i, (n, t) in enumerate(zip(in_names, inputs)):
            with open(os.path.join(ds, f"input_{i}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(t.numpy(), n).SerializeToString())
        for i, (n, o) in enumerate(zip(out_names, outs)):
            with open(os.path.join(ds, f"output_{i}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(o, n).SerializeToString())
    ops = sorted({n.op_type for n in m.graph.node})
    print(f"{name}_{exporter}: opset {m.opset_import[0].version}, {os.path.getsize(path)} bytes, "
          f"{len(data)} data set(s), ops {ops}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--only", action="append", default=[])
    a = ap.parse_args()
    # The exporter's registry warns about torchvision ops it will not need here.
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    print(f"torch {torch.__version__}, onnxruntime {ort.__version__}, onnx {onnx.__version__}")
    for name in a.only or MODELS:
        for exporter in MODELS[name][3]:
            export_one(name, exporter, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
