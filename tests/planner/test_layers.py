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
        ({"model_type": "jamba", "attn_layer_period": 8, "attn_layer_offset": 4}, "attn_layer_period"),
        ({"model_type": "mystery", "attn_layer_period": 8}, "attn_layer_period"),
        ({"model_type": "mystery", "hybrid_override_pattern": "M*M*"}, "hybrid_override_pattern"),
        ({"model_type": "mystery", "attn_type_list": [0, 1, 0, 1]}, "attn_type_list"),
        ({"model_type": "mystery", "full_attention_interval": 2}, "full_attention_interval"),
        ({"model_type": "mystery", "layer_types": ["mamba", "attention", "mamba", "attention"]}, "layer_types"),
        ({"model_type": "lfm2", "layer_types": ["conv", "full_attention", "conv", "conv"]}, "layer_types"),
        ({"model_type": "granitemoehybrid"}, "layer_types"),
        ({"model_type": "bamba"}, "attn_layer_indices"),
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
