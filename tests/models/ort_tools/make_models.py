#!/usr/bin/env python3
"""Writes tests/models/ort_tools/: small models made by ONNX Runtime's own tools, with fixed-seed
inputs and ONNX Runtime's outputs. Run by hand (never in CI); the output is committed.

Needs torch (2.15), onnx (1.23), onnxruntime (1.32; its transformers optimizer and quantization
tool). Every random number comes from a fixed seed, so a re-run with the same versions writes the
same models (ONNX Runtime's optimizer and quantizer are deterministic).

Models (each a folder with model.onnx and test_data_set_0/{input,output}_<i>.pb):
  bert_opt          a 2-layer BERT encoder written below (hidden 64, 4 heads, vocab 100,
                    seq 16), exported with torch.onnx (TorchScript exporter, opset 17), then
                    onnxruntime.transformers.optimizer.optimize_model(model_type='bert'):
                    EmbedLayerNormalization, Attention, SkipLayerNormalization, BiasGelu ...
  gpt2_opt          a 2-layer GPT-2 decoder (hidden 64, 4 heads, causal), the same way with
                    model_type='gpt2'
  bert_opt_dynamic  bert_opt through quantize_dynamic (QAttention, MatMulInteger, ...)
  bert_opt_qdq      bert_opt through quantize_static, QuantFormat.QDQ
  bert_opt_qoperator bert_opt through quantize_static, QuantFormat.QOperator
  gpt2_dynamic      the plain GPT-2 export (not optimized) through quantize_dynamic (standard
                    ops only)
  cnn_dynamic       a small CNN (conv/bn/relu/pool x2, global pool, fc; 3x32x32) through
                    quantize_dynamic
  cnn_qdq           the CNN through quantize_static, QDQ
  cnn_qoperator     the CNN through quantize_static, QOperator

Also writes README.md's generated part (the ops of each model, with the attributes of every
com.microsoft op) between the markers in README.md.

    python3 tests/models/ort_tools/make_models.py [OUT_DIR]
"""
import collections
import json
import math
import os
import shutil
import sys
import tempfile
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import helper, numpy_helper
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                      quantize_dynamic, quantize_static)
from onnxruntime.quantization.shape_inference import quant_pre_process
from onnxruntime.transformers.optimizer import optimize_model

HERE = os.path.dirname(os.path.abspath(__file__))
OPSET = 17

# BERT / GPT-2 sizes: small enough for < 1 MB per model, big enough for 4 heads of 16.
VOCAB, HIDDEN, HEADS, LAYERS, FFN, MAX_POS, SEQ, BATCH = 100, 64, 4, 2, 128, 32, 16, 2


# ---- the PyTorch modules (HuggingFace-shaped, so that ONNX Runtime's fusions recognise them) --

class BertSelfAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.head = HIDDEN // HEADS
        self.query = torch.nn.Linear(HIDDEN, HIDDEN)
        self.key = torch.nn.Linear(HIDDEN, HIDDEN)
        self.value = torch.nn.Linear(HIDDEN, HIDDEN)

    def split(self, x):
        return x.view(x.size()[:-1] + (HEADS, self.head)).permute(0, 2, 1, 3)

    def forward(self, h, mask):
        q = self.split(self.query(h))
        k = self.split(self.key(h))
        v = self.split(self.value(h))
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head)
        s = s + mask
        p = torch.nn.functional.softmax(s, dim=-1)
        c = torch.matmul(p, v).permute(0, 2, 1, 3).contiguous()
        return c.view(c.size()[:-2] + (HIDDEN,))


class BertLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = BertSelfAttention()
        self.attn_out = torch.nn.Linear(HIDDEN, HIDDEN)
        self.ln1 = torch.nn.LayerNorm(HIDDEN, eps=1e-12)
        self.inter = torch.nn.Linear(HIDDEN, FFN)
        self.out = torch.nn.Linear(FFN, HIDDEN)
        self.ln2 = torch.nn.LayerNorm(HIDDEN, eps=1e-12)

    def forward(self, h, mask):
        a = self.ln1(self.attn_out(self.attn(h, mask)) + h)
        f = self.out(torch.nn.functional.gelu(self.inter(a)))  # erf GELU
        return self.ln2(f + a)


class Bert(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.word = torch.nn.Embedding(VOCAB, HIDDEN)
        self.pos = torch.nn.Embedding(MAX_POS, HIDDEN)
        self.tok = torch.nn.Embedding(2, HIDDEN)
        self.ln = torch.nn.LayerNorm(HIDDEN, eps=1e-12)
        self.layers = torch.nn.ModuleList([BertLayer() for _ in range(LAYERS)])
        self.pool = torch.nn.Linear(HIDDEN, HIDDEN)
        self.register_buffer("position_ids", torch.arange(MAX_POS).expand((1, -1)))

    def forward(self, input_ids, attention_mask, token_type_ids):
        seq = input_ids.size(1)
        pos = self.position_ids[:, :seq]
        h = self.ln(self.word(input_ids) + self.tok(token_type_ids) + self.pos(pos))
        mask = attention_mask[:, None, None, :].to(torch.float32)
        mask = (1.0 - mask) * -10000.0
        for layer in self.layers:
            h = layer(h, mask)
        pooled = torch.tanh(self.pool(h[:, 0]))
        return h, pooled


class Conv1D(torch.nn.Module):
    """GPT-2's projection: addmm on the flattened rows (exported as Reshape, Gemm, Reshape)."""

    def __init__(self, nx, nf):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(nx, nf) * 0.1)
        self.bias = torch.nn.Parameter(torch.randn(nf) * 0.02)

    def forward(self, x):
        out_shape = x.size()[:-1] + (self.weight.size(1),)
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(out_shape)


class Gpt2Block(torch.nn.Module):
    """transformers' GPT-2 block as it was written when ONNX Runtime's GPT-2 fusion was made
    (Conv1D projections, the causal mask sliced out of a [1, 1, P, P] buffer by the score's
    shape, torch.where with masked_bias)."""

    def __init__(self):
        super().__init__()
        self.head = HIDDEN // HEADS
        self.ln_1 = torch.nn.LayerNorm(HIDDEN, eps=1e-5)
        self.c_attn = Conv1D(HIDDEN, 3 * HIDDEN)
        self.c_proj = Conv1D(HIDDEN, HIDDEN)
        self.ln_2 = torch.nn.LayerNorm(HIDDEN, eps=1e-5)
        self.c_fc = Conv1D(HIDDEN, 4 * HIDDEN)
        self.mlp_proj = Conv1D(4 * HIDDEN, HIDDEN)
        self.register_buffer("bias", torch.tril(torch.ones(MAX_POS, MAX_POS, dtype=torch.uint8))
                             .view(1, 1, MAX_POS, MAX_POS))
        self.register_buffer("masked_bias", torch.tensor(-1e4))

    def split(self, x, k=False):
        x = x.view(x.size()[:-1] + (HEADS, self.head))
        return x.permute(0, 2, 3, 1) if k else x.permute(0, 2, 1, 3)

    def forward(self, x):
        h = self.ln_1(x)
        q, k, v = self.c_attn(h).split(HIDDEN, dim=2)
        q, k, v = self.split(q), self.split(k, k=True), self.split(v)
        w = torch.matmul(q, k) / (float(v.size(-1)) ** 0.5)
        shape = torch._shape_as_tensor(w)
        nd, ns = shape[-2:-1].squeeze(0), shape[-1:].squeeze(0)
        mask = self.bias[:, :, ns - nd:ns, :ns]
        w = torch.where(mask.bool(), w, self.masked_bias.to(w.dtype))
        w = torch.nn.functional.softmax(w, dim=-1)
        a = torch.matmul(w, v).permute(0, 2, 1, 3).contiguous()
        a = self.c_proj(a.view(a.size()[:-2] + (a.size(-2) * a.size(-1),)))
        x = x + a
        m = self.mlp_proj(torch.nn.functional.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
        return x + m


class Gpt2(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = torch.nn.Embedding(VOCAB, HIDDEN)
        self.wpe = torch.nn.Embedding(MAX_POS, HIDDEN)
        self.h = torch.nn.ModuleList([Gpt2Block() for _ in range(LAYERS)])
        self.ln_f = torch.nn.LayerNorm(HIDDEN, eps=1e-5)

    def forward(self, input_ids):
        pos = torch.arange(0, input_ids.size(-1), dtype=torch.long).unsqueeze(0)
        x = self.wte(input_ids) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        return torch.matmul(x, self.wte.weight.t())  # tied LM head: logits


class Cnn(torch.nn.Module):
    """conv/bn/relu/maxpool x2, a 1x1 conv with a residual add, global average pool, fc."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.b1 = torch.nn.BatchNorm2d(16)
        self.c2 = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.b2 = torch.nn.BatchNorm2d(32)
        self.c3 = torch.nn.Conv2d(32, 32, 1)
        self.fc = torch.nn.Linear(32, 10)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.b1(self.c1(x))), 2)
        x = torch.nn.functional.max_pool2d(torch.relu(self.b2(self.c2(x))), 2)
        x = torch.relu(self.c3(x) + x)
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


def randomise_norms(model, seed):
    """Non-trivial LayerNorm / BatchNorm parameters and statistics (a fresh module's are 1 / 0,
    under which a kernel that drops gamma or beta would still match)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.LayerNorm, torch.nn.BatchNorm2d)):
                n = m.weight.numel()
                m.weight.copy_(torch.rand(n, generator=g) + 0.5)
                m.bias.copy_(torch.randn(n, generator=g) * 0.1)
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)


# ---- inputs ------------------------------------------------------------------------------------

def bert_inputs(seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, VOCAB, (BATCH, SEQ)).astype(np.int64)
    mask = np.ones((BATCH, SEQ), np.int64)
    mask[1, 11:] = 0  # the second sequence is padded: 11 real tokens
    ids[1, 11:] = 0
    tok = np.zeros((BATCH, SEQ), np.int64)
    tok[:, SEQ // 2:] = 1
    tok[1, 11:] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": tok}


def gpt2_inputs(seed):
    rng = np.random.default_rng(seed)
    return {"input_ids": rng.integers(0, VOCAB, (BATCH, SEQ)).astype(np.int64)}


def cnn_inputs(seed):
    rng = np.random.default_rng(seed)
    return {"x": rng.uniform(-1, 1, (1, 3, 32, 32)).astype(np.float32)}


class Reader(CalibrationDataReader):
    """Fixed-seed calibration data: n batches from make(seed)."""

    def __init__(self, make, n, seed, names):
        self.data = iter([{k: v for k, v in make(seed + i).items() if k in names}
                          for i in range(n)])

    def get_next(self):
        return next(self.data, None)


# ---- export, optimise, quantise ---------------------------------------------------------------

def export(module, inputs, path, output_names, dynamic):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, tuple(torch.from_numpy(v) for v in inputs.values()), path,
                          input_names=list(inputs), output_names=output_names,
                          dynamic_axes=dynamic, opset_version=OPSET, dynamo=False)
    # Check PyTorch against ONNX Runtime on the export itself.
    with torch.no_grad():
        want = module(*(torch.from_numpy(v) for v in inputs.values()))
    want = want if isinstance(want, tuple) else (want,)
    got = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, inputs)
    for w, g in zip(want, got):
        err = np.abs(w.numpy() - g).max()
        assert err < 1e-4, f"{path}: export differs from PyTorch by {err}"


def optimize(src, dst, model_type):
    m = optimize_model(src, model_type=model_type, num_heads=HEADS, hidden_size=HIDDEN,
                       opt_level=0)  # the Python fusions alone; no ORT graph-level rewrite
    m.save_model_to_file(dst)
    print(f"{dst}: fusions {json.dumps(m.get_fused_operator_statistics())}")


def node_inputs(model_path):
    g = onnx.load(model_path).graph
    inits = {i.name for i in g.initializer}
    return [i.name for i in g.input if i.name not in inits]


def write_case(model_path, inputs, reference_level):
    """test_data_set_0: the model's inputs (in graph order) and ONNX Runtime's outputs."""
    folder = os.path.join(os.path.dirname(model_path), "test_data_set_0")
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    os.makedirs(folder)
    names = node_inputs(model_path)
    feeds = {n: inputs[n] for n in names}
    so = ort.SessionOptions()
    so.graph_optimization_level = reference_level
    sess = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
    outs = sess.run(None, feeds)
    for i, n in enumerate(names):
        with open(os.path.join(folder, f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(feeds[n], n).SerializeToString())
    for i, (o, v) in enumerate(zip(sess.get_outputs(), outs)):
        with open(os.path.join(folder, f"output_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(v, o.name).SerializeToString())
    return outs


# ---- op inventory ------------------------------------------------------------------------------

def _attr(a):
    v = helper.get_attribute_value(a)
    if isinstance(v, bytes):
        v = v.decode()
    if isinstance(v, float):
        v = float(f"{v:.6g}")
    if isinstance(v, list):
        v = [float(f"{x:.6g}") if isinstance(x, float) else x for x in v]
    return v


def inventory(model_path):
    """{'ops': {domain:op: count}, 'contrib': {op: [(attrs, n_inputs, optional inputs given)]}}"""
    m = onnx.load(model_path)
    ops = collections.Counter()
    contrib = collections.defaultdict(set)
    for n in m.graph.node:
        key = f"{n.domain + ':' if n.domain else ''}{n.op_type}"
        ops[key] += 1
        if n.domain == "com.microsoft":
            attrs = json.dumps({a.name: _attr(a)
                                for a in sorted(n.attribute, key=lambda a: a.name)})
            given = ",".join(str(i) for i, x in enumerate(n.input) if x)
            made = ",".join(str(i) for i, x in enumerate(n.output) if x)
            contrib[n.op_type].add(f"attrs {attrs}; inputs given: [{given}] of {len(n.input)}; "
                                   f"outputs: [{made}] of {len(n.output)}")
    opsets = {o.domain or "ai.onnx": o.version for o in m.opset_import}
    return dict(ops=dict(sorted(ops.items())), contrib={k: sorted(v) for k, v in contrib.items()},
                opsets=opsets, bytes=os.path.getsize(model_path))


# ---- main --------------------------------------------------------------------------------------

# The quantizer's shape inference knows no com.microsoft op: tensors it cannot type are fp32.
TYPES = {"DefaultTensorType": onnx.TensorProto.FLOAT}

MODELS = {}  # name -> (how it was made, reference level name)


def make_all(out):
    tmp = tempfile.mkdtemp(prefix="ort-tools-")
    full = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    as_written = ort.GraphOptimizationLevel.ORT_DISABLE_ALL

    def folder(name):
        d = os.path.join(out, name)
        if os.path.isdir(d):
            shutil.rmtree(d)
        os.makedirs(d)
        return os.path.join(d, "model.onnx")

    # BERT.
    torch.manual_seed(0)
    bert = Bert().eval()
    randomise_norms(bert, 10)
    bx = bert_inputs(100)
    bert_raw = os.path.join(tmp, "bert.onnx")
    export(bert, bx, bert_raw, ["last_hidden_state", "pooler_output"],
           {k: {0: "batch", 1: "seq"} for k in bx} | {"last_hidden_state": {0: "batch", 1: "seq"},
                                                      "pooler_output": {0: "batch"}})
    p = folder("bert_opt")
    optimize(bert_raw, p, "bert")
    MODELS["bert_opt"] = ("PyTorch BERT -> optimize_model(model_type='bert', num_heads=4, "
                          "hidden_size=64, opt_level=0)", full)
    reader_names = set(bx)
    # The quantizer's pre-processing: ONNX Runtime's symbolic shape inference (which knows the
    # com.microsoft ops) types every tensor; its graph optimisation is skipped.
    p_pre = os.path.join(tmp, "bert_pre.onnx")
    quant_pre_process(p, p_pre, skip_optimization=True)
    p = p_pre
    q = folder("bert_opt_dynamic")
    quantize_dynamic(p, q, weight_type=QuantType.QInt8, extra_options=TYPES)
    MODELS["bert_opt_dynamic"] = ("bert_opt -> quantize_dynamic(weight_type=QInt8)", full)
    q = folder("bert_opt_qdq")
    quantize_static(p, q, Reader(bert_inputs, 8, 200, reader_names), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    extra_options=TYPES)
    MODELS["bert_opt_qdq"] = ("bert_opt -> quantize_static(QDQ, activations QUInt8, weights "
                              "QInt8, 8 calibration batches)", as_written)
    q = folder("bert_opt_qoperator")
    quantize_static(p, q, Reader(bert_inputs, 8, 200, reader_names),
                    quant_format=QuantFormat.QOperator, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8, extra_options=TYPES)
    MODELS["bert_opt_qoperator"] = ("bert_opt -> quantize_static(QOperator, activations QUInt8, "
                                    "weights QInt8, 8 calibration batches)", full)
    for name in ("bert_opt", "bert_opt_dynamic", "bert_opt_qdq", "bert_opt_qoperator"):
        write_case(os.path.join(out, name, "model.onnx"), bx, MODELS[name][1])

    # GPT-2.
    torch.manual_seed(1)
    gpt2 = Gpt2().eval()
    randomise_norms(gpt2, 11)
    gx = gpt2_inputs(300)
    gpt2_raw = os.path.join(tmp, "gpt2.onnx")
    export(gpt2, gx, gpt2_raw, ["logits"],
           {"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}})
    p = folder("gpt2_opt")
    optimize(gpt2_raw, p, "gpt2")
    MODELS["gpt2_opt"] = ("PyTorch GPT-2 -> optimize_model(model_type='gpt2', num_heads=4, "
                          "hidden_size=64, opt_level=0)", full)
    q = folder("gpt2_dynamic")
    quantize_dynamic(gpt2_raw, q, weight_type=QuantType.QInt8)
    MODELS["gpt2_dynamic"] = ("PyTorch GPT-2 (plain export) -> quantize_dynamic(weight_type=QInt8)",
                              full)
    for name in ("gpt2_opt", "gpt2_dynamic"):
        write_case(os.path.join(out, name, "model.onnx"), gx, MODELS[name][1])

    # CNN.
    torch.manual_seed(2)
    cnn = Cnn().eval()
    randomise_norms(cnn, 3)
    cx = cnn_inputs(400)
    cnn_raw = os.path.join(tmp, "cnn.onnx")
    export(cnn, cx, cnn_raw, ["logits"], None)
    # The quantizer's own pre-processing (shape inference, BatchNorm folded into Conv).
    cnn_pre = os.path.join(tmp, "cnn_pre.onnx")
    quant_pre_process(cnn_raw, cnn_pre)
    q = folder("cnn_dynamic")
    quantize_dynamic(cnn_pre, q, weight_type=QuantType.QUInt8)
    MODELS["cnn_dynamic"] = ("PyTorch CNN -> quant_pre_process -> quantize_dynamic("
                             "weight_type=QUInt8)", full)
    q = folder("cnn_qdq")
    quantize_static(cnn_pre, q, Reader(cnn_inputs, 16, 500, {"x"}), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    per_channel=True)
    MODELS["cnn_qdq"] = ("PyTorch CNN -> quant_pre_process -> quantize_static(QDQ, per_channel, "
                         "activations QUInt8, weights QInt8, 16 calibration images)", as_written)
    q = folder("cnn_qoperator")
    quantize_static(cnn_pre, q, Reader(cnn_inputs, 16, 500, {"x"}),
                    quant_format=QuantFormat.QOperator, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8, per_channel=True)
    MODELS["cnn_qoperator"] = ("PyTorch CNN -> quant_pre_process -> quantize_static(QOperator, "
                               "per_channel, activations QUInt8, weights QInt8, 16 calibration "
                               "images)", full)
    for name in ("cnn_dynamic", "cnn_qdq", "cnn_qoperator"):
        write_case(os.path.join(out, name, "model.onnx"), cx, MODELS[name][1])

    shutil.rmtree(tmp)


def write_readme(out):
    lines = []
    all_contrib = collections.defaultdict(set)
    for name, (how, level) in MODELS.items():
        inv = inventory(os.path.join(out, name, "model.onnx"))
        as_written = level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        ref = "graph as written (ORT_DISABLE_ALL)" if as_written else "ORT_ENABLE_ALL"
        lines.append(f"### {name}\n")
        lines.append(f"- made: {how}")
        lines.append(f"- size: {inv['bytes']} bytes; opsets: {inv['opsets']}")
        lines.append(f"- reference: ONNX Runtime {ort.__version__} CPUExecutionProvider, {ref}")
        lines.append("- ops: " + ", ".join(f"{k} x{v}" for k, v in inv["ops"].items()))
        for op, uses in inv["contrib"].items():
            for u in uses:
                all_contrib[op].add(f"{name}: {u}")
        lines.append("")
    lines.append("### com.microsoft ops, all models (attributes as written; inputs given / "
                 "outputs = the positions of non-empty names)\n")
    for op in sorted(all_contrib):
        lines.append(f"- **{op}**")
        for u in sorted(all_contrib[op]):
            lines.append(f"  - {u}")
    body = "\n".join(lines) + "\n"
    path = os.path.join(out, "README.md")
    text = (open(path).read() if os.path.isfile(path)
            else "<!-- BEGIN GENERATED -->\n<!-- END GENERATED -->\n")
    a, b = text.index("<!-- BEGIN GENERATED -->"), text.index("<!-- END GENERATED -->")
    text = text[:a] + "<!-- BEGIN GENERATED -->\n" + body + text[b:]
    with open(path, "w") as f:
        f.write(text)


def main(out):
    os.makedirs(out, exist_ok=True)
    make_all(out)
    write_readme(out)
    for name in MODELS:
        size = os.path.getsize(os.path.join(out, name, "model.onnx"))
        assert size < 1 << 20, f"{name}: {size} bytes (>= 1 MB)"
        print(f"{name:20} {size:8} bytes")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else HERE)
