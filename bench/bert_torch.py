#!/usr/bin/python3
"""Exports a BERT-base encoder written in PyTorch to ONNX, as a real exporter writes it.

    /usr/bin/python3 bench/bert_torch.py OUT.onnx     # Debian python3-torch

BERT-base shapes (vocabulary 30522, hidden 768, 12 layers, 12 heads, FFN 3072, GELU via Erf),
with embeddings (word + position + token type, then LayerNorm) and an additive attention mask;
inputs input_ids and attention_mask, int64 [1, 128]; output the last hidden state [1, 128, 768].
Random weights (seed 0) with BERT's initialisation (normal, std 0.02). Opset 17, so LayerNorm is
the LayerNormalization op; the head split and merge come out as the exporter's Shape/Gather/
Concat/Reshape chains. Used by run_all.py next to the onnx.helper encoder of run_bert.py.
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, HIDDEN, LAYERS, HEADS, FFN, SEQ, MAX_POS = 30522, 768, 12, 12, 3072, 128, 512


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.ModuleList(nn.Linear(HIDDEN, HIDDEN) for _ in range(3))
        self.out = nn.Linear(HIDDEN, HIDDEN)
        self.ln1 = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.up = nn.Linear(HIDDEN, FFN)
        self.down = nn.Linear(FFN, HIDDEN)
        self.ln2 = nn.LayerNorm(HIDDEN, eps=1e-12)

    def forward(self, x, mask_bias):
        b, s, _ = x.shape
        q, k, v = (p(x).view(b, s, HEADS, HIDDEN // HEADS).transpose(1, 2) for p in self.qkv)
        scores = q @ k.transpose(-1, -2) / (HIDDEN // HEADS) ** 0.5 + mask_bias
        ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, HIDDEN)
        x = self.ln1(x + self.out(ctx))
        return self.ln2(x + self.down(F.gelu(self.up(x))))


class Bert(nn.Module):
    def __init__(self):
        super().__init__()
        self.word = nn.Embedding(VOCAB, HIDDEN)
        self.pos = nn.Embedding(MAX_POS, HIDDEN)
        self.segment = nn.Embedding(2, HIDDEN)
        self.ln = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, input_ids, attention_mask):
        positions = torch.arange(input_ids.shape[1]).unsqueeze(0)
        x = self.ln(self.word(input_ids) + self.pos(positions) +
                    self.segment(torch.zeros_like(input_ids)))
        mask_bias = (1.0 - attention_mask[:, None, None, :].float()) * -10000.0
        for layer in self.layers:
            x = layer(x, mask_bias)
        return x


def main():
    torch.manual_seed(0)
    model = Bert().eval()
    ids = torch.randint(0, VOCAB, (1, SEQ))
    mask = torch.ones(1, SEQ, dtype=torch.int64)
    torch.onnx.export(model, (ids, mask), sys.argv[1], opset_version=17,
                      input_names=["input_ids", "attention_mask"], output_names=["last_hidden"],
                      do_constant_folding=True)


if __name__ == "__main__":
    main()
