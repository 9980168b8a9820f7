"""The zoo's plain `torch.nn` models (issue 44): the convolution forms and the sequence model a
user writes by hand, small, with random weights (batch norms calibrated on one random batch).

- `zoo-resnext`: two ResNeXt bottleneck blocks, 3x3 convolutions in 8 groups of 4 channels;
- `zoo-dilated`: a context module of 3x3 convolutions dilated 1, 2 and 4 (as in DeepLab);
- `zoo-transposed`: an encoder-decoder whose decoder upsamples with transposed convolutions;
- `zoo-conv1d`: a temporal convolution network, 1-D convolutions dilated 1, 2, 4, residual;
- `zoo-mixer`: an LSTM-free sequence model: token embeddings, then blocks of causal depthwise
  1-D convolution (token mixing) and a gated MLP (channel mixing), layer norms between.
"""

from __future__ import annotations

import torch
from torch import nn

from minitc.benchmarks.zoo_common import SEED, calibrate_batch_norm, image, token_ids


class ResNeXtBlock(nn.Module):
    """ResNeXt's bottleneck: 1x1 down, a grouped 3x3, 1x1 up, residual."""

    def __init__(self, channels: int, width: int, groups: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, groups=groups, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + x)


class ResNeXt(nn.Module):
    def __init__(self, channels: int = 32, width: int = 32, groups: int = 8, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels), nn.ReLU())
        self.blocks = nn.Sequential(*(ResNeXtBlock(channels, width, groups) for _ in range(2)))
        self.fc = nn.Linear(channels, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(x.mean(dim=(-2, -1)))


class DilatedContext(nn.Module):
    """3x3 convolutions dilated 1, 2, 4 at full resolution (padding = dilation), then a 1x1 head."""

    def __init__(self, channels: int = 16, classes: int = 5):
        super().__init__()
        layers, cin = [], 3
        for d in (1, 2, 4):
            layers += [nn.Conv2d(cin, channels, 3, padding=d, dilation=d), nn.BatchNorm2d(channels), nn.ReLU()]
            cin = channels
        self.body = nn.Sequential(*layers)
        self.head = nn.Conv2d(channels, classes, 1)

    def forward(self, x):
        return self.head(self.body(x))


class EncoderDecoder(nn.Module):
    """Two stride-2 convolutions down, two stride-2 transposed convolutions up, a skip between."""

    def __init__(self, channels: int = 16):
        super().__init__()
        self.down1 = nn.Sequential(nn.Conv2d(3, channels, 3, stride=2, padding=1), nn.ReLU())
        self.down2 = nn.Sequential(nn.Conv2d(channels, 2 * channels, 3, stride=2, padding=1), nn.ReLU())
        self.up1 = nn.ConvTranspose2d(2 * channels, channels, 4, stride=2, padding=1)
        self.up2 = nn.ConvTranspose2d(channels, 3, 2, stride=2)

    def forward(self, x):
        skip = self.down1(x)
        y = torch.relu(self.up1(self.down2(skip))) + skip
        return self.up2(y)


class TemporalConvNet(nn.Module):
    """Residual blocks of two 1-D convolutions dilated 1, 2, 4 (non-causal, same length)."""

    def __init__(self, channels: int = 32, inputs: int = 8, classes: int = 4):
        super().__init__()
        self.inp = nn.Conv1d(inputs, channels, 1)
        self.blocks = nn.ModuleList(
            nn.Sequential(
                nn.Conv1d(channels, channels, 3, padding=d, dilation=d),
                nn.GELU(),
                nn.Conv1d(channels, channels, 3, padding=d, dilation=d),
            )
            for d in (1, 2, 4)
        )
        self.out = nn.Conv1d(channels, classes, 1)

    def forward(self, x):
        x = self.inp(x)
        for block in self.blocks:
            x = torch.relu(block(x) + x)
        return self.out(x)


class MixerBlock(nn.Module):
    def __init__(self, dim: int, kernel: int = 4):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.kernel = kernel
        self.mix = nn.Conv1d(dim, dim, kernel, groups=dim)  # causal: left padding only
        self.gate, self.up, self.down = nn.Linear(dim, 2 * dim), nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)

    def forward(self, x):  # x: [batch, tokens, dim]
        h = self.norm1(x).transpose(1, 2)
        h = self.mix(nn.functional.pad(h, (self.kernel - 1, 0)))
        x = x + h.transpose(1, 2)
        h = self.norm2(x)
        return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))


class ConvMixer(nn.Module):
    def __init__(self, vocab: int = 1000, dim: int = 64, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.Sequential(*(MixerBlock(dim) for _ in range(layers)))
        self.norm = nn.LayerNorm(dim)

    def forward(self, ids):
        return self.norm(self.blocks(self.embed(ids)))


def _cnn(model: nn.Module, shape: tuple) -> tuple:
    return calibrate_batch_norm(model, (4, *shape[1:])), image(shape)


def resnext():
    torch.manual_seed(SEED)
    return _cnn(ResNeXt(), (1, 3, 16, 16))


def dilated():
    torch.manual_seed(SEED)
    return _cnn(DilatedContext(), (1, 3, 32, 32))


def transposed():
    torch.manual_seed(SEED)
    return _cnn(EncoderDecoder(), (1, 3, 32, 32))


def conv1d():
    torch.manual_seed(SEED)
    x = torch.randn(1, 8, 64, generator=torch.Generator().manual_seed(0))
    return TemporalConvNet().eval(), (x,)


def mixer():
    torch.manual_seed(SEED)
    return ConvMixer().eval(), (token_ids(1000, 32),)


ZOO = {
    "zoo-resnext": ("two ResNeXt blocks (3x3 convolutions in 8 groups), 1x3x16x16", resnext),
    "zoo-dilated": ("3x3 convolutions dilated 1, 2, 4, 1x3x32x32", dilated),
    "zoo-transposed": ("encoder-decoder with stride-2 transposed convolutions, 1x3x32x32", transposed),
    "zoo-conv1d": ("temporal convolution network (1-D, dilated), 1x8x64", conv1d),
    "zoo-mixer": ("LSTM-free sequence model: causal depthwise 1-D convolution + gated MLP, 32 tokens", mixer),
}
