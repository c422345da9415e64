#!/usr/bin/env python3
"""Builds the quantized end-to-end models and their ONNX Runtime reference outputs.

A small fp32 CNN + MatMul (Conv 3->4 3x3 pad 1, Relu, Conv 4->8 3x3 stride 2, Flatten,
MatMul 128->10) made with onnx.helper, quantized with ONNX Runtime's tool twice:
  dynamic/      quantize_dynamic: DynamicQuantizeLinear -> ConvInteger / MatMulInteger -> Cast ->
                Mul by the scales;
  qoperator/    quantize_static, QuantFormat.QOperator: QuantizeLinear -> QLinearConv ->
                QLinearMatMul -> DequantizeLinear.
Each folder gets input_0.pb and ONNX Runtime's output_0.pb (the ONNX backend-test layout).

    python3 tests/models/quantized/make_models.py tests/models/quantized
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
import onnxruntime as ort
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                      quantize_dynamic, quantize_static)


def float_model():
    rng = np.random.default_rng(7)
    w1 = rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32)
    b1 = rng.normal(0, 0.1, (4,)).astype(np.float32)
    w2 = rng.normal(0, 0.3, (8, 4, 3, 3)).astype(np.float32)
    b2 = rng.normal(0, 0.1, (8,)).astype(np.float32)
    wm = rng.normal(0, 0.2, (128, 10)).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in
             [(w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"), (wm, "wm"),
              (np.array([1, 128], dtype=np.int64), "flat_shape")]]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", strides=[2, 2]),
        helper.make_node("Reshape", ["c2", "flat_shape"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "wm"], ["y"], name="fc"),
    ]
    g = helper.make_graph(nodes, "qcnn",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 9, 9])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


class Reader(CalibrationDataReader):
    def __init__(self, n):
        rng = np.random.default_rng(11)
        self.data = iter([{"x": rng.uniform(-1, 1, (1, 3, 9, 9)).astype(np.float32)}
                          for _ in range(n)])

    def get_next(self):
        return next(self.data, None)


def write_case(model_path, folder, x):
    os.makedirs(folder, exist_ok=True)
    sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    y = sess.run(None, {"x": x})[0]
    with open(os.path.join(folder, "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(x, "x").SerializeToString())
    with open(os.path.join(folder, "output_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(y, "y").SerializeToString())
    ops = sorted({n.op_type for n in onnx.load(model_path).graph.node})
    print(model_path, ops)


def main(out):
    os.makedirs(out, exist_ok=True)
    fp = os.path.join(out, "float.onnx")
    onnx.save(float_model(), fp)
    for name in ("dynamic", "qoperator"):
        os.makedirs(os.path.join(out, name), exist_ok=True)
    dyn = os.path.join(out, "dynamic", "model.onnx")
    quantize_dynamic(fp, dyn, weight_type=QuantType.QInt8)
    qop = os.path.join(out, "qoperator", "model.onnx")
    quantize_static(fp, qop, Reader(16), quant_format=QuantFormat.QOperator,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    per_channel=True, op_types_to_quantize=["Conv", "MatMul"])
    x = np.random.default_rng(5).uniform(-1, 1, (1, 3, 9, 9)).astype(np.float32)
    write_case(dyn, os.path.join(out, "dynamic", "test_data_set_0"), x)
    write_case(qop, os.path.join(out, "qoperator", "test_data_set_0"), x)
    os.remove(fp)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
