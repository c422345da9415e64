#!/usr/bin/env python3
"""Builds one small model per ONNX Runtime contrib op (domain com.microsoft) that Kiln expands at
import (engine/import/contrib_ops.h), with ONNX Runtime's outputs as the reference.

Each model is made with onnx.helper (default-domain opset 17, com.microsoft opset 1, IR 8: the
expansions must give their nodes newer op versions than the model's opset). ONNX Runtime runs it
on fixed-seed inputs; each folder gets model.onnx and test_data_set_0/input_<i>.pb /
output_<i>.pb (the ONNX backend-test layout), read by tests/e2e/contrib_models_test.cc.

    python3 tests/models/contrib/make_models.py tests/models/contrib
"""
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
import onnxruntime as ort

MS = "com.microsoft"
rng = np.random.default_rng(2024)


def f32(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def u8(*shape, lo=0, hi=256):
    return rng.integers(lo, hi, shape).astype(np.uint8)


def i8(*shape):
    return rng.integers(-128, 128, shape).astype(np.int8)


def scalar(v, dt=np.float32):
    return np.array(v, dtype=dt)


MODELS = {}


def model(name):
    def deco(fn):
        MODELS[name] = fn
        return fn
    return deco


# Each builder returns (nodes, inputs {name: array}, initializers {name: array}, output names).

@model("gelu")
def _():
    return [helper.make_node("Gelu", ["x"], ["y"], name="gelu", domain=MS)], \
        {"x": f32(2, 3, 8, scale=2)}, {}, ["y"]


@model("fast_gelu")
def _():
    return [helper.make_node("FastGelu", ["x", "b"], ["y"], name="fast_gelu", domain=MS)], \
        {"x": f32(2, 3, 8, scale=2)}, {"b": f32(8)}, ["y"]


@model("bias_gelu")
def _():
    return [helper.make_node("BiasGelu", ["x", "b"], ["y"], name="bias_gelu", domain=MS)], \
        {"x": f32(2, 3, 8, scale=2)}, {"b": f32(8)}, ["y"]


@model("quick_gelu")
def _():
    return [helper.make_node("QuickGelu", ["x"], ["y"], name="quick_gelu", domain=MS,
                             alpha=1.5)], {"x": f32(2, 3, 8, scale=2)}, {}, ["y"]


@model("fused_conv")
def _():
    return [helper.make_node("FusedConv", ["x", "w", "b", "z"], ["y"], name="fused_conv",
                             domain=MS, kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                             activation="LeakyRelu", activation_params=[0.2])], \
        {"x": f32(1, 3, 6, 6), "z": f32(1, 4, 6, 6)}, {"w": f32(4, 3, 3, 3, scale=0.3),
                                                      "b": f32(4)}, ["y"]


@model("bias_add")
def _():
    return [helper.make_node("BiasAdd", ["x", "b", "s"], ["y"], name="bias_add", domain=MS)], \
        {"x": f32(2, 3, 8), "s": f32(2, 3, 8)}, {"b": f32(8)}, ["y"]


@model("skip_layernorm")
def _():
    return [helper.make_node("SkipLayerNormalization", ["x", "skip", "gamma", "beta", "bias"],
                             ["y", "mean", "inv_std", "sum"], name="skip_ln", domain=MS,
                             epsilon=1e-5)], \
        {"x": f32(2, 3, 16), "skip": f32(2, 3, 16)}, \
        {"gamma": f32(16), "beta": f32(16), "bias": f32(16)}, ["y", "mean", "inv_std", "sum"]


@model("skip_simplified_layernorm")
def _():
    return [helper.make_node("SkipSimplifiedLayerNormalization", ["x", "skip", "gamma", "bias"],
                             ["y", "", "inv_std", "sum"], name="skip_sln", domain=MS,
                             epsilon=1e-6)], \
        {"x": f32(2, 3, 16), "skip": f32(2, 3, 16)}, {"gamma": f32(16), "bias": f32(16)}, \
        ["y", "inv_std", "sum"]


@model("simplified_layernorm")
def _():
    # ONNX Runtime registers SimplifiedLayerNormalization in the default domain.
    return [helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], ["y", "inv_std"],
                             name="sln", axis=-1, epsilon=1e-6)], \
        {"x": f32(2, 3, 16, scale=3)}, {"scale": f32(16)}, ["y", "inv_std"]


# ONNX Runtime's LayerNormalization of the default domain at an opset before 17 (its fused
# LayerNorm in models older than the ONNX op).
@model("layernorm_opset13")
def _():
    return [helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["y"], name="ln",
                             epsilon=1e-5)], \
        {"x": f32(2, 3, 16, scale=3)}, {"scale": f32(16), "bias": f32(16)}, ["y"]


OPSET = {"layernorm_opset13": 13}


@model("embed_layernorm_gpt2")
def _():
    ids = rng.integers(0, 30, (2, 5)).astype(np.int32)
    pos = np.tile(np.arange(5, dtype=np.int32), (2, 1))
    return [helper.make_node("EmbedLayerNormalization",
                             ["ids", "", "word", "pos", "", "gamma", "beta", "", "pos_ids"],
                             ["y", "mask_index", "emb_sum"], name="embed_ln", domain=MS,
                             epsilon=1e-5)], \
        {"ids": ids, "pos_ids": pos}, \
        {"word": f32(30, 16), "pos": f32(10, 16), "gamma": f32(16), "beta": f32(16)}, \
        ["y", "mask_index", "emb_sum"]


@model("embed_layernorm")
def _():
    ids = rng.integers(0, 30, (2, 5)).astype(np.int32)
    seg = rng.integers(0, 2, (2, 5)).astype(np.int32)
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=np.int32)
    return [helper.make_node("EmbedLayerNormalization",
                             ["ids", "seg", "word", "pos", "segemb", "gamma", "beta", "mask"],
                             ["y", "mask_index", "emb_sum"], name="embed_ln", domain=MS,
                             epsilon=1e-12)], \
        {"ids": ids, "seg": seg, "mask": mask}, \
        {"word": f32(30, 16), "pos": f32(10, 16), "segemb": f32(2, 16), "gamma": f32(16),
         "beta": f32(16)}, ["y", "mask_index", "emb_sum"]


def attention_weights(hidden, sizes):
    return f32(hidden, sum(sizes), scale=0.3), f32(sum(sizes), scale=0.1)


@model("attention")
def _():
    w, b = attention_weights(16, [16, 16, 16])
    mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=np.int32)
    return [helper.make_node("Attention", ["x", "w", "b", "mask"], ["y"], name="attention",
                             domain=MS, num_heads=2)], \
        {"x": f32(2, 4, 16), "mask": mask}, {"w": w, "b": b}, ["y"]


@model("attention_past_causal")
def _():
    w, b = attention_weights(16, [16, 16, 16])
    return [helper.make_node("Attention", ["x", "w", "b", "", "past"], ["y", "present"],
                             name="attention", domain=MS, num_heads=2, unidirectional=1)], \
        {"x": f32(2, 3, 16), "past": f32(2, 2, 2, 4, 8)}, {"w": w, "b": b}, ["y", "present"]


@model("attention_qkv_sizes")
def _():
    w, b = attention_weights(16, [16, 16, 8])
    lengths = np.array([4, 2], dtype=np.int32)
    return [helper.make_node("Attention", ["x", "w", "b", "mask"], ["y"], name="attention",
                             domain=MS, num_heads=2, qkv_hidden_sizes=[16, 16, 8],
                             scale=0.3)], \
        {"x": f32(2, 4, 16), "mask": lengths}, {"w": w, "b": b}, ["y"]


@model("multihead_attention")
def _():
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=np.int32)
    return [helper.make_node("MultiHeadAttention", ["q", "k", "v", "b", "mask", "ab"], ["y"],
                             name="mha", domain=MS, num_heads=2)], \
        {"q": f32(2, 3, 16), "k": f32(2, 5, 16), "v": f32(2, 5, 16), "mask": mask,
         "ab": f32(1, 2, 3, 5)}, {"b": f32(48, scale=0.1)}, ["y"]


@model("multihead_attention_past")
def _():
    return [helper.make_node("MultiHeadAttention",
                             ["q", "k", "v", "", "", "", "past_k", "past_v"],
                             ["y", "present_k", "present_v"], name="mha", domain=MS,
                             num_heads=2, unidirectional=1)], \
        {"q": f32(2, 3, 16), "k": f32(2, 3, 16), "v": f32(2, 3, 16), "past_k": f32(2, 2, 4, 8),
         "past_v": f32(2, 2, 4, 8)}, {}, ["y", "present_k", "present_v"]


@model("group_query_attention")
def _():
    s = 4
    return [helper.make_node("GroupQueryAttention",
                             ["q", "k", "v", "", "", "seqlens", "total"],
                             ["y", "present_k", "present_v"], name="gqa", domain=MS,
                             num_heads=4, kv_num_heads=2)], \
        {"q": f32(2, s, 32), "k": f32(2, s, 16), "v": f32(2, s, 16)}, \
        {"seqlens": np.array([s - 1, s - 1], dtype=np.int32), "total": scalar(s, np.int32)}, \
        ["y", "present_k", "present_v"]


@model("group_query_attention_past_rotary")
def _():
    s, p, h = 1, 3, 16  # ORT's rotary GQA needs head_size % 16 == 0
    pos = np.arange(16)[:, None] / (10000 ** (np.arange(0, h, 2) / h))[None, :]
    return [helper.make_node("GroupQueryAttention",
                             ["q", "k", "v", "past_k", "past_v", "seqlens", "total", "cos",
                              "sin"],
                             ["y", "present_k", "present_v"], name="gqa", domain=MS,
                             num_heads=4, kv_num_heads=2, do_rotary=1)], \
        {"q": f32(2, s, 4 * h), "k": f32(2, s, 2 * h), "v": f32(2, s, 2 * h),
         "past_k": f32(2, 2, p, h), "past_v": f32(2, 2, p, h)}, \
        {"seqlens": np.array([p + s - 1, p + s - 1], dtype=np.int32),
         "total": scalar(p + s, np.int32), "cos": np.cos(pos).astype(np.float32),
         "sin": np.sin(pos).astype(np.float32)}, ["y", "present_k", "present_v"]


def rope_cache(h, n=16):
    pos = np.arange(n)[:, None] / (10000 ** (np.arange(0, h, 2) / h))[None, :]
    return np.cos(pos).astype(np.float32), np.sin(pos).astype(np.float32)


@model("rotary_embedding")
def _():
    cos, sin = rope_cache(8)
    pos = np.array([[0, 1, 2], [5, 6, 7]], dtype=np.int64)
    return [helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], name="rope",
                             domain=MS, num_heads=2)], \
        {"x": f32(2, 3, 16), "pos": pos}, {"cos": cos, "sin": sin}, ["y"]


@model("rotary_embedding_offset_interleaved")
def _():
    cos, sin = rope_cache(8)
    return [helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], name="rope",
                             domain=MS, interleaved=1)], \
        {"x": f32(2, 2, 3, 8)}, {"pos": np.array([4], dtype=np.int64), "cos": cos, "sin": sin}, \
        ["y"]


def qparams(prefix, scale, zp, dt=np.uint8):
    return {f"{prefix}_s": scalar(scale), f"{prefix}_z": scalar(zp, dt)}


@model("qlinear_add")
def _():
    return [helper.make_node("QLinearAdd", ["a", "a_s", "a_z", "b", "b_s", "b_z", "c_s", "c_z"],
                             ["y"], name="qadd", domain=MS)], \
        {"a": u8(2, 3, 8), "b": u8(8)}, \
        {**qparams("a", 0.05, 120), **qparams("b", 0.03, 130), **qparams("c", 0.08, 125)}, ["y"]


@model("qlinear_mul_int8")
def _():
    return [helper.make_node("QLinearMul", ["a", "a_s", "a_z", "b", "b_s", "b_z", "c_s", "c_z"],
                             ["y"], name="qmul", domain=MS)], \
        {"a": i8(2, 3, 8), "b": i8(2, 3, 8)}, \
        {**qparams("a", 0.05, 3, np.int8), **qparams("b", 0.03, -2, np.int8),
         **qparams("c", 0.2, 1, np.int8)}, ["y"]


@model("qlinear_sigmoid")
def _():
    return [helper.make_node("QLinearSigmoid", ["x", "x_s", "x_z", "y_s", "y_z"], ["y"],
                             name="qsigmoid", domain=MS)], \
        {"x": u8(2, 3, 8)}, {**qparams("x", 0.05, 128), **qparams("y", 1 / 256, 0)}, ["y"]


@model("qlinear_leaky_relu")
def _():
    return [helper.make_node("QLinearLeakyRelu", ["x", "x_s", "x_z", "y_s", "y_z"], ["y"],
                             name="qleaky", domain=MS, alpha=0.1)], \
        {"x": u8(2, 3, 8)}, {**qparams("x", 0.05, 128), **qparams("y", 0.03, 30)}, ["y"]


@model("qlinear_softmax")
def _():
    return [helper.make_node("QLinearSoftmax", ["x", "x_s", "x_z", "y_s", "y_z"], ["y"],
                             name="qsoftmax", domain=MS, axis=-1, opset=13)], \
        {"x": u8(2, 3, 8)}, {**qparams("x", 0.05, 128), **qparams("y", 1 / 256, 0)}, ["y"]


@model("qlinear_concat")
def _():
    return [helper.make_node("QLinearConcat",
                             ["y_s", "y_z", "a", "a_s", "a_z", "b", "b_s", "b_z"], ["y"],
                             name="qconcat", domain=MS, axis=1)], \
        {"a": u8(2, 3, 4), "b": u8(2, 2, 4)}, \
        {**qparams("y", 0.06, 128), **qparams("a", 0.05, 120), **qparams("b", 0.04, 128)}, ["y"]


@model("qlinear_where")
def _():
    return [helper.make_node("QLinearWhere",
                             ["c", "x", "x_s", "x_z", "y", "y_s", "y_z", "z_s", "z_z"], ["z"],
                             name="qwhere", domain=MS)], \
        {"c": rng.integers(0, 2, (2, 3, 8)).astype(bool), "x": u8(2, 3, 8), "y": u8(2, 3, 8)}, \
        {**qparams("x", 0.05, 120), **qparams("y", 0.03, 128), **qparams("z", 0.04, 127)}, \
        ["z"]


@model("qlinear_average_pool")
def _():
    return [helper.make_node("QLinearAveragePool", ["x", "x_s", "x_z", "y_s", "y_z"], ["y"],
                             name="qavgpool", domain=MS, kernel_shape=[3, 3], strides=[2, 2],
                             pads=[1, 1, 1, 1], count_include_pad=0)], \
        {"x": u8(1, 3, 7, 7)}, {**qparams("x", 0.05, 128), **qparams("y", 0.04, 120)}, ["y"]


@model("qlinear_average_pool_nhwc")
def _():
    return [helper.make_node("QLinearAveragePool", ["x", "x_s", "x_z", "y_s", "y_z"], ["y"],
                             name="qavgpool", domain=MS, kernel_shape=[2, 2], strides=[2, 2],
                             channels_last=1)], \
        {"x": u8(1, 6, 6, 3)}, {**qparams("x", 0.05, 128), **qparams("y", 0.04, 120)}, ["y"]


@model("qlinear_global_average_pool")
def _():
    return [helper.make_node("QLinearGlobalAveragePool", ["x", "x_s", "x_z", "y_s", "y_z"],
                             ["y"], name="qgap", domain=MS, channels_last=0)], \
        {"x": u8(1, 4, 5, 5)}, {**qparams("x", 0.05, 128), **qparams("y", 0.01, 120)}, ["y"]


@model("qgemm")
def _():
    return [helper.make_node("QGemm", ["a", "a_s", "a_z", "b", "b_s", "b_z", "c", "y_s", "y_z"],
                             ["y"], name="qgemm", domain=MS, transB=1, alpha=0.5)], \
        {"a": u8(3, 16)}, \
        {**qparams("a", 0.02, 128), "b": i8(8, 16), "b_s": np.full(8, 0.01, np.float32),
         "b_z": np.zeros(8, np.int8), "c": rng.integers(-500, 500, (8,)).astype(np.int32),
         **qparams("y", 0.05, 128)}, ["y"]


@model("qgemm_float")
def _():
    return [helper.make_node("QGemm", ["a", "a_s", "a_z", "b", "b_s", "b_z"], ["y"],
                             name="qgemm", domain=MS)], \
        {"a": u8(3, 16)}, \
        {**qparams("a", 0.02, 128), "b": i8(16, 8), "b_s": scalar(0.01),
         "b_z": scalar(0, np.int8)}, ["y"]


@model("matmul_integer_to_float")
def _():
    return [helper.make_node("MatMulIntegerToFloat",
                             ["a", "b", "a_s", "b_s", "a_z", "b_z", "bias"], ["y"],
                             name="mmitf", domain=MS)], \
        {"a": u8(2, 3, 16)}, \
        {"b": i8(16, 8), "a_s": scalar(0.02), "b_s": np.full(8, 0.01, np.float32),
         "a_z": scalar(128, np.uint8), "b_z": np.zeros(8, np.int8), "bias": f32(8)}, ["y"]


@model("dynamic_quantize_matmul")
def _():
    return [helper.make_node("DynamicQuantizeMatMul", ["a", "b", "b_s", "b_z", "bias"], ["y"],
                             name="dqmm", domain=MS)], \
        {"a": f32(2, 3, 16)}, \
        {"b": i8(16, 8), "b_s": scalar(0.01), "b_z": scalar(0, np.int8), "bias": f32(8)}, ["y"]


@model("matmul_nbits")
def _():
    K, N, block, bits = 40, 8, 16, 4
    kb = (K + block - 1) // block
    b = u8(N, kb, block * bits // 8)
    zp = u8(N, (kb * bits + 7) // 8)
    return [helper.make_node("MatMulNBits", ["a", "b", "s", "zp", "", "bias"], ["y"],
                             name="mmnb", domain=MS, K=K, N=N, bits=bits, block_size=block)], \
        {"a": f32(2, 3, K)}, \
        {"b": b, "s": np.abs(f32(N * kb, scale=0.05)), "zp": zp.reshape(-1), "bias": f32(N)}, \
        ["y"]


@model("matmul_nbits_8bit")
def _():
    K, N, block, bits = 32, 4, 16, 8
    kb = K // block
    return [helper.make_node("MatMulNBits", ["a", "b", "s"], ["y"], name="mmnb", domain=MS,
                             K=K, N=N, bits=bits, block_size=block)], \
        {"a": f32(3, K)}, {"b": u8(N, kb, block), "s": np.abs(f32(N, kb, scale=0.01))}, ["y"]


@model("dynamic_quantize_lstm")
def _():
    D, I, H = 1, 6, 4
    return [helper.make_node("DynamicQuantizeLSTM",
                             ["x", "w", "r", "b", "", "", "", "", "w_s", "w_z", "r_s", "r_z"],
                             ["y", "y_h", "y_c"], name="dqlstm", domain=MS, hidden_size=H)], \
        {"x": f32(5, 2, I)}, \
        {"w": i8(D, I, 4 * H), "r": i8(D, H, 4 * H), "b": f32(D, 8 * H, scale=0.1),
         "w_s": np.full((D, 4 * H), 0.01, np.float32), "w_z": np.zeros((D, 4 * H), np.int8),
         "r_s": np.full((D, 4 * H), 0.01, np.float32), "r_z": np.zeros((D, 4 * H), np.int8)}, \
        ["y", "y_h", "y_c"]


@model("qattention")
def _():
    mask = np.array([[1, 1, 1, 1], [1, 1, 1, 0]], dtype=np.int32)
    return [helper.make_node("QAttention",
                             ["x", "w", "b", "x_s", "w_s", "mask", "x_z", "w_z"], ["y"],
                             name="qattention", domain=MS, num_heads=2)], \
        {"x": u8(2, 4, 16), "mask": mask}, \
        {"w": i8(16, 48), "b": f32(48, scale=0.1), "x_s": scalar(0.02), "w_s": scalar(0.01),
         "x_z": scalar(128, np.uint8), "w_z": scalar(0, np.int8)}, ["y"]


@model("quantize_dequantize")
def _():
    return [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q", domain=MS),
            helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dq",
                             domain=MS)], \
        {"x": f32(2, 3, 8)}, {"s": scalar(0.02), "z": scalar(128, np.uint8)}, ["y"]


def build(name, fn, out_dir):
    nodes, inputs, inits, outputs = fn()
    ginputs = [helper.make_tensor_value_info(
        k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)) for k, v in inputs.items()]
    ginits = [numpy_helper.from_array(v, k) for k, v in inits.items()]

    def make(out_infos):
        g = helper.make_graph(nodes, name, ginputs, out_infos, ginits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET.get(name, 17)),
                                                helper.make_opsetid(MS, 1)])
        m.ir_version = 8
        return m

    # First run without output types, then declare what ONNX Runtime gives.
    m = make([helper.make_empty_tensor_value_info(o) for o in outputs])
    try:
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    except ort.capi.onnxruntime_pybind11_state.NotImplemented as e:
        print(f"{name}: skipped, ONNX Runtime's CPU provider cannot run it ({e})")
        return
    results = sess.run(outputs, inputs)
    m = make([helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(r.dtype),
                                            list(r.shape)) for o, r in zip(outputs, results)])
    d = os.path.join(out_dir, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    onnx.save(m, os.path.join(d, "model.onnx"))
    for i, (k, v) in enumerate(inputs.items()):
        t = numpy_helper.from_array(v, k)
        with open(os.path.join(d, "test_data_set_0", f"input_{i}.pb"), "wb") as f:
            f.write(t.SerializeToString())
    for i, (k, v) in enumerate(zip(outputs, results)):
        t = numpy_helper.from_array(v, k)
        with open(os.path.join(d, "test_data_set_0", f"output_{i}.pb"), "wb") as f:
            f.write(t.SerializeToString())
    print(f"{name}: {len(nodes)} node(s), outputs "
          + ", ".join(f"{o} {r.dtype}{list(r.shape)}" for o, r in zip(outputs, results)))


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    only = sys.argv[2:]
    for name, fn in MODELS.items():
        if only and name not in only:
            continue
        build(name, fn, out_dir)


if __name__ == "__main__":
    main()
