"""The zoo's `transformers` models (issue 44): small configurations, random weights, nothing
downloaded; each is built from its configuration class (never `from_pretrained`).

    model, inputs = MODELS["zoo-llama"].make()   # benchmarks/models_zoo.py lists them

Every model returns its last hidden state, one tensor, with PyTorch's SDPA attention where the
architecture has it. Vision models take one 1x3xSxS image, text models token ids of batch 1
and sequence 16 (with an attention mask of ones where the model takes one), Whisper's encoder
a 1x16x32 log-mel spectrogram. The sizes are the smallest that keep each architecture's
structure: two layers or stages, hidden sizes 16-64, grouped-query attention in the LLaMA-style
decoder (4 query heads sharing 2 key/value heads).
"""

from __future__ import annotations

import torch

from minitc.benchmarks.zoo_common import ATTENTION, SEED, LastHiddenState, calibrate_batch_norm, image, token_ids

SEQ = 16
VOCAB = 1000


def _built(config_cls: str, model_cls: str, inputs, attention: bool = True, part=None, **config):
    """`model_cls(config_cls(**config))` seeded, in eval mode, returning its last hidden state;
    `part` picks a submodule (Whisper's encoder)."""
    import transformers

    torch.manual_seed(SEED)
    if attention:
        config["attn_implementation"] = ATTENTION
    model = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**config))
    if part is not None:
        model = part(model)
    model = LastHiddenState(model)
    if any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules()):  # statistics of a random batch
        calibrate_batch_norm(model, (4, *inputs[0].shape[1:]))
    return model.eval(), inputs


def _image(size: int) -> tuple:
    return image((1, 3, size, size))


def _text(mask: bool = True) -> tuple:
    ids = token_ids(VOCAB, SEQ)
    return (ids, torch.ones_like(ids)) if mask else (ids,)


ENCODER = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)
VIT = dict(ENCODER, image_size=32, patch_size=8)


def resnet():
    sizes = dict(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic")
    return _built("ResNetConfig", "ResNetModel", _image(32), attention=False, **sizes)


def resnet_bottleneck():
    sizes = dict(embedding_size=16, hidden_sizes=[32, 64], depths=[1, 1], layer_type="bottleneck")
    return _built("ResNetConfig", "ResNetModel", _image(32), attention=False, **sizes)


def convnext():
    sizes = dict(num_stages=2, hidden_sizes=[16, 32], depths=[1, 1], image_size=32)
    return _built("ConvNextConfig", "ConvNextModel", _image(32), attention=False, **sizes)


def regnet():
    """RegNet-Y: grouped 3x3 convolutions (groups of 8 channels) and squeeze-excitation."""
    sizes = dict(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], groups_width=8, layer_type="y")
    return _built("RegNetConfig", "RegNetModel", _image(32), attention=False, **sizes)


def mobilevit():
    sizes = dict(
        image_size=64,
        patch_size=2,
        hidden_sizes=[32, 40, 48],
        neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64],
        num_attention_heads=2,
        mlp_ratio=2.0,
    )
    return _built("MobileViTConfig", "MobileViTModel", _image(64), attention=False, **sizes)


def swin():
    sizes = dict(image_size=32, patch_size=2, embed_dim=16, depths=[2, 1], num_heads=[1, 2], window_size=4)
    return _built("SwinConfig", "SwinModel", _image(32), **sizes)


def deit():
    return _built("DeiTConfig", "DeiTModel", _image(32), **VIT)


def beit():
    return _built("BeitConfig", "BeitModel", _image(32), use_relative_position_bias=True, **VIT)


def clip_vision():
    return _built("CLIPVisionConfig", "CLIPVisionModel", _image(32), **VIT)


def distilbert():
    sizes = dict(dim=64, n_layers=2, n_heads=2, hidden_dim=128, vocab_size=VOCAB)
    return _built("DistilBertConfig", "DistilBertModel", _text(), **sizes)


def roberta():
    return _built("RobertaConfig", "RobertaModel", _text(), vocab_size=VOCAB, **ENCODER)


def albert():
    return _built("AlbertConfig", "AlbertModel", _text(), vocab_size=VOCAB, embedding_size=32, **ENCODER)


def electra():
    return _built("ElectraConfig", "ElectraModel", _text(), vocab_size=VOCAB, embedding_size=32, **ENCODER)


def gpt_neo():
    """Alternating global and local (window 8) causal attention."""
    sizes = dict(hidden_size=64, num_layers=2, num_heads=2, attention_types=[[["global", "local"], 1]], window_size=8)
    sizes.update(bos_token_id=0, eos_token_id=0)
    return _built("GPTNeoConfig", "GPTNeoModel", _text(mask=False), False, vocab_size=VOCAB, use_cache=False, **sizes)


def opt():
    sizes = dict(hidden_size=64, ffn_dim=128, num_hidden_layers=2, num_attention_heads=2, word_embed_proj_dim=64)
    return _built("OPTConfig", "OPTModel", _text(), vocab_size=VOCAB, use_cache=False, **sizes)


def llama():
    """LLaMA/Mistral-style: RMSNorm, rotary embeddings, SiLU-gated MLP, 4 query heads on 2
    key/value heads."""
    sizes = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
    sizes.update(num_key_value_heads=2, max_position_embeddings=64)
    return _built("LlamaConfig", "LlamaModel", _text(mask=False), vocab_size=VOCAB, use_cache=False, **sizes)


def t5_encoder():
    sizes = dict(d_model=64, d_ff=128, d_kv=32, num_layers=2, num_heads=2, vocab_size=VOCAB)
    return _built("T5Config", "T5EncoderModel", _text(mask=False), use_cache=False, **sizes)


def whisper_encoder():
    """The encoder of Whisper: two 1-D convolutions over a log-mel spectrogram, then attention."""
    sizes = dict(d_model=64, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2)
    sizes.update(encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=16, max_source_positions=16)
    features = torch.randn(1, 16, 32, generator=torch.Generator().manual_seed(0))
    return _built("WhisperConfig", "WhisperModel", (features,), part=lambda m: m.get_encoder(), **sizes)


# name: (description, factory)
ZOO = {
    "zoo-resnet": ("transformers ResNet (basic blocks), 2 stages, 1x3x32x32", resnet),
    "zoo-resnet-bottleneck": ("transformers ResNet (bottleneck blocks), 2 stages, 1x3x32x32", resnet_bottleneck),
    "zoo-convnext": ("ConvNeXt, 2 stages, 1x3x32x32", convnext),
    "zoo-regnet": ("RegNet-Y (grouped convolutions, squeeze-excitation), 1x3x32x32", regnet),
    "zoo-mobilevit": ("MobileViT, 1x3x64x64", mobilevit),
    "zoo-swin": ("Swin, window 4, 2 stages, 1x3x32x32", swin),
    "zoo-deit": ("DeiT, 2 layers, hidden 64, 1x3x32x32", deit),
    "zoo-beit": ("BEiT (relative position bias), 2 layers, hidden 64, 1x3x32x32", beit),
    "zoo-clip-vision": ("CLIP's vision tower, 2 layers, hidden 64, 1x3x32x32", clip_vision),
    "zoo-distilbert": ("DistilBERT, 2 layers, hidden 64, sequence 16", distilbert),
    "zoo-roberta": ("RoBERTa, 2 layers, hidden 64, sequence 16", roberta),
    "zoo-albert": ("ALBERT (shared layers, embeddings 32), hidden 64, sequence 16", albert),
    "zoo-electra": ("ELECTRA (embeddings 32), 2 layers, hidden 64, sequence 16", electra),
    "zoo-gpt-neo": ("GPT-Neo (global and local attention), 2 layers, hidden 64, 16 tokens", gpt_neo),
    "zoo-opt": ("OPT, 2 layers, hidden 64, 16 tokens", opt),
    "zoo-llama": ("LLaMA-style decoder (RMSNorm, rotary, SwiGLU, GQA 4/2), 2 layers, 16 tokens", llama),
    "zoo-t5-encoder": ("T5 encoder (relative position buckets), 2 layers, d_model 64, 16 tokens", t5_encoder),
    "zoo-whisper-encoder": ("Whisper's encoder (1-D convolutions), 2 layers, 1x16x32 features", whisper_encoder),
}
