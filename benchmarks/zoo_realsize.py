"""The models suite's real-size members of six more families (issue 53, item 3), built from
`transformers` configurations with random weights: nothing is downloaded.

    model, inputs = MODELS["vit-b16"].make()   # benchmarks/models_zoo.py lists them

- `vit-b16`: ViT-B/16 (`ViTConfig()`'s defaults), one 224x224 image, no pooler;
- `swin-t`: Swin-T (`SwinConfig()`'s defaults: windows of 7, shifted every other block), 224x224;
- `convnext-t`: ConvNeXt-T (`ConvNextConfig()`'s defaults: 7x7 depthwise convolutions,
  channel-last layer norms), 224x224;
- `efficientnet-b0`: EfficientNet-B0 (width and depth coefficients 1.0, 224x224; the config's
  defaults are B7's), its batch norms calibrated on a random batch;
- `whisper-base-encoder`: the encoder of Whisper-base (d_model 512, 6 layers, 8 heads) on 30 s
  of 80-bin log-mel features (1x80x3000; 1500 positions after the strided convolution). Whisper
  rather than wav2vec2: it is the speech model people run on CPUs (whisper.cpp,
  faster-whisper), and its encoder always sees a 30 s window, so this is the deployed size;
- `qwen2-0.5b`: a Qwen2-0.5B-shaped decoder (hidden 896, 24 layers, 14 query heads on 2
  key/value heads, SwiGLU 4864, vocabulary 151936, rotary base 1e6; about 494M parameters),
  a 128-token prefill without a key/value cache.

Each factory takes keyword overrides of its configuration (and the input's size), so the tests
build the same structure shrunk (tests/benchmarks/test_models_realsize.py). They return the
last hidden state, one tensor, with PyTorch's SDPA attention.
"""

from __future__ import annotations

import torch

from minitc.benchmarks.zoo_common import ATTENTION, SEED, LastHiddenState, calibrate_batch_norm, image, token_ids


def _built(config_cls: str, model_cls: str, inputs, attention: bool = True, part=None, model_kwargs=None, **config):
    """`model_cls(config_cls(**config))` seeded, in eval mode, returning its last hidden state."""
    import transformers

    torch.manual_seed(SEED)
    if attention:
        config["attn_implementation"] = ATTENTION
    model = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**config), **(model_kwargs or {}))
    if part is not None:
        model = part(model)
    model = LastHiddenState(model)
    if any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules()):  # statistics of a random batch
        calibrate_batch_norm(model, (2, *inputs[0].shape[1:]))
    return model.eval(), inputs


def vit(image_size: int = 224, **config):
    inputs = image((1, 3, image_size, image_size))
    return _built("ViTConfig", "ViTModel", inputs, model_kwargs={"add_pooling_layer": False},
                  image_size=image_size, **config)  # fmt: skip


def swin(image_size: int = 224, **config):
    return _built("SwinConfig", "SwinModel", image((1, 3, image_size, image_size)), image_size=image_size, **config)


def convnext(image_size: int = 224, **config):
    inputs = image((1, 3, image_size, image_size))
    return _built("ConvNextConfig", "ConvNextModel", inputs, attention=False, image_size=image_size, **config)


B0 = dict(width_coefficient=1.0, depth_coefficient=1.0, hidden_dim=1280, dropout_rate=0.2)


def efficientnet(image_size: int = 224, **config):
    inputs = image((1, 3, image_size, image_size))
    sizes = {**B0, **config}
    return _built("EfficientNetConfig", "EfficientNetModel", inputs, attention=False, image_size=image_size, **sizes)


WHISPER_BASE = dict(d_model=512, encoder_layers=6, encoder_attention_heads=8, encoder_ffn_dim=2048)
WHISPER_BASE.update(decoder_layers=6, decoder_attention_heads=8, decoder_ffn_dim=2048, num_mel_bins=80)


def whisper_encoder(frames: int = 3000, **config):
    """Whisper's encoder on `frames` log-mel frames (3000: 30 s at a 10 ms hop)."""
    sizes = {**WHISPER_BASE, "max_source_positions": frames // 2, **config}
    features = torch.randn(1, sizes["num_mel_bins"], frames, generator=torch.Generator().manual_seed(SEED))
    return _built("WhisperConfig", "WhisperModel", (features,), part=lambda m: m.get_encoder(), **sizes)


QWEN2_05B = dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2)
QWEN2_05B.update(intermediate_size=4864, vocab_size=151936, max_position_embeddings=32768, tie_word_embeddings=True)
QWEN2_05B.update(rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})


def qwen2(seq: int = 128, **config):
    """A Qwen2-0.5B-shaped decoder: a prefill of `seq` tokens, no key/value cache kept."""
    sizes = {**QWEN2_05B, **config}
    return _built("Qwen2Config", "Qwen2Model", (token_ids(sizes["vocab_size"], seq),), use_cache=False, **sizes)


# name: (description, factory)
REALSIZE = {
    "vit-b16": ("ViT-B/16, 1x3x224x224", vit),
    "swin-t": ("Swin-T (shifted windows of 7), 1x3x224x224", swin),
    "convnext-t": ("ConvNeXt-T (7x7 depthwise, channel-last layer norms), 1x3x224x224", convnext),
    "efficientnet-b0": ("EfficientNet-B0, 1x3x224x224", efficientnet),
    "whisper-base-encoder": ("Whisper-base's encoder, 30 s of log-mel features (1x80x3000)", whisper_encoder),
    "qwen2-0.5b": ("Qwen2-0.5B-shaped decoder (GQA 14/2, 24 layers), batch 1, 128-token prefill", qwen2),
}

# the same structures shrunk (each family's layers, heads and kernel kinds kept), for the tests
SHRUNK = {
    "vit-b16": dict(image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=128),
    "swin-t": dict(image_size=56, embed_dim=16, depths=[2, 2], num_heads=[2, 2], window_size=7),
    "convnext-t": dict(image_size=32, hidden_sizes=[16, 32], depths=[2, 2], num_stages=2),
    # hidden_dim: the top convolution's channels, round_filters(1280) at width 0.25
    "efficientnet-b0": dict(image_size=32, width_coefficient=0.25, depth_coefficient=0.5, hidden_dim=320),
    "whisper-base-encoder": dict(frames=64, d_model=64, encoder_layers=2, encoder_attention_heads=2,
                                 encoder_ffn_dim=128, decoder_layers=1, num_mel_bins=16),
    "qwen2-0.5b": dict(seq=16, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       intermediate_size=128, vocab_size=1000, max_position_embeddings=64),
}  # fmt: skip
