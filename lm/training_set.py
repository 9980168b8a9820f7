"""The workloads the language model learns from, and the held-out ones it is evaluated on.

TRAINING: subgraphs of ResNet-18/50, MobileNet-V2, VGG-16, BERT-base (sequence 128) and GPT-2 small
(sequence 256) at their real shapes, batch 1: convolutions 1x1 / 3x3 / strided / the stem,
depthwise convolutions, dense layers with their epilogues, attention batch matmuls, softmax,
layer norm, pooling, plus a few square matmuls.

HELD_OUT: the compute workloads of the benchmark suite `cpu-core` (matmul 512^3, the ResNet
3x3 convolution at 56x56, BERT's FFN dense with relu, BERT's attention batch matmul and
softmax). Training never sees these shapes (tests/lm/test_lm_language.py checks the keys differ),
so `python -m minitc.benchmarks --suite tlm-eval` measures generalisation to unseen workloads.
"""

from __future__ import annotations

import minitc as tc


def _ph(*shapes):
    return [tc.placeholder(s, "float32", name=n) for s, n in zip(shapes, "ABCDEFGH")]


def matmul(m, n, k):
    A, B = _ph((m, k), (k, n))
    return tc.ops.matmul(A, B)


def dense(m, n, k, activation=None, bias=True):
    X, W, b = _ph((m, k), (n, k), (n,))
    return tc.ops.dense(X, W, b if bias else None, activation=activation)


def bmm(batch, m, k, n):
    A, B = _ph((batch, m, k), (batch, k, n))
    return tc.ops.batch_matmul(A, B)


def conv(c, hw, k, r, stride=1, padding=None):
    X, W = _ph((1, c, hw, hw), (k, c, r, r))
    return tc.ops.conv2d(X, W, stride=stride, padding=r // 2 if padding is None else padding)


def depthwise(c, hw, stride=1):
    X, W = _ph((1, c, hw, hw), (c, 1, 3, 3))
    return tc.ops.depthwise_conv2d(X, W, stride=stride, padding=1)


def softmax(rows, cols):
    (X,) = _ph((rows, cols))
    return tc.ops.softmax(X)


def layer_norm(rows, cols):
    X, g, b = _ph((rows, cols), (cols,), (cols,))
    return tc.ops.layer_norm(X, g, b)


def max_pool(c, hw):
    (X,) = _ph((1, c, hw, hw))
    return tc.ops.max_pool2d(X, 3, 2, 1)


TRAINING = {
    # ResNet-18 / ResNet-50
    "resnet-stem": lambda: conv(3, 224, 64, 7, stride=2, padding=3),
    "resnet-pool": lambda: max_pool(64, 112),
    "resnet18-c2-s2": lambda: conv(64, 56, 128, 3, stride=2),
    "resnet18-c3": lambda: conv(128, 28, 128, 3),
    "resnet18-c3-s2": lambda: conv(128, 28, 256, 3, stride=2),
    "resnet18-c4": lambda: conv(256, 14, 256, 3),
    "resnet18-c5": lambda: conv(512, 7, 512, 3),
    "resnet50-1x1-64-256": lambda: conv(64, 56, 256, 1),
    "resnet50-1x1-256-64": lambda: conv(256, 56, 64, 1),
    "resnet50-1x1-512-128": lambda: conv(512, 28, 128, 1),
    "resnet50-1x1-256-1024": lambda: conv(256, 14, 1024, 1),
    "resnet50-1x1-2048-512": lambda: conv(2048, 7, 512, 1),
    "resnet-fc": lambda: dense(1, 1000, 512),
    # VGG-16: 3x3 convolutions on wide rows (ResNet's 3x3 at 56x56 is held out)
    "vgg16-conv2-128-112": lambda: conv(128, 112, 128, 3),
    "vgg16-conv3-256-56": lambda: conv(256, 56, 256, 3),
    # MobileNet-V2
    "mbv2-dw-32-112": lambda: depthwise(32, 112),
    "mbv2-dw-96-112-s2": lambda: depthwise(96, 112, stride=2),
    "mbv2-dw-192-28": lambda: depthwise(192, 28),
    "mbv2-dw-384-14": lambda: depthwise(384, 14),
    "mbv2-dw-960-7": lambda: depthwise(960, 7),
    "mbv2-pw-16-96-112": lambda: conv(16, 112, 96, 1),
    "mbv2-pw-144-24-56": lambda: conv(144, 56, 24, 1),
    "mbv2-pw-64-384-14": lambda: conv(64, 14, 384, 1),
    "mbv2-pw-960-160-7": lambda: conv(960, 7, 160, 1),
    # BERT-base, sequence 128
    "bert-qkv": lambda: dense(128, 768, 768),
    "bert-ffn2": lambda: dense(128, 768, 3072),
    "bert-ffn1-gelu": lambda: dense(128, 3072, 768, activation="gelu"),
    "bert-attn-av": lambda: bmm(12, 128, 128, 64),
    "bert-layernorm": lambda: layer_norm(128, 768),
    # GPT-2 small, sequence 256
    "gpt2-c-attn": lambda: dense(256, 2304, 768),
    "gpt2-mlp-fc-gelu": lambda: dense(256, 3072, 768, activation="gelu"),
    "gpt2-mlp-proj": lambda: dense(256, 768, 3072),
    "gpt2-attn-qk": lambda: bmm(12, 256, 64, 256),
    "gpt2-attn-av": lambda: bmm(12, 256, 256, 64),
    "gpt2-softmax": lambda: softmax(12 * 256, 256),
    "gpt2-layernorm": lambda: layer_norm(256, 768),
    # square matmuls
    "matmul-256": lambda: matmul(256, 256, 256),
    "matmul-384": lambda: matmul(384, 384, 384),
    "matmul-768": lambda: matmul(768, 768, 768),
    "matmul-1024": lambda: matmul(1024, 1024, 1024),
}

HELD_OUT = {
    "matmul-512": lambda: matmul(512, 512, 512),
    "conv-resnet": lambda: conv(64, 56, 64, 3),
    "dense-bert-ffn": lambda: dense(128, 3072, 768, activation="relu"),
    "bmm-bert": lambda: bmm(12, 128, 64, 128),
    "softmax-bert": lambda: softmax(1536, 128),
}


def workload(name: str):
    """The output tensor of a named training or held-out workload."""
    table = TRAINING if name in TRAINING else HELD_OUT
    if name not in table:
        raise KeyError(f"unknown workload {name!r}; known: {', '.join(list(TRAINING) + list(HELD_OUT))}")
    return table[name]()
