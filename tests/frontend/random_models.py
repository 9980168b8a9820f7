"""Small random models for the property tests (test_property.py): seeded plain torch.nn, mixing
what the blocked layout and the fusion passes must handle. A CNN draws blocks among
squeeze-excitation (a pooled value read by convolutions, its gate broadcast as (N, C, 1, 1)),
per-channel (N, C, 1, 1) scales made at run time, a one-channel (N, 1, H, W) gate, odd channel
counts that no vector width divides, views and reshapes of convolution outputs, channel-last
permutes with a layer norm, attention over the pixels, depthwise convolutions, pools, batch
norms, residual adds and channel concatenation. A transformer draws layer norms, attention with a causal or no mask,
MLPs, views and permutes of its tokens."""

from __future__ import annotations

import random

import torch
from torch import nn

WIDTHS = (3, 5, 8, 12, 16, 20, 24, 32, 40, 48)  # 3, 5, 12, 20: no vector width divides them


def _act(rng):
    return rng.choice([nn.ReLU(), nn.GELU(), nn.Sigmoid(), nn.SiLU(), nn.Hardswish(), nn.ReLU6(), nn.Identity()])


class SE(nn.Module):
    def __init__(self, c, rng):
        super().__init__()
        mid = rng.choice([max(1, c // 4), 8, 5])
        self.down, self.up, self.act = nn.Conv2d(c, mid, 1), nn.Conv2d(mid, c, 1), _act(rng)

    def forward(self, x):
        return x * torch.sigmoid(self.up(self.act(self.down(x.mean((2, 3), keepdim=True)))))


class LinearSE(nn.Module):
    """Squeeze-excitation through linear layers: the gate is viewed back to (N, C, 1, 1)."""

    def __init__(self, c, rng):
        super().__init__()
        self.down, self.up = nn.Linear(c, rng.choice([4, 6])), nn.Linear(0, 0)
        self.up = nn.Linear(self.down.out_features, c)

    def forward(self, x):
        n, c = x.shape[:2]
        return x * torch.sigmoid(self.up(torch.relu(self.down(x.mean((2, 3)))))).view(n, c, 1, 1)


class SpatialGate(nn.Module):
    """A map of one channel, (N, 1, H, W), broadcast over the channels (CBAM's spatial gate)."""

    def forward(self, x):
        return x * torch.sigmoid(x.mean(1, keepdim=True) + x.amax(1, keepdim=True))


class ChannelScale(nn.Module):
    """A (N, C, 1, 1) value computed at run time (not a constant) broadcast over the map."""

    def forward(self, x):
        s = x.amax((2, 3), keepdim=True).tanh() + 1.0
        return x * s - x.mean((2, 3), keepdim=True)


class ChannelsLastNorm(nn.Module):
    """ConvNeXt's layer norm: permute to NHWC, normalise the channels, permute back."""

    def __init__(self, c):
        super().__init__()
        self.norm = nn.LayerNorm(c)

    def forward(self, x):
        return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ViewMix(nn.Module):
    """Reshapes of a convolution output: split the channels in two groups and add them, or
    flatten the map and view it back."""

    def __init__(self, kind):
        super().__init__()
        self.kind = kind

    def forward(self, x):
        n, c, h, w = x.shape
        if self.kind == "split" and c % 2 == 0:
            g = x.view(n, 2, c // 2, h, w)
            return torch.cat([g[:, 0] + g[:, 1], g[:, 0] - g[:, 1]], dim=1)
        return (x.reshape(n, c, h * w) * 0.5).reshape(n, c, h, w)


class PixelAttention(nn.Module):
    def __init__(self, c, rng):
        super().__init__()
        heads = rng.choice([h for h in (1, 2, 4) if c % h == 0])
        self.attn = nn.MultiheadAttention(c, heads, batch_first=True)

    def forward(self, x):
        n, c, h, w = x.shape
        t = x.flatten(2).transpose(1, 2)
        t = t + self.attn(t, t, t, need_weights=False)[0]
        return t.transpose(1, 2).reshape(n, c, h, w)


class Residual(nn.Module):
    def __init__(self, body):
        super().__init__()
        self.body = body

    def forward(self, x):
        return x + self.body(x)


class CatBranch(nn.Module):
    def __init__(self, c, extra, rng):
        super().__init__()
        self.branch = nn.Conv2d(c, extra, rng.choice([1, 3]), padding="same")

    def forward(self, x):
        return torch.cat([x, self.branch(x)], dim=1)


def random_cnn(seed: int):
    """(model, input) of a random CNN of 3-7 blocks on a 1 x C x H x W input."""
    rng = random.Random(seed)
    c = channels = rng.choice([3, 4, 8])
    size = rng.choice([8, 10, 12, 16])
    layers, h = [], size
    for _ in range(rng.randint(3, 7)):
        kinds = ["conv", "conv", "dwconv", "se", "linear_se", "spatial", "scale", "norm", "view", "attn", "pool"]
        kind = rng.choice(kinds + ["res", "cat"])
        if kind == "conv" or c < 4:
            out, k = rng.choice(WIDTHS[1:]), rng.choice([1, 3])
            stride = 2 if h >= 8 and rng.random() < 0.3 else 1
            layers += [nn.Conv2d(c, out, k, stride, k // 2)]
            layers += [nn.BatchNorm2d(out)] if rng.random() < 0.5 else []
            layers += [_act(rng)]
            c, h = out, (h + 2 * (k // 2) - k) // stride + 1
        elif kind == "dwconv":
            layers += [nn.Conv2d(c, c, 3, 1, 1, groups=c), _act(rng)]
        elif kind == "se":
            layers.append(SE(c, rng))
        elif kind == "linear_se":
            layers.append(LinearSE(c, rng))
        elif kind == "spatial":
            layers.append(SpatialGate())
        elif kind == "scale":
            layers.append(ChannelScale())
        elif kind == "norm":
            layers.append(ChannelsLastNorm(c))
        elif kind == "view":
            layers.append(ViewMix(rng.choice(["split", "flat"])))
        elif kind == "attn":
            layers.append(PixelAttention(c, rng))
        elif kind == "pool" and h >= 4:
            layers.append(rng.choice([nn.MaxPool2d(2), nn.AvgPool2d(3, 1, 1)]))
            h = h // 2 if isinstance(layers[-1], nn.MaxPool2d) else h
        elif kind == "res":
            layers.append(Residual(nn.Sequential(nn.Conv2d(c, c, 3, 1, 1), _act(rng))))
        elif kind == "cat":
            extra = rng.choice([3, 8, 13])
            layers.append(CatBranch(c, extra, rng))
            c += extra
    if rng.random() < 0.5:  # a classifier head, else the feature map is the output
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, rng.choice([5, 10]))]
    torch.manual_seed(seed)
    model = nn.Sequential(*layers).eval()
    _randomise_norms(model)
    return model, torch.randn(1, channels, size, size)


class Block(nn.Module):
    def __init__(self, d, heads, causal, rng):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, rng.choice([2 * d, 3 * d])), _act(rng), nn.Linear(0, 0))
        self.mlp[2] = nn.Linear(self.mlp[0].out_features, d)
        self.heads, self.causal = heads, causal

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if self.causal:
            y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = torch.softmax(q @ k.transpose(-1, -2) * (d // self.heads) ** -0.5, dim=-1) @ v
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


def random_transformer(seed: int):
    """(model, input) of a random transformer of 1-3 blocks on 1 x T x D tokens."""
    rng = random.Random(seed)
    heads = rng.choice([1, 2, 3])
    d = heads * rng.choice([4, 6, 8])
    blocks = [Block(d, heads, rng.random() < 0.5, rng) for _ in range(rng.randint(1, 3))]
    torch.manual_seed(seed)
    model = nn.Sequential(*blocks, nn.LayerNorm(d)).eval()
    return model, torch.randn(1, rng.choice([5, 8, 16]), d)


def _randomise_norms(model) -> None:
    """Batch norms with statistics and affine terms away from the identity, so folding them is
    checked."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
