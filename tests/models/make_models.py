#!/usr/bin/env python3
"""Exports the small PyTorch models of tests/models and records ONNX Runtime reference outputs.

Two phases, because the exporter and the reference runtime live in different Pythons here:

    /usr/bin/python3 tests/models/make_models.py export     # Debian python3-torch + python3-onnx
    python3 tests/models/make_models.py reference           # pip onnx + onnxruntime

`export` writes <name>/model.onnx and <name>/test_data_set_0/input_N.pb; `reference` converts the
opset-18 variants (ReduceMean with axes as an input) and writes output_N.pb from ONNX Runtime.
The files are committed, so tests need neither PyTorch nor ONNX Runtime. Weights are random with
fixed seeds, scaled like trained weights (outputs of normal scale, |y| ~ 1).
"""
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


# ----------------------------------------------------------------------------- export (torch)
def export_all():
    import numpy as np
    import onnx
    import onnx.numpy_helper
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(0)

    class DecomposedLayerNorm(nn.Module):
        """LayerNorm as exporters write it without the fused op: ReduceMean/Sub/Pow/Sqrt/Div."""

        def __init__(self, d, eps=1e-5):
            super().__init__()
            self.weight = nn.Parameter(1 + 0.1 * torch.randn(d))
            self.bias = nn.Parameter(0.1 * torch.randn(d))
            self.eps = eps

        def forward(self, x):
            mean = x.mean(-1, keepdim=True)
            var = (x - mean).pow(2).mean(-1, keepdim=True)
            return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias

    def tanh_gelu(x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))

    class Block(nn.Module):
        def __init__(self, d, heads, ln, gelu, causal):
            super().__init__()
            self.h, self.dk, self.causal, self.gelu = heads, d // heads, causal, gelu
            self.ln1, self.ln2 = ln(d), ln(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.fc1 = nn.Linear(d, 4 * d)
            self.fc2 = nn.Linear(4 * d, d)

        def attn(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(x).split(d, dim=-1)
            q = q.reshape(b, t, self.h, self.dk).transpose(1, 2)
            k = k.reshape(b, t, self.h, self.dk).transpose(1, 2)
            v = v.reshape(b, t, self.h, self.dk).transpose(1, 2)
            s = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.dk)
            if self.causal:
                mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
                s = s.masked_fill(mask, float("-inf"))
            p = torch.softmax(s, dim=-1)
            y = torch.matmul(p, v).transpose(1, 2).reshape(b, t, d)
            return self.proj(y)

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.fc2(self.gelu(self.fc1(self.ln2(x))))

    class Bert(nn.Module):
        def __init__(self, ln, vocab=100, d=32, heads=4, layers=2, t=16):
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(t, d)
            self.blocks = nn.ModuleList(Block(d, heads, ln, F.gelu, False) for _ in range(layers))
            self.ln = ln(d)
            self.head = nn.Linear(d, 8)

        def forward(self, ids):
            pos = torch.arange(ids.shape[1]).unsqueeze(0)
            x = self.tok(ids) + self.pos(pos)
            for b in self.blocks:
                x = b(x)
            return self.head(self.ln(x))

    class Gpt2(nn.Module):
        def __init__(self, vocab=100, d=32, heads=4, layers=2, t=16):
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(t, d)
            self.blocks = nn.ModuleList(
                Block(d, heads, nn.LayerNorm, tanh_gelu, True) for _ in range(layers))
            self.ln = nn.LayerNorm(d)

        def forward(self, ids):
            pos = torch.arange(ids.shape[1]).unsqueeze(0)
            x = self.tok(ids) + self.pos(pos)
            for b in self.blocks:
                x = b(x)
            return torch.matmul(self.ln(x), self.tok.weight.t())

    class Vit(nn.Module):
        def __init__(self, d=32, heads=4, layers=2, patch=4, img=16, classes=10):
            super().__init__()
            self.patch = nn.Conv2d(3, d, patch, patch)
            n = (img // patch) ** 2
            self.cls = nn.Parameter(0.02 * torch.randn(1, 1, d))
            self.pos = nn.Parameter(0.02 * torch.randn(1, n + 1, d))
            self.blocks = nn.ModuleList(
                Block(d, heads, nn.LayerNorm, F.gelu, False) for _ in range(layers))
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, classes)

        def forward(self, x):
            x = self.patch(x).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
            for b in self.blocks:
                x = b(x)
            return self.head(self.ln(x)[:, 0])

    def conv_bn(cin, cout, k, s, groups=1, act=nn.ReLU6):
        return nn.Sequential(nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False),
                             nn.BatchNorm2d(cout), act())

    class MobileNet(nn.Module):
        def __init__(self):
            super().__init__()
            layers = [conv_bn(3, 16, 3, 2)]
            for cin, cout, s in [(16, 24, 2), (24, 24, 1), (24, 32, 2)]:
                layers += [conv_bn(cin, cin, 3, s, groups=cin), conv_bn(cin, cout, 1, 1, act=nn.Hardswish)]
            self.features = nn.Sequential(*layers)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(32, 10)

        def forward(self, x):
            return self.fc(torch.flatten(self.pool(self.features(x)), 1))

    class Fire(nn.Module):
        def __init__(self, cin, s, e):
            super().__init__()
            self.squeeze = nn.Conv2d(cin, s, 1)
            self.e1 = nn.Conv2d(s, e, 1)
            self.e3 = nn.Conv2d(s, e, 3, padding=1)

        def forward(self, x):
            x = F.relu(self.squeeze(x))
            return torch.cat([F.relu(self.e1(x)), F.relu(self.e3(x))], 1)

    class SqueezeNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 32, 3, 2), nn.ReLU(), nn.MaxPool2d(3, 2, ceil_mode=True),
                Fire(32, 8, 16), Fire(32, 8, 16), nn.MaxPool2d(3, 2, ceil_mode=True),
                Fire(32, 16, 32))
            self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Conv2d(64, 10, 1), nn.ReLU(),
                                            nn.AdaptiveAvgPool2d(1))

        def forward(self, x):
            return torch.flatten(self.classifier(self.features(x)), 1)

    def save_tensor(arr, path):
        with open(path, "wb") as f:
            f.write(onnx.numpy_helper.from_array(arr).SerializeToString())

    def export(name, model, inputs, input_names, dynamic_axes=None, opset=17):
        model.eval()
        for m in model.modules():  # BatchNorm statistics of a trained-looking network
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
        d = os.path.join(HERE, name)
        os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
        torch.onnx.export(model, tuple(inputs), os.path.join(d, "model.onnx"),
                          input_names=input_names, output_names=["output"],
                          dynamic_axes=dynamic_axes, opset_version=opset,
                          do_constant_folding=True)
        for i, x in enumerate(inputs):
            save_tensor(x.numpy(), os.path.join(d, "test_data_set_0", f"input_{i}.pb"))
        print("exported", name)

    class OverflowClassifier(nn.Module):
        """A small encoder with decomposed LayerNorm whose hidden states are a few hundred with
        deviations of several hundred: (x - mean)^2 exceeds fp16's 65504, so per-node fp16
        overflows at the Pow while fp32 LayerNorm is exact enough."""

        def __init__(self, vocab=100, d=32, heads=4, layers=2, t=16, classes=10):
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            with torch.no_grad():
                self.tok.weight.mul_(300.0).add_(200.0)
            self.blocks = nn.ModuleList(
                Block(d, heads, DecomposedLayerNorm, F.gelu, False) for _ in range(layers))
            self.ln = DecomposedLayerNorm(d)
            self.head = nn.Linear(d, classes)

        def forward(self, ids):
            x = self.tok(ids)
            for b in self.blocks:
                x = b(x)
            return self.head(self.ln(x).mean(1))

    torch.manual_seed(1)
    clf_ids = torch.randint(0, 100, (256, 16), dtype=torch.int64)
    export("ln_overflow_classifier", OverflowClassifier(), [clf_ids], ["ids"])
    torch.manual_seed(0)

    ids = torch.randint(0, 100, (2, 16), dtype=torch.int64)
    seq_axes = {"ids": {0: "batch", 1: "seq"}, "output": {0: "batch", 1: "seq"}}
    export("bert_layernorm_op", Bert(nn.LayerNorm), [ids], ["ids"], seq_axes)
    export("bert_layernorm_decomposed", Bert(DecomposedLayerNorm), [ids], ["ids"], seq_axes)
    export("gpt2_causal", Gpt2(), [ids[:, :12]], ["ids"], seq_axes)
    img = torch.randn(2, 3, 16, 16)
    export("vit_tiny", Vit(), [img], ["image"], {"image": {0: "batch"}, "output": {0: "batch"}})
    img2 = torch.randn(1, 3, 32, 32)
    export("mobilenet_tiny", MobileNet(), [img2], ["image"])
    export("squeezenet_tiny", SqueezeNet(), [img2], ["image"])


# ----------------------------------------------------------------- reference (onnxruntime)
def reference_all():
    import numpy as np
    import onnx
    import onnx.numpy_helper
    import onnx.version_converter
    import onnxruntime as ort

    # Opset-18 variants, as current exporters write them: the decomposed LayerNorm model
    # (ReduceMean takes axes as an input) at IR 8, and the ViT at IR 10.
    for src_name, dst_name, ir in [("bert_layernorm_decomposed",
                                    "bert_layernorm_decomposed_opset18", 8),
                                   ("vit_tiny", "vit_tiny_opset18_ir10", 10)]:
        src = os.path.join(HERE, src_name)
        dst = os.path.join(HERE, dst_name)
        os.makedirs(os.path.join(dst, "test_data_set_0"), exist_ok=True)
        m18 = onnx.version_converter.convert_version(onnx.load(os.path.join(src, "model.onnx")), 18)
        m18.ir_version = ir
        onnx.save(m18, os.path.join(dst, "model.onnx"))
        with open(os.path.join(src, "test_data_set_0", "input_0.pb"), "rb") as f:
            data = f.read()
        with open(os.path.join(dst, "test_data_set_0", "input_0.pb"), "wb") as f:
            f.write(data)

    make_authored_mixed(np, onnx)

    for name in sorted(os.listdir(HERE)):
        d = os.path.join(HERE, name)
        if not os.path.isfile(os.path.join(d, "model.onnx")) or name == "authored_mixed":
            continue  # authored_mixed is checked against its exact emulation, not ORT
        opts = ort.SessionOptions()
        # Reference numerics, not ORT's fused approximations.
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(os.path.join(d, "model.onnx"), opts,
                                    providers=["CPUExecutionProvider"])
        feeds = {}
        for i, inp in enumerate(sess.get_inputs()):
            t = onnx.TensorProto()
            with open(os.path.join(d, "test_data_set_0", f"input_{i}.pb"), "rb") as f:
                t.ParseFromString(f.read())
            feeds[inp.name] = onnx.numpy_helper.to_array(t)
        outs = sess.run(None, feeds)
        for i, o in enumerate(outs):
            with open(os.path.join(d, "test_data_set_0", f"output_{i}.pb"), "wb") as f:
                f.write(onnx.numpy_helper.from_array(o).SerializeToString())
        m = onnx.load(os.path.join(d, "model.onnx"))
        ops = sorted({n.op_type for n in m.graph.node})
        print(f"{name}: opset {m.opset_import[0].version} ir {m.ir_version}, "
              f"{len(m.graph.node)} nodes, output max|y| {np.abs(outs[0]).max():.3f}, ops {ops}")


def make_authored_mixed(np, onnx):
    """A model authored in mixed precision: fp16 MatMuls, with Casts keeping Pow, ReduceSum, Sqrt
    and Div in fp32. Its expected output is an exact emulation of those types (inputs rounded to
    the op's type, float64 arithmetic, result rounded once to the op's type)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 16)).astype(np.float32)
    w1 = (rng.standard_normal((16, 32)) * 0.5).astype(np.float16)
    w2 = (rng.standard_normal((32, 8)) * 0.5).astype(np.float16)
    two = np.array(2.0, np.float32)
    axes = np.array([-1], np.int64)
    nodes = [
        helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16, name="/cast_in"),
        helper.make_node("MatMul", ["x16", "w1"], ["h16"], name="/mm1"),
        helper.make_node("Cast", ["h16"], ["h"], to=TensorProto.FLOAT, name="/cast_h"),
        helper.make_node("Pow", ["h", "two"], ["sq"], name="/pow"),
        helper.make_node("ReduceSum", ["sq", "axes"], ["ss"], keepdims=1, name="/reducesum"),
        helper.make_node("Sqrt", ["ss"], ["norm"], name="/sqrt"),
        helper.make_node("Div", ["h", "norm"], ["n"], name="/div"),
        helper.make_node("Cast", ["n"], ["n16"], to=TensorProto.FLOAT16, name="/cast_n"),
        helper.make_node("MatMul", ["n16", "w2"], ["y16"], name="/mm2"),
        helper.make_node("Cast", ["y16"], ["y"], to=TensorProto.FLOAT, name="/cast_out"),
    ]
    graph = helper.make_graph(
        nodes, "authored_mixed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
         numpy_helper.from_array(two, "two"), numpy_helper.from_array(axes, "axes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    d = os.path.join(HERE, "authored_mixed")
    os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
    onnx.save(model, os.path.join(d, "model.onnx"))

    f64 = np.float64
    h16 = (x.astype(np.float16).astype(f64) @ w1.astype(f64)).astype(np.float16)
    h = h16.astype(np.float32)
    sq = (h.astype(f64) ** 2).astype(np.float32)
    ss = sq.astype(f64).sum(-1, keepdims=True).astype(np.float32)
    norm = np.sqrt(ss.astype(f64)).astype(np.float32)
    n = (h.astype(f64) / norm.astype(f64)).astype(np.float32)
    y16 = (n.astype(np.float16).astype(f64) @ w2.astype(f64)).astype(np.float16)
    y = y16.astype(np.float32)
    for name, arr in [("input_0", x), ("emulated_output_0", y)]:
        with open(os.path.join(d, "test_data_set_0", f"{name}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(arr).SerializeToString())


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("export", "reference"):
        sys.exit(__doc__)
    export_all() if sys.argv[1] == "export" else reference_all()
