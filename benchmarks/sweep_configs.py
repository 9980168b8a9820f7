"""The sweep's architectures (issue 53): every model type that `transformers` registers for its
auto classes, each built small from its configuration class's own defaults, with random
weights and made-up inputs; nothing is downloaded.

    names = architectures()                   # model types, sorted
    arch = Architecture.of("bert")            # its model class and modality
    model, inputs = build(arch)               # seeded, eval mode; inputs: {name: tensor}

One architecture per model type: the base model (MODEL_MAPPING), or, for a type registered
only with a head, its causal-LM or image-classification model. Every configuration is shrunk
by the same table (SHRINK): 2 layers, hidden 64, 2 heads, intermediate 128, stages of one
block, 64x64 images, 1 s of audio; every other field keeps its default. Inputs are made from
the model's main input name, plus the inputs of a second modality (a multimodal encoder's
image) or a decoder's token ids where the forward takes them and eager accepts them.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

from minitc.benchmarks.zoo_common import SEED

SEQ = 16  # tokens
IMAGE = 64  # pixels a side
AUDIO_SAMPLES = 16000  # 1 s at 16 kHz
AUDIO_FRAMES = 100  # 1 s of 10 ms feature frames
TOKENS = 1000  # token ids are drawn below this (and below the vocabulary)

# configuration field -> its value in every sweep model (where the configuration has the field)
LAYERS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers")
LAYERS += ("num_encoder_layers", "num_decoder_layers")
HIDDEN = ("hidden_size", "d_model", "n_embd", "dim", "embed_dim", "word_embed_proj_dim")
HEADS = ("num_attention_heads", "n_head", "n_heads", "num_heads", "encoder_attention_heads")
HEADS += ("decoder_attention_heads",)
INTERMEDIATE = ("intermediate_size", "ffn_dim", "d_ff", "n_inner", "encoder_ffn_dim", "decoder_ffn_dim")
INTERMEDIATE += ("hidden_dim", "moe_intermediate_size")
SHRINK = {
    **dict.fromkeys(LAYERS, 2),
    **dict.fromkeys(HIDDEN, 64),
    **dict.fromkeys(HEADS, 2),
    **dict.fromkeys(INTERMEDIATE, 128),
    "image_size": IMAGE,
    "max_source_positions": AUDIO_FRAMES // 2,  # Whisper-style encoders: 2 frames a position
}
KV_HEADS = ("num_key_value_heads", "num_kv_heads")

# main input name -> modality; other main inputs (time series, video, ...) are out of the sweep
MODALITY = {"input_ids": "text", "pixel_values": "vision", "input_values": "audio", "input_features": "audio"}


def _mappings():
    from transformers.models.auto import modeling_auto as auto

    heads = (auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, auto.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES)
    return auto.MODEL_MAPPING_NAMES, heads


def architectures() -> list:
    """Every model type of transformers' base, causal-LM and image-classification auto classes."""
    base, heads = _mappings()
    return sorted(set(base).union(*heads))


class SweepError(Exception):
    """Why an architecture is not compiled, and at which stage: "config" (the configuration
    cannot be shrunk or the model built), "inputs" (eager runs on no inputs the sweep makes),
    "scope" (not text, vision or audio)."""

    def __init__(self, stage: str, message: str):
        super().__init__(message)
        self.stage = stage


@dataclass(frozen=True)
class Architecture:
    name: str  # the model type
    model_class: str  # transformers' class name

    @classmethod
    def of(cls, name: str) -> Architecture:
        base, heads = _mappings()
        for mapping in (base, *heads):
            if name in mapping:
                found = mapping[name]
                return cls(name, found[0] if isinstance(found, (list, tuple)) else found)
        raise KeyError(f"{name!r} is not a model type of transformers' auto classes")

    def model_type(self):
        import transformers

        try:
            return getattr(transformers, self.model_class)
        except Exception as e:  # a missing optional package (torchaudio, ...), or no such class
            raise SweepError("config", f"{self.model_class}: {type(e).__name__}: {_first_line(e)}") from None

    def main_input(self) -> str:
        """The model's main input name; the first where it names several (OneFormer's
        ["pixel_values", "task_inputs"]: the sweep makes the first, and eager says what else it needs)."""
        try:  # a class whose optional package is missing raises on any attribute
            name = getattr(self.model_type(), "main_input_name", "input_ids")
        except ImportError as e:
            raise SweepError("config", f"{self.model_class}: {type(e).__name__}: {_first_line(e)}") from None
        return name[0] if isinstance(name, (list, tuple)) else name


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0][:300] if lines else ""


def shrunk(values: dict, keep: tuple = ()) -> dict:
    """The fields of a configuration's `values` (its to_dict) that SHRINK changes, with their
    sweep values, less those named in `keep`; lists of per-stage sizes keep their length."""
    out = {k: v for k, v in SHRINK.items() if isinstance(values.get(k), int) and not isinstance(values[k], bool)}
    if isinstance(values.get("image_size"), (list, tuple)):
        out["image_size"] = [IMAGE, IMAGE]
    out = {k: v for k, v in out.items() if k not in keep}
    for key in KV_HEADS:  # grouped-query attention stays grouped
        heads = next((values[h] for h in HEADS if isinstance(values.get(h), int)), None)
        if isinstance(values.get(key), int) and heads:
            out[key] = 2 if values[key] >= heads else 1
    for key in HEADS:
        if _int_list(values.get(key)):
            out[key] = [2] * len(values[key])
    if _int_list(values.get("depths")):
        out["depths"] = [1] * len(values["depths"])
    if _int_list(values.get("hidden_sizes")):  # stage widths scaled to at most 64, multiples of 16
        widest = max(values["hidden_sizes"])
        out["hidden_sizes"] = [max(16, 16 * round(4 * h / widest)) for h in values["hidden_sizes"]]
    return out


def _int_list(x) -> bool:
    return isinstance(x, (list, tuple)) and len(x) > 0 and all(isinstance(i, int) for i in x)


def small_config(arch: Architecture, keep: tuple = ()) -> tuple:
    """(the configuration class's defaults shrunk by SHRINK but for the fields in `keep`, the
    sub-configurations (text, vision, audio) too; whether `keep` kept a field SHRINK changes)."""
    config_class = arch.model_type().config_class
    try:
        default = config_class()
        values = default.to_dict()
        kwargs, kept = shrunk(values, keep), any(k in shrunk(values) for k in keep)
        for key, value in values.items():
            sub = getattr(default, key, None)
            if isinstance(value, dict) and hasattr(sub, "to_dict"):  # a sub-configuration
                kwargs[key] = {**_without_per_layer(sub.to_dict()), **shrunk(sub.to_dict(), keep)}
                kept = kept or any(k in shrunk(sub.to_dict()) for k in keep)
        return config_class(**kwargs), kept
    except Exception as e:  # noqa: BLE001 - any failure of a configuration class is its row's reason
        raise SweepError("config", f"{config_class.__name__}: {type(e).__name__}: {_first_line(e)}") from None


def _without_per_layer(values: dict) -> dict:
    """`values` less its lists of one entry a layer (layer_types, ...): derived from the number
    of layers, they are derived again for the shrunk one."""
    layers = next((values[k] for k in LAYERS if isinstance(values.get(k), int)), None)
    return {k: v for k, v in values.items() if not (isinstance(v, list) and layers and len(v) == layers)}


def _find(config, key: str, default=None):
    """A field of the configuration or of its first sub-configuration that has it."""
    if getattr(config, key, None) is not None:
        return getattr(config, key)
    for sub in vars(config).values():
        if hasattr(sub, "to_dict") and getattr(sub, key, None) is not None:
            return getattr(sub, key)
    return default


def _generator(offset: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(SEED + offset)


def make_input(name: str, config, layout: int = 0):
    """A tensor for the input `name`, sized from `config`; `layout` picks among the shapes an
    input is given in (features: (1, bins, frames) or (1, frames, bins))."""
    if name in ("input_ids", "decoder_input_ids"):
        vocab = _find(config, "vocab_size", TOKENS)
        return torch.randint(0, min(vocab, TOKENS), (1, SEQ), generator=_generator())
    if name == "pixel_values":
        size = _find(config, "image_size", IMAGE)
        size = size if isinstance(size, (list, tuple)) else (size, size)
        return torch.randn(1, _find(config, "num_channels", 3), *size, generator=_generator(1))
    if name == "input_values":
        return torch.randn(1, AUDIO_SAMPLES, generator=_generator(2))
    if name == "input_features":
        bins = _find(config, "num_mel_bins") or _find(config, "feature_size") or _find(config, "input_feat_per_channel")
        bins = bins or 80
        shape = (1, bins, AUDIO_FRAMES) if layout == 0 else (1, AUDIO_FRAMES, bins)
        return torch.randn(*shape, generator=_generator(3))
    raise SweepError("scope", f"main input {name!r} is not text, vision or audio")


EXTRA = ("pixel_values", "decoder_input_ids")  # taken where the forward has them and eager accepts them


def input_choices(main: str, model) -> list:
    """The input sets to try in eager, in order: the main input with every EXTRA input the
    forward takes, with the decoder's ids only, alone; each (names, layout)."""
    if main not in MODALITY:
        raise SweepError("scope", f"main input {main!r} is not text, vision or audio")
    params = inspect.signature(model.forward).parameters
    extra = [n for n in EXTRA if n in params and n != main]
    sets = [[main, *extra], [main, *[n for n in extra if n == "decoder_input_ids"]], [main]]
    sets = [s for i, s in enumerate(sets) if s not in sets[:i]]
    layouts = (0, 1) if main == "input_features" else (0,)
    return [(names, layout) for names in sets for layout in layouts]


def build(arch: Architecture) -> tuple:
    """(model in eval mode, {input name: tensor}, what was not shrunk or ""): the first input
    set of input_choices that eager runs, at 64x64 images, else at the configuration's own
    image size (Swin's 7x7 windows need 224). SweepError where none runs."""
    main = arch.main_input()
    if main not in MODALITY:
        raise SweepError("scope", f"main input {main!r} is not text, vision or audio")
    first_error = None
    for keep in ((), ("image_size",)):
        config, kept = small_config(arch, keep)
        if keep and not kept:
            break
        torch.manual_seed(SEED)
        try:
            model = arch.model_type()(config).eval()
        except Exception as e:  # noqa: BLE001
            raise SweepError("config", f"building {arch.model_class}: {type(e).__name__}: {_first_line(e)}") from None
        for names, layout in input_choices(main, model):
            inputs = {n: make_input(n, config, layout) for n in names}
            try:
                with torch.no_grad():
                    model(**inputs)
                return model, inputs, ", ".join(f"default {k}" for k in keep)
            except Exception as e:  # noqa: BLE001 - the next input set may suit it
                first_error = first_error or f"{type(e).__name__}: {_first_line(e)}"
    raise SweepError("inputs", f"eager {arch.model_class} on {main}: {first_error}")
