"""Families read from what their configs say, as vLLM and llama.cpp build them: MLA keys a model does not
use, experts under ERNIE's keys, per-layer lists and shared KV layers, global layers of their own shape,
sliding windows, and the hybrids."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from planner import shape_from_config

CORPUS = Path(__file__).resolve().parent / "corpus"


def corpus_config(name: str) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((CORPUS / name / "config.json").read_text())
    return config


def test_mla_keys_a_model_does_not_use_are_ignored() -> None:
    # DeepSeek-OCR: use_mla false, kv_lora_rank null, v_head_dim and the qk head widths 0; plain attention of
    # 10 heads of 1280 / 10 on 12 layers
    shape = shape_from_config(corpus_config("deepseek-ai--DeepSeek-OCR"))
    assert not shape.mla
    assert shape.kv_bytes_per_token == 12 * 2 * 10 * 128 * 2
    assert shape.experts == 64


def test_use_mla_false_turns_mla_off_even_with_a_rank() -> None:
    config = {**corpus_config("deepseek-ai--DeepSeek-OCR")["language_config"], "kv_lora_rank": 512}
    config["qk_rope_head_dim"] = 64
    assert shape_from_config(config).kv_bytes_per_token == 12 * 2 * 10 * 128 * 2
    assert shape_from_config({**config, "use_mla": True}).kv_bytes_per_token == 12 * (512 + 64) * 2


ERNIE_45_21B = {
    # ERNIE-4.5-21B-A3B's shape keys (Ernie4_5_MoeConfig); experts under moe_num_experts
    "architectures": ["Ernie4_5_MoeForCausalLM"],
    "model_type": "ernie4_5_moe",
    "hidden_size": 2560,
    "intermediate_size": 12288,
    "moe_intermediate_size": 1536,
    "num_hidden_layers": 28,
    "num_attention_heads": 20,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "moe_num_experts": 64,
    "moe_num_shared_experts": 2,
    "moe_k": 6,
    "moe_layer_start_index": 1,
    "moe_layer_end_index": 27,
    "moe_layer_interval": 1,
    "vocab_size": 103424,
    "tie_word_embeddings": True,
}


def test_experts_under_ernies_keys_are_counted() -> None:
    shape = shape_from_config(ERNIE_45_21B)
    attention = 2560 * 20 * 128 * 2 + 2560 * 4 * 128 * 2
    expert_layer = 64 * 3 * 2560 * 1536 + 2560 * 64 + 2 * 3 * 2560 * 1536  # routed, router, 2 shared
    hand = 103424 * 2560 + 28 * attention + 3 * 2560 * 12288 + 27 * expert_layer
    assert abs(shape.params - hand) <= 0.001 * hand
    assert shape.experts == 64
    # layers past moe_layer_end_index, or off moe_layer_interval, are dense
    fewer = shape_from_config({**ERNIE_45_21B, "moe_layer_end_index": 13})
    assert abs(hand - fewer.params - 14 * (expert_layer - 3 * 2560 * 12288)) <= 0.001 * hand
