#!/usr/bin/env python3
"""Writes the exporter-form models of tests/precision/exporter_forms_e2e_test.cc (issue 28).

Each folder NAME/ holds model.onnx, a decomposed LayerNorm / RMSNorm / GELU / Softmax exactly as
an exporter wrote it, and test_data_set_0/ (input_0.pb; output_0.pb from ONNX Runtime). Groups:

  torch   PyTorch 2.x, both exporters (python3 with torch, onnxscript, onnxruntime)
  tf      jax 0.4.30 + jax2tf (native_serialization=False) and TF 2.15 / Keras 2.15 through
          tf2onnx 1.16.1. Needs its own environment, e.g.
            python3 -m venv /tmp/tfenv && /tmp/tfenv/bin/pip install tensorflow-cpu==2.15.1 \\
                tf2onnx==1.16.1 jax==0.4.30 jaxlib==0.4.30 onnx==1.16.2 onnxruntime
  paddle  paddle2onnx's layer_norm for opsets 9 and 11, written with onnx.helper as its mapper
          writes it (unnamed [1]-shaped Constant nodes, axes as attributes, scale and bias
          reshaped at run time)

  python3 make_exporter_forms.py --only torch
  /tmp/tfenv/bin/python make_exporter_forms.py --only tf
  python3 make_exporter_forms.py --only paddle
"""
import argparse
import os
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
# Activations of a few units (x ~ 3 N(0, 1) + 1): values every form handles in fp32.
RNG = np.random.default_rng(28)


def save(model, name, batch=2):
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    folder = os.path.join(HERE, name)
    os.makedirs(os.path.join(folder, "test_data_set_0"), exist_ok=True)
    onnx.save(model, os.path.join(folder, "model.onnx"))
    inp = model.graph.input[0]
    dims = [d.dim_value if d.dim_value > 0 else batch for d in inp.type.tensor_type.shape.dim]
    x = (RNG.standard_normal(dims) * 3 + 1).astype(np.float32)
    y = ort.InferenceSession(os.path.join(folder, "model.onnx")).run(None, {inp.name: x})[0]
    for i, t in (("input_0", x), ("output_0", y)):
        with open(os.path.join(folder, "test_data_set_0", i + ".pb"), "wb") as f:
            f.write(numpy_helper.from_array(t).SerializeToString())
    print("wrote", name, list(x.shape))


def torch_forms():
    import math

    import onnx
    import torch

    class Var(torch.nn.Module):  # torch.var: x - mean computed twice
        def forward(self, x):
            v = torch.var(x, -1, keepdim=True, unbiased=False)
            return (x - x.mean(-1, keepdim=True)) / torch.sqrt(v + 1e-5)

    class Rms(torch.nn.Module):  # LLaMA's RMSNorm
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(8))

        def forward(self, x):
            return self.w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))

    class NewGelu(torch.nn.Module):  # Hugging Face's NewGELUActivation
        def forward(self, x):
            c = math.sqrt(2.0 / math.pi)
            return 0.5 * x * (1.0 + torch.tanh(c * (x + 0.044715 * torch.pow(x, 3.0))))

    torch.manual_seed(0)
    x = torch.randn(2, 4, 8)
    for name, m, dynamo, opset in [("torch_var_dynamo", Var(), True, 18),
                                   ("torch_var_legacy", Var(), False, 11),
                                   ("torch_rms_dynamo", Rms(), True, 18),
                                   ("torch_newgelu_dynamo", NewGelu(), True, 18)]:
        path = os.path.join(HERE, name + ".tmp.onnx")
        kwargs = {"external_data": False} if dynamo else {}
        torch.onnx.export(m.eval(), (x,), path, dynamo=dynamo, opset_version=opset, **kwargs)
        model = onnx.load(path)
        os.remove(path)
        save(model, name)


def tf_forms():
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    warnings.filterwarnings("ignore")
    import jax
    import jax.numpy as jnp
    import tensorflow as tf
    import tf2onnx
    from jax import lax
    from jax.experimental import jax2tf

    scale = RNG.standard_normal(8).astype(np.float32)
    bias = RNG.standard_normal(8).astype(np.float32)

    def flax_ln(x, fast):  # flax.linen.LayerNorm's _compute_stats and _normalize
        mu = jnp.mean(x, -1, keepdims=True)
        if fast:
            var = jnp.maximum(0.0, jnp.mean(jnp.square(x), -1, keepdims=True) - jnp.square(mu))
        else:
            var = jnp.mean(jnp.square(x - mu), -1, keepdims=True)
        return (x - mu) * (lax.rsqrt(var + 1e-6) * scale) + bias

    def flax_rms(x):
        return x * lax.rsqrt(jnp.mean(jnp.square(x), -1, keepdims=True) + 1e-6) * scale

    forms = [("jax_ln_symbolic_batch", lambda x: flax_ln(x, False), True),
             ("jax_ln_static", lambda x: flax_ln(x, False), False),
             ("jax_ln_fast_variance", lambda x: flax_ln(x, True), False),
             ("jax_rms", flax_rms, False),
             ("jax_gelu_tanh", lambda x: jax.nn.gelu(x, approximate=True), False),
             ("jax_gelu_erf", lambda x: jax.nn.gelu(x, approximate=False), False),
             ("jax_softmax_symbolic_batch", lambda x: jax.nn.softmax(x, -1), True)]
    for name, f, symbolic in forms:
        spec = (tf.TensorSpec([None if symbolic else 2, 4, 8], tf.float32, name="x"),)
        poly = ["(b, 4, 8)"] if symbolic else None
        fn = tf.function(jax2tf.convert(f, native_serialization=False, polymorphic_shapes=poly),
                         autograph=False)
        model, _ = tf2onnx.convert.from_function(fn, input_signature=spec, opset=13)
        save(model, name)

    # Keras 2's LayerNormalization: epsilon >= 1.001e-5 (its default 1e-3) runs TF's fused
    # batch norm; below, tf.nn.moments and tf.nn.batch_normalization.
    for name, shape, kwargs in [("keras_ln_fused_batchnorm", (3, 4, 8), {}),
                                ("keras_ln_fused_two_axes", (4, 8), {"axis": [-2, -1]}),
                                ("keras_ln_moments", (4, 8), {"epsilon": 1e-6}),
                                ("keras_ln_moments_no_center", (4, 8),
                                 {"epsilon": 1e-6, "center": False})]:
        inp = tf.keras.Input(shape, name="x")
        layer = tf.keras.layers.LayerNormalization(**kwargs)
        km = tf.keras.Model(inp, layer(inp))
        layer.set_weights([RNG.standard_normal(w.shape).astype(np.float32)
                           for w in layer.get_weights()])
        spec = (tf.TensorSpec([None, *shape], tf.float32, name="x"),)
        model, _ = tf2onnx.convert.from_keras(km, input_signature=spec, opset=13)
        save(model, name)


def paddle_forms():
    import onnx
    from onnx import TensorProto
    from onnx import helper as h
    from onnx import numpy_helper as nh

    for opset in (9, 11):
        nodes = []
        for name, val in (("eps", 1e-5), ("two", 2.0)):
            nodes.append(h.make_node("Constant", [], [name],
                                     value=nh.from_array(np.array([val], np.float32)), name=""))
        nodes += [h.make_node("ReduceMean", ["x"], ["m"], axes=[2], keepdims=1, name=""),
                  h.make_node("Sub", ["x", "m"], ["d"], name=""),
                  h.make_node("Pow", ["d", "two"], ["p"], name=""),
                  h.make_node("ReduceMean", ["p"], ["v"], axes=[2], keepdims=1, name=""),
                  h.make_node("Add", ["v", "eps"], ["ve"], name=""),
                  h.make_node("Sqrt", ["ve"], ["s"], name=""),
                  h.make_node("Shape", ["x"], ["shp"], name="")]
        inits = [nh.from_array(RNG.standard_normal(8).astype(np.float32), "scale"),
                 nh.from_array(RNG.standard_normal(8).astype(np.float32), "bias")]
        if opset < 10:
            nodes.append(h.make_node("Slice", ["shp"], ["ws"], axes=[0], starts=[2], ends=[3],
                                     name=""))
        else:
            nodes.append(h.make_node("Slice", ["shp", "st", "en", "ax"], ["ws"], name=""))
            inits += [nh.from_array(np.array([v], np.int64), n)
                      for n, v in (("st", 2), ("en", 3), ("ax", 0))]
        nodes += [h.make_node("Reshape", ["scale", "ws"], ["sc"], name=""),
                  h.make_node("Reshape", ["bias", "ws"], ["bi"], name=""),
                  h.make_node("Div", ["d", "s"], ["n"], name=""),
                  h.make_node("Mul", ["n", "sc"], ["y0"], name=""),
                  h.make_node("Add", ["y0", "bi"], ["y"], name="")]
        g = h.make_graph(nodes, "paddle_layer_norm",
                         [h.make_tensor_value_info("x", TensorProto.FLOAT, ["?", 4, 8])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, ["?", "?", 8])], inits)
        model = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
        model.ir_version = 6
        onnx.checker.check_model(model)
        save(model, f"paddle_ln_opset{opset}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["torch", "tf", "paddle"], required=True)
    group = parser.parse_args().only
    {"torch": torch_forms, "tf": tf_forms, "paddle": paddle_forms}[group]()
