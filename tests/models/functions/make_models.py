#!/usr/bin/env python3
"""Writes the models of tests/models/functions: real exporters' output that keeps model-local
functions (ModelProto.functions), with ONNX Runtime reference outputs.

    python3 tests/models/functions/make_models.py

torchscript_modules/: PyTorch's TorchScript exporter with export_modules_as_functions: each
  `Block` module becomes one call of the function `__main__.Block`, whose LeakyRelu slope is an
  attribute reference (`inferred::LeakyRelu_alpha`) that the two calls set differently.
onnxscript_nested/: onnxscript @script functions: a function calling another function, an
  attribute with a default (attribute_proto, IR 9+) that one call sets and one leaves out.

Each folder holds model.onnx and test_data_set_0/{input_0,output_0}.pb (ONNX Runtime's outputs).
The files are committed, so tests need neither PyTorch nor ONNX Runtime. Weights are random with
fixed seeds, outputs of normal scale.
"""
import os

import numpy as np
import onnx
import onnx.numpy_helper
import onnxruntime as ort
from onnxscript import FLOAT, script
from onnxscript import opset18 as op18
from onnxscript.values import Opset

HERE = os.path.dirname(os.path.abspath(__file__))


def save_case(name, model, inputs):
    folder = os.path.join(HERE, name)
    data = os.path.join(folder, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    onnx.save(model, os.path.join(folder, "model.onnx"))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {i.name: x for i, x in zip(sess.get_inputs(), inputs)}
    outputs = sess.run(None, feeds)
    for k, x in enumerate(inputs):
        t = onnx.numpy_helper.from_array(x, sess.get_inputs()[k].name)
        with open(os.path.join(data, f"input_{k}.pb"), "wb") as f:
            f.write(t.SerializeToString())
    for k, y in enumerate(outputs):
        t = onnx.numpy_helper.from_array(y, sess.get_outputs()[k].name)
        with open(os.path.join(data, f"output_{k}.pb"), "wb") as f:
            f.write(t.SerializeToString())
    print(name, "functions:", [f.name for f in model.functions], "outputs:",
          [o.shape for o in outputs])


def torchscript_modules():
    import torch

    class Block(torch.nn.Module):
        def __init__(self, d, slope):
            super().__init__()
            self.fc = torch.nn.Linear(d, d)
            self.ln = torch.nn.LayerNorm(d)
            self.slope = slope

        def forward(self, x):
            return x + torch.nn.functional.leaky_relu(self.ln(self.fc(x)), self.slope)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.b1 = Block(16, 0.1)
            self.b2 = Block(16, 0.3)
            self.out = torch.nn.Linear(16, 4)

        def forward(self, x):
            return self.out(self.b2(self.b1(x)))

    torch.manual_seed(0)
    net = Net().eval()
    x = torch.randn(2, 5, 16)
    path = os.path.join(HERE, "torchscript_modules.tmp.onnx")
    torch.onnx.export(net, (x,), path, dynamo=False, opset_version=17,
                      export_modules_as_functions={Block})
    model = onnx.load(path)
    os.remove(path)
    assert len(model.functions) == 1, "the exporter inlined the modules"
    save_case("torchscript_modules", model, [x.numpy()])


LOCAL = Opset("kiln.test", 1)


@script(LOCAL, default_opset=op18)
def ScaledTanh(x, scale: float = 0.5):
    return op18.Tanh(x) * op18.Constant(value_float=scale)


@script(LOCAL, default_opset=op18)
def Mix(x, w, scale: float = 0.25):
    h = op18.MatMul(x, w)
    return ScaledTanh(h, scale=scale) + ScaledTanh(h)


@script(default_opset=op18)
def nested_main(x: FLOAT[3, 6], w: FLOAT[6, 6]) -> FLOAT[3, 6]:
    a = Mix(x, w, scale=2.0)
    return Mix(a, w)


def onnxscript_nested():
    model = nested_main.to_model_proto()
    assert len(model.functions) == 2
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 6)).astype(np.float32)
    w = (rng.standard_normal((6, 6)) / np.sqrt(6)).astype(np.float32)
    save_case("onnxscript_nested", model, [x, w])


if __name__ == "__main__":
    torchscript_modules()
    onnxscript_nested()
