"""The whole models of the `models` suite, with random weights: nothing is downloaded.

    model, inputs = MODELS["resnet50"].make()   # the model in eval mode and a tuple of inputs

- ResNet-50 and MobileNet-V2 are torchvision's, layer for layer and with the same module names
  (so torchvision's state dicts would load), written in plain `torch.nn`: torchvision's wheel
  does not load beside this CPU build of torch. Weights are initialised as torchvision does;
  then one forward pass in training mode over a random batch sets the batch-norm statistics
  (`calibrate_batch_norm`), so activations stay near unit scale through the 50 layers and the
  folded batch norms are not the identity.
- BERT-base (batch 1, sequence 128) and GPT-2 small (batch 1, a 128-token prefill without a
  key/value cache) are `transformers` models built from their default configurations
  (`BertModel(BertConfig())`, `GPT2Model(GPT2Config())`) with PyTorch's SDPA attention; they
  return their last hidden state, one tensor, so every system is compared on the same output.

Real-size members of six more families (issue 53), run when named: ViT-B/16, Swin-T,
ConvNeXt-T, EfficientNet-B0, Whisper-base's encoder and a Qwen2-0.5B-shaped decoder
(benchmarks/zoo_realsize.py).

Small variants for the tests: `resnet18-small` (ResNet-18 of the same blocks on a 32x32 image,
10 classes), `tiny-bert` (2 layers, hidden 64, 2 heads, sequence 16) and `tiny-gpt2` (the same
sizes). Every factory is seeded: two calls give the same weights and inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from minitc.benchmarks import zoo_hf, zoo_nn, zoo_realsize
from minitc.benchmarks.zoo_common import ATTENTION, SEED, LastHiddenState, calibrate_batch_norm, image, token_ids


@dataclass(frozen=True)
class ModelSpec:
    name: str
    description: str
    make: Callable[[], tuple]  # () -> (model in eval mode, tuple of example inputs)
    full: bool = True  # a real-size model (the others are the test variants and the zoo's small ones)
    default: bool = True  # one of the suite's default models (real size, and quick enough for every run)
    needs: str | None = None  # a package the factory imports ("transformers")

    def __call__(self) -> tuple:  # a spec is its factory (`minitc compile MODEL` calls it)
        return self.make()


# --- ResNet (torchvision.models.resnet) ---------------------------------------------------------
def conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, kernel_size=3, stride=stride, padding=1, bias=False)


def conv1x1(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class Bottleneck(nn.Module):
    """ResNet V1.5: the stride is on the 3x3 convolution, as in torchvision."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = conv1x1(inplanes, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = conv3x3(planes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = conv1x1(planes, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    """torchvision's ResNet; `width` (64 there) scales every stage, for small test models."""

    def __init__(self, block, layers, num_classes: int = 1000, width: int = 64):
        super().__init__()
        self.inplanes = width
        self.conv1 = nn.Conv2d(3, width, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, width, layers[0])
        self.layer2 = self._make_layer(block, width * 2, layers[1], stride=2)
        self.layer3 = self._make_layer(block, width * 4, layers[2], stride=2)
        self.layer4 = self._make_layer(block, width * 8, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(width * 8 * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, block, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                conv1x1(self.inplanes, planes * block.expansion, stride), nn.BatchNorm2d(planes * block.expansion)
            )
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# --- MobileNet-V2 (torchvision.models.mobilenetv2) ----------------------------------------------
def make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


class Conv2dNormActivation(nn.Sequential):
    """torchvision.ops.Conv2dNormActivation with batch norm and ReLU6."""

    def __init__(self, cin: int, cout: int, kernel_size: int = 3, stride: int = 1, groups: int = 1):
        padding = (kernel_size - 1) // 2
        super().__init__(
            nn.Conv2d(cin, cout, kernel_size, stride, padding, groups=groups, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU6(inplace=True),
        )
        self.out_channels = cout


class InvertedResidual(nn.Module):
    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int):
        super().__init__()
        hidden = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers = [Conv2dNormActivation(inp, hidden, kernel_size=1)] if expand_ratio != 1 else []
        layers += [
            Conv2dNormActivation(hidden, hidden, stride=stride, groups=hidden),  # depthwise
            nn.Conv2d(hidden, oup, 1, 1, 0, bias=False),
            nn.BatchNorm2d(oup),
        ]
        self.conv = nn.Sequential(*layers)
        self.out_channels = oup

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    SETTING = (
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    )

    def __init__(self, num_classes: int = 1000, dropout: float = 0.2):
        super().__init__()
        cin, last = make_divisible(32), make_divisible(1280)
        features = [Conv2dNormActivation(3, cin, stride=2)]
        for t, c, n, s in self.SETTING:
            cout = make_divisible(c)
            for i in range(n):
                features.append(InvertedResidual(cin, cout, s if i == 0 else 1, expand_ratio=t))
                cin = cout
        features.append(Conv2dNormActivation(cin, last, kernel_size=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout), nn.Linear(last, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


def resnet50() -> tuple:
    torch.manual_seed(SEED)
    model = ResNet(Bottleneck, [3, 4, 6, 3])
    return calibrate_batch_norm(model, (2, 3, 224, 224)), image((1, 3, 224, 224))


def resnet18_small(size: int = 32, width: int = 64) -> tuple:
    torch.manual_seed(SEED)
    model = ResNet(BasicBlock, [2, 2, 2, 2], num_classes=10, width=width)
    return calibrate_batch_norm(model, (4, 3, size, size)), image((1, 3, size, size))


def mobilenet_v2() -> tuple:
    torch.manual_seed(SEED)
    return calibrate_batch_norm(MobileNetV2(), (2, 3, 224, 224)), image((1, 3, 224, 224))


# --- transformers -------------------------------------------------------------------------------
def bert(seq: int = 128, **sizes) -> tuple:
    """BERT (batch 1): inputs are token ids and an attention mask of ones."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(SEED)
    config = BertConfig(attn_implementation=ATTENTION, **sizes)
    model = LastHiddenState(BertModel(config)).eval()
    ids = token_ids(config.vocab_size, seq)
    return model, (ids, torch.ones_like(ids))


def gpt2(seq: int = 128, **sizes) -> tuple:
    """GPT-2 (batch 1): a prefill of `seq` tokens, no key/value cache kept."""
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(SEED)
    config = GPT2Config(attn_implementation=ATTENTION, use_cache=False, **sizes)
    model = LastHiddenState(GPT2Model(config)).eval()
    return model, (token_ids(config.vocab_size, seq),)


TINY_BERT = dict(
    hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=256, vocab_size=1000
)  # fmt: skip
TINY_GPT2 = dict(n_embd=64, n_layer=2, n_head=2, n_positions=64, vocab_size=1000, bos_token_id=999, eos_token_id=999)

MODELS = {
    spec.name: spec
    for spec in (
        ModelSpec("resnet50", "ResNet-50, 1x3x224x224", resnet50),
        ModelSpec("mobilenet_v2", "MobileNet-V2, 1x3x224x224", mobilenet_v2),
        ModelSpec("bert-base", "BERT-base, batch 1, sequence 128", bert, needs="transformers"),
        ModelSpec("gpt2", "GPT-2 small, batch 1, 128-token prefill", gpt2, needs="transformers"),
        ModelSpec("resnet18-small", "ResNet-18, 1x3x32x32, 10 classes", resnet18_small, full=False),
        ModelSpec(
            "tiny-bert",
            "BERT, 2 layers, hidden 64, 2 heads, sequence 16",
            lambda: bert(seq=16, **TINY_BERT),
            full=False,
            needs="transformers",
        ),
        ModelSpec(
            "tiny-gpt2",
            "GPT-2, 2 layers, hidden 64, 2 heads, 16 tokens",
            lambda: gpt2(seq=16, **TINY_GPT2),
            full=False,
            needs="transformers",
        ),
    )
}

# real-size members of six more families (issue 53): run when named (`--workloads vit-b16,...`),
# not by default: together they take about 20 minutes (Inductor's compiles and the 0.5B decoder)
for _name, (_description, _factory) in zoo_realsize.REALSIZE.items():
    MODELS[_name] = ModelSpec(_name, _description, _factory, default=False, needs="transformers")
REALSIZE = list(zoo_realsize.REALSIZE)

# the zoo of issue 44: small configurations of the architectures users bring (benchmarks/zoo_hf.py,
# benchmarks/zoo_nn.py); tests/frontend/test_zoo.py compiles each, docs/models.md keeps their table
for _table, _needs in ((zoo_hf.ZOO, "transformers"), (zoo_nn.ZOO, None)):
    for _name, (_description, _factory) in _table.items():
        MODELS[_name] = ModelSpec(_name, _description, _factory, full=False, needs=_needs)
ZOO = [*zoo_hf.ZOO, *zoo_nn.ZOO]
DEFAULT_MODELS = [name for name, spec in MODELS.items() if spec.full and spec.default]


def select(names) -> list:
    """The specs named (the default models when none are); KeyError listing the known names."""
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        raise KeyError(f"unknown model(s) {', '.join(map(repr, unknown))}; available: {', '.join(MODELS)}")
    return [MODELS[n] for n in names or DEFAULT_MODELS]
