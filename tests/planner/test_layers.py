"""Layers read one by one (``planner.layers``): hybrids' attention layers alone keep a KV cache, and a layer
structure the planner does not understand is refused, naming the model type and the key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from planner import InvalidInput, shape_from_config
from planner.quantconfig import original_quant

CORPUS = Path(__file__).resolve().parent / "corpus"


def corpus_config(name: str) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((CORPUS / name / "config.json").read_text())
    return config


def test_hybrid_keeps_state_not_kv_in_its_other_layers() -> None:
    """Nemotron-H 56B: 54 Mamba-2 layers of (4 - 1) x (16384 + 2 x 8 x 256) convolution values and 256 x 64
    x 256 SSM values, 16 bits each; 10 of 118 layers cache KV."""
    shape = shape_from_config(corpus_config("nvidia--Nemotron-H-56B-Base-8K"))
    assert (shape.layers, shape.attention_layers) == (118, 10)
    assert shape.state_bytes_per_sequence == 54 * (3 * 20480 * 2 + 256 * 64 * 256 * 2)
    qwen = shape_from_config(corpus_config("Qwen--Qwen3.5-27B"))
    # 48 gated DeltaNet layers; the recurrent state in float32, as mamba_ssm_dtype says
    assert qwen.attention_layers == 16
    assert qwen.state_bytes_per_sequence == 48 * (3 * (2 * 2048 + 6144) * 2 + 48 * 128 * 128 * 4)


def test_a_plain_decoder_has_no_state() -> None:
    shape = shape_from_config(corpus_config("meta-llama--Meta-Llama-3.1-8B"))
    assert (shape.attention_layers, shape.state_bytes_per_sequence) == (32, 0)


def test_a_hybrid_without_its_pattern_is_refused() -> None:
    config = corpus_config("nvidia--Nemotron-H-56B-Base-8K")
    del config["hybrid_override_pattern"]
    with pytest.raises(InvalidInput, match=r"hybrid_override_pattern: model type 'nemotron_h': missing"):
        shape_from_config(config)


def test_nemotron_h_blocks_by_name() -> None:
    """NemotronHConfig of transformers v5 names each block in layers_block_type and counts the layers from
    it (NVIDIA-Nemotron-3.5-Lightning's and -3-Ultra's configs): Nemotron 3 Nano written so reads alike."""
    config = corpus_config("nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    names = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
    config["layers_block_type"] = [names[c] for c in config.pop("hybrid_override_pattern")]
    del config["num_hidden_layers"]
    assert shape_from_config(config) == shape_from_config(corpus_config("nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"))
    config["layers_block_type"][0] = "retnet"
    with pytest.raises(InvalidInput, match=r"layers_block_type: model type 'nemotron_h': block kinds"):
        shape_from_config(config)


def test_attn_type_list_of_softmax_attention_only_is_read() -> None:
    """MiniMax-M2's attn_type_list is 1 (softmax attention) on every layer; MiniMax-Text-01's 0s (lightning
    attention) are not read."""
    config = {"num_hidden_layers": 4, "num_attention_heads": 4, "hidden_size": 256, "vocab_size": 1000}
    shape = shape_from_config({**config, "model_type": "minimax_m2", "attn_type_list": [1, 1, 1, 1]})
    assert shape.attention_layers == 4
    with pytest.raises(InvalidInput, match=r"attn_type_list: model type 'minimax_m2'"):
        shape_from_config({**config, "model_type": "minimax_m2", "attn_type_list": [0, 1, 0, 1]})


def test_qwen3_next_without_layer_types_takes_every_fourth_layer() -> None:
    """Qwen3NextConfig's default full_attention_interval is 4."""
    config = {
        "model_type": "qwen3_next",
        "num_hidden_layers": 48,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "hidden_size": 2048,
        "vocab_size": 151936,
    }
    shape = shape_from_config(config)
    assert shape.attention_layers == 12
    assert shape.kv_bytes_per_token == 12 * 2 * 2 * 256 * 2


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ({"model_type": "zamba2", "layers_block_type": ["mamba", "hybrid", "mamba", "mamba"]}, "layers_block_type"),
        ({"model_type": "jamba", "attn_layer_period": 0}, "attn_layer_period"),
        ({"model_type": "mystery", "attn_layer_period": 8}, "attn_layer_period"),
        ({"model_type": "mystery", "hybrid_override_pattern": "M*M*"}, "hybrid_override_pattern"),
        ({"model_type": "mystery", "attn_type_list": [0, 1, 0, 1]}, "attn_type_list"),
        ({"model_type": "mystery", "full_attention_interval": 2}, "full_attention_interval"),
        ({"model_type": "mystery", "layer_types": ["mamba", "attention", "mamba", "attention"]}, "layer_types"),
        ({"model_type": "lfm2", "layer_types": ["conv", "full_attention", "retention", "conv"]}, "layer_types"),
        ({"model_type": "granitemoehybrid"}, "layer_types"),
        ({"model_type": "granitemoehybrid", "layer_types": ["mamba", "attention", "conv", "mamba"]}, "layer_types"),
        ({"model_type": "bamba"}, "attn_layer_indices"),
        ({"model_type": "bamba", "attn_layer_indices": [1, 9]}, "attn_layer_indices"),
        ({"model_type": "mystery", "attn_layer_indices": [1]}, "attn_layer_indices"),
        ({"model_type": "kimi_linear", "linear_attn_config": {"num_heads": 4}}, "linear_attn_config.kda_layers"),
        ({"model_type": "kimi_linear", "linear_attn_config": {"kda_layers": [0, 1]}}, "linear_attn_config.kda_layers"),
        ({"model_type": "mamba"}, "model_type"),
        ({"model_type": "qwen3_next", "layer_types": ["full_attention", "retention"] * 2}, "layer_types"),
        ({"model_type": "nemotron_h", "hybrid_override_pattern": "M*MX"}, "hybrid_override_pattern"),
        ({"model_type": "nemotron-nas"}, "block_configs"),
    ],
)
def test_a_layer_structure_not_understood_is_refused(extra: dict[str, Any], key: str) -> None:
    config = {"num_hidden_layers": 4, "num_attention_heads": 4, "hidden_size": 256, "vocab_size": 1000, **extra}
    with pytest.raises(InvalidInput, match=rf"{key}: model type '{extra['model_type']}'"):
        shape_from_config(config)


def test_gemma_layer_types_stay_attention() -> None:
    shape = shape_from_config(corpus_config("google--gemma-3-27b-it"))
    assert shape.attention_layers == 62 and shape.state_bytes_per_sequence == 0


@pytest.mark.parametrize("kinds", [[{"a": 1}, "mamba"], "mamba", [["linear_attention"]] * 4, 7])
def test_layer_types_not_names_are_refused(kinds: Any) -> None:
    config = {"model_type": "qwen3_next", "num_hidden_layers": 4, "num_attention_heads": 4, "hidden_size": 256}
    with pytest.raises(InvalidInput, match=r"layer_types: model type 'qwen3_next'"):
        shape_from_config({**config, "vocab_size": 1000, "layer_types": kinds})


def test_llm_config_nests_the_language_model_and_its_quantisation() -> None:
    """InternVL's InternVLChatConfig keeps its language model under llm_config."""
    config = {
        "model_type": "internvl_chat",
        "llm_config": {
            "model_type": "qwen2",
            "num_hidden_layers": 28,
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
            "hidden_size": 3584,
            "intermediate_size": 18944,
            "vocab_size": 151674,
            "torch_dtype": "bfloat16",
            "quantization_config": {"quant_method": "awq", "bits": 4},
        },
    }
    shape = shape_from_config(config)
    assert shape.kv_bytes_per_token == 2 * 28 * 4 * 128 * 2
    assert original_quant(config) == "awq-int4"


def test_internvl3_1b() -> None:
    """InternVL3-1B's InternVLChatConfig as transformers prints it: Qwen2 of 24 layers under llm_config (the
    top level's hidden_size is a copy), InternViT of 24 layers of 1024; published: 0.9B. The projector
    (mlp1, 4096 -> 896 -> 896) is counted as LLaVA's (1024 -> 896 -> 896), 3M under."""
    config = {
        "model_type": "internvl_chat",
        "hidden_size": 896,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "llm_config": {
            "model_type": "qwen2",
            "hidden_size": 896,
            "intermediate_size": 4864,
            "num_attention_heads": 14,
            "num_hidden_layers": 24,
            "num_key_value_heads": 2,
            "max_position_embeddings": 32768,
            "vocab_size": 151674,
            "layer_types": ["full_attention"] * 24,
            "torch_dtype": "bfloat16",
        },
        "vision_config": {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "patch_size": 14},
    }
    hand = (
        151674 * 896 * 2
        + 24 * (896 * 14 * 64 * 2 + 896 * 2 * 64 * 2 + 3 * 896 * 4864)
        + 24 * (4 * 1024 * 1024 + 2 * 1024 * 4096)
        + 4096 * 896
        + 896 * 896
    )
    shape = shape_from_config(config)
    assert shape.params == pytest.approx(hand, rel=0.02)
    assert shape.kv_bytes_per_token == 24 * 2 * 2 * 64 * 2


def test_starcoder2_mlp_is_not_gated() -> None:
    """A config of StarCoder2-15B's published shape (hidden 6144, 40 layers, 48 heads, 4 KV heads, MLP 24576,
    vocabulary 49152): Starcoder2MLP's c_fc and c_proj, 2 x hidden x intermediate a layer; published 16B."""
    config = {
        "model_type": "starcoder2",
        "hidden_size": 6144,
        "intermediate_size": 24576,
        "num_hidden_layers": 40,
        "num_attention_heads": 48,
        "num_key_value_heads": 4,
        "vocab_size": 49152,
        "tie_word_embeddings": False,
        "max_position_embeddings": 16384,
    }
    hand = 49152 * 6144 * 2 + 40 * (6144 * 48 * 128 * 2 + 6144 * 4 * 128 * 2 + 2 * 6144 * 24576)
    assert shape_from_config(config).params == pytest.approx(hand, rel=0.01)


def test_jamba_reads_its_periods() -> None:
    """AI21-Jamba-1.5-Mini's published config.json fields: attention on layers 4, 12, 20, 28 (i % 8 == 4), 16
    experts on the odd layers (i % 2 == 1), Mamba of inner width 2 x 4096, state 16, step rank 256;
    published: 52B total."""
    config = {
        "model_type": "jamba",
        "attn_layer_offset": 4,
        "attn_layer_period": 8,
        "expert_layer_offset": 1,
        "expert_layer_period": 2,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "mamba_d_conv": 4,
        "mamba_d_state": 16,
        "mamba_dt_rank": 256,
        "mamba_expand": 2,
        "max_position_embeddings": 262144,
        "num_attention_heads": 32,
        "num_experts": 16,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "tie_word_embeddings": False,
        "vocab_size": 65536,
    }
    mamba = 4096 * 2 * 8192 + 8192 * 4 + 8192 * (256 + 32) + 256 * 8192 + 8192 * 16 + 8192 * 4096
    hand = (
        65536 * 4096 * 2
        + 4 * (4096 * 32 * 128 * 2 + 4096 * 8 * 128 * 2)
        + 28 * mamba
        + 16 * (16 * 3 * 4096 * 14336 + 4096 * 16)
        + 16 * 3 * 4096 * 14336
    )
    shape = shape_from_config(config)
    assert shape.params == pytest.approx(hand, rel=0.02)
    assert shape.kv_bytes_per_token == 4 * 2 * 8 * 128 * 2
    assert shape.state_bytes_per_sequence == 28 * (3 * 8192 * 2 + 8192 * 16 * 2)


def test_qwen3_next_80b() -> None:
    """Qwen3-Next-80B-A3B's published shape: 48 layers, every fourth gated attention (16 heads, 2 KV heads
    of 256), the rest gated DeltaNet (16 key heads, 32 value heads of 128); 512 experts of 512 and a
    shared one of 512 on every layer; published: 80B total."""
    config = {
        "model_type": "qwen3_next",
        "hidden_size": 2048,
        "num_hidden_layers": 48,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "full_attention_interval": 4,
        "num_experts": 512,
        "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "vocab_size": 151936,
        "tie_word_embeddings": False,
    }
    hand = (
        151936 * 2048 * 2
        + 12 * (2048 * 16 * 256 * 3 + 2048 * 2 * 256 * 2)
        + 36 * (2048 * (2 * 2048 + 2 * 4096 + 2 * 32) + 8192 * 4 + 4096 * 2048)
        + 48 * (512 * 3 * 2048 * 512 + 2048 * 512 + 3 * 2048 * 512)
    )
    shape = shape_from_config(config)
    assert shape.params == pytest.approx(hand, rel=0.02)
    assert shape.kv_bytes_per_token == 12 * 2 * 2 * 256 * 2
    assert shape.state_bytes_per_sequence == 36 * (3 * 8192 * 2 + 32 * 128 * 128 * 2)


GRANITE_LAYERS = ["mamba"] * 5 + ["attention"] + (["mamba"] * 9 + ["attention"]) * 3 + ["mamba"] * 4
"""Granite 4.0-H's 40 layers: 4 attention, 36 Mamba-2 (the positions do not change the count)."""


def test_granite_4_h_micro() -> None:
    """Granite-4.0-H-Micro's config fields (hidden 2048, 32 heads, 8 KV heads, Mamba-2 of 64 heads of 64,
    state 128, one group; no experts, a shared MLP of 8192 on every layer; tied embeddings of 100352);
    published: 3B."""
    config = {
        "model_type": "granitemoehybrid",
        "num_hidden_layers": 40,
        "hidden_size": 2048,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "mamba_n_heads": 64,
        "mamba_d_head": 64,
        "mamba_d_state": 128,
        "mamba_n_groups": 1,
        "mamba_d_conv": 4,
        "mamba_expand": 2,
        "num_local_experts": 0,
        "intermediate_size": 8192,
        "shared_intermediate_size": 8192,
        "layer_types": GRANITE_LAYERS,
        "vocab_size": 100352,
        "tie_word_embeddings": True,
    }
    hand = (
        100352 * 2048
        + 36 * (2048 * (4096 + 4096 + 256 + 64) + 4352 * 4 + 4096 * 2048)
        + 4 * (2048 * 32 * 64 * 2 + 2048 * 8 * 64 * 2)
        + 40 * 3 * 2048 * 8192
    )
    shape = shape_from_config(config)
    assert shape.params == pytest.approx(hand, rel=0.02)
    assert shape.kv_bytes_per_token == 4 * 2 * 8 * 64 * 2
    assert shape.state_bytes_per_sequence == 36 * (3 * 4352 * 2 + 64 * 64 * 128 * 2)


def test_granite_4_h_small() -> None:
    """Granite-4.0-H-Small's config fields (hidden 4096, 72 experts of 768 and a shared MLP of 1536 on every
    layer, Mamba-2 state 128; heads, head width and groups left to GraniteMoeHybridConfig: 128, 8192 / 128,
    1); published: 32B total."""
    config = {
        "model_type": "granitemoehybrid",
        "hidden_size": 4096,
        "num_hidden_layers": 40,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_local_experts": 72,
        "shared_intermediate_size": 1536,
        "intermediate_size": 768,
        "mamba_d_state": 128,
        "mamba_d_conv": 4,
        "mamba_expand": 2,
        "tie_word_embeddings": True,
        "vocab_size": 100352,
        "layer_types": GRANITE_LAYERS,
    }
    hand = (
        100352 * 4096
        + 36 * (4096 * (8192 + 8448 + 128) + 8448 * 4 + 8192 * 4096)
        + 4 * (4096 * 32 * 128 * 2 + 4096 * 8 * 128 * 2)
        + 40 * (72 * 3 * 4096 * 768 + 4096 * 72 + 3 * 4096 * 1536)
    )
    shape = shape_from_config(config)
    assert shape.params == pytest.approx(hand, rel=0.02)
    assert shape.kv_bytes_per_token == 4 * 2 * 8 * 128 * 2


def test_bamba_9b() -> None:
    """Bamba-9B's shape (ibm-ai-platform/Bamba-9B: attention on layers 9, 18 and 27 of 32, Mamba-2 of 128
    heads of 64, state 128, one group; a gated MLP of 14336 on every layer); published: 9.78B."""
    config = {
        "model_type": "bamba",
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 128256,
        "attn_layer_indices": [9, 18, 27],
        "mamba_n_heads": 128,
        "mamba_d_head": 64,
        "mamba_d_state": 128,
        "mamba_n_groups": 1,
        "mamba_d_conv": 4,
        "mamba_expand": 2,
        "tie_word_embeddings": False,
    }
    hand = (
        128256 * 4096 * 2
        + 29 * (4096 * (8192 + 8448 + 128) + 8448 * 4 + 8192 * 4096)
        + 3 * (4096 * 32 * 128 * 2 + 4096 * 8 * 128 * 2)
        + 32 * 3 * 4096 * 14336
    )
    shape = shape_from_config(config)
    assert shape.params == pytest.approx(hand, rel=0.02)
    assert shape.kv_bytes_per_token == 3 * 2 * 8 * 128 * 2
    assert shape.state_bytes_per_sequence == 29 * (3 * 8448 * 2 + 128 * 64 * 128 * 2)
