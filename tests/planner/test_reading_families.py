"""Families read from what their configs say, as vLLM and llama.cpp build them: MLA keys a model does not
use, experts under ERNIE's keys, per-layer lists and shared KV layers, global layers of their own shape,
sliding windows, and the hybrids."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from planner import InvalidInput, repository_from_listing, shape_from_config
from tests.planner.test_weights import header

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


def gemma3n_e2b() -> dict[str, Any]:
    """Gemma 3n E2B's language model as Gemma3nTextConfig and vLLM's gemma3n.py read it: 30 layers, every
    fifth full and the others sliding (window 512), the last 10 sharing the KV cache of earlier layers,
    ``intermediate_size`` a layer each, per-layer embeddings of 256 a layer, LAuReL of rank 64, AltUp of 4
    streams; the whole nested in a multimodal config with audio and vision towers."""
    text = {
        "model_type": "gemma3n_text",
        "hidden_size": 2048,
        "num_hidden_layers": 30,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "intermediate_size": [8192] * 30,
        "vocab_size": 262400,
        "vocab_size_per_layer_input": 262144,
        "hidden_size_per_layer_input": 256,
        "num_kv_shared_layers": 10,
        "laurel_rank": 64,
        "altup_num_inputs": 4,
        "sliding_window": 512,
        "layer_types": ["full_attention" if (i + 1) % 5 == 0 else "sliding_attention" for i in range(30)],
        "max_position_embeddings": 32768,
    }
    return {
        "architectures": ["Gemma3nForConditionalGeneration"],
        "model_type": "gemma3n",
        "text_config": text,
        "audio_config": {"model_type": "gemma3n_audio", "hidden_size": 1536},
        "vision_config": {"model_type": "gemma3n_vision", "architecture": "mobilenetv5_300m_enc"},
        "torch_dtype": "bfloat16",
    }


def test_shared_kv_layers_keep_no_cache_and_sliding_layers_keep_their_window() -> None:
    shape = shape_from_config(gemma3n_e2b())
    per_layer = 2 * 2 * 256 * 2  # 2 KV heads of 256, keys and values, 2 bytes
    # 20 layers own a cache (4 full, 16 sliding); the last 10 reuse layers 18 and 19's
    assert shape.kv_bytes_per_token == 20 * per_layer
    assert shape.windows == ((512, 16 * per_layer),)
    assert shape.attention_layers == 20


def test_per_layer_widths_and_per_layer_embeddings_are_counted() -> None:
    shape = shape_from_config(gemma3n_e2b())
    hidden, layers = 2048, 30
    attention = hidden * 8 * 256 * 2 + hidden * 2 * 256 * 2
    per_layer_inputs = 262144 * layers * 256 + hidden * layers * 256 + layers * 2 * hidden * 256
    laurel_altup = layers * 2 * hidden * 64 + 2 * 3 * hidden * hidden
    hand = 262400 * hidden + layers * (attention + 3 * hidden * 8192) + per_layer_inputs + laurel_altup
    assert abs(shape.params - hand) <= 0.001 * hand
    assert shape.mlp_width == 8192
    # a list of another length is refused in one line
    config = gemma3n_e2b()
    config["text_config"] = {**config["text_config"], "intermediate_size": [8192] * 29}
    with pytest.raises(InvalidInput, match=r"intermediate_size: .* one whole width for each of the 30 layers"):
        shape_from_config(config)


def gemma4_31b_text() -> dict[str, Any]:
    """A Gemma 4 language model as its configs read: full layers (every sixth) with their own KV heads
    (``num_global_key_value_heads``) and head width (``global_head_dim``), sliding ones of 1024 tokens."""
    return {
        "model_type": "gemma4_text",
        "num_hidden_layers": 60,
        "hidden_size": 5376,
        "intermediate_size": 21504,
        "num_attention_heads": 32,
        "num_key_value_heads": 16,
        "num_global_key_value_heads": 4,
        "head_dim": 256,
        "global_head_dim": 512,
        "sliding_window": 1024,
        "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 10,
        "vocab_size": 262144,
        "tie_word_embeddings": True,
        "max_position_embeddings": 262144,
    }


def test_global_layers_keep_their_own_kv_heads_and_head_width() -> None:
    shape = shape_from_config(gemma4_31b_text())
    sliding, full = 16 * 256 * 2 * 2, 4 * 512 * 2 * 2
    assert shape.kv_bytes_per_token == 50 * sliding + 10 * full
    assert shape.windows == ((1024, 50 * sliding),)
    hidden = 5376
    attention = 50 * (hidden * 32 * 256 * 2 + hidden * 16 * 256 * 2) + 10 * (
        hidden * 32 * 512 * 2 + hidden * 4 * 512 * 2
    )
    hand = 262144 * hidden + attention + 60 * 3 * hidden * 21504
    assert abs(shape.params - hand) <= 0.001 * hand


def test_sliding_layers_keep_their_window_in_any_family_that_lists_them() -> None:
    # a model type with no rule of its own whose layer_types mix sliding and full layers (OLMo 3's)
    config = {
        "model_type": "olmo3",
        "num_hidden_layers": 8,
        "hidden_size": 1024,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "sliding_window": 4096,
        "layer_types": (["sliding_attention"] * 3 + ["full_attention"]) * 2,
        "vocab_size": 1000,
    }
    per_layer = 8 * 128 * 2 * 2
    shape = shape_from_config(config)
    assert shape.kv_bytes_per_token == 8 * per_layer
    assert shape.windows == ((4096, 6 * per_layer),)
    # a window on every layer alike is no window: llama.cpp caches such layers whole
    every = {**config, "layer_types": ["sliding_attention"] * 8}
    assert shape_from_config(every).windows == ()


def test_mimo_sliding_layers_keep_their_window() -> None:
    shape = shape_from_config(corpus_config("XiaomiMiMo--MiMo-V2-Flash"))
    assert shape.windows and shape.windows[0][0] == 128


def test_headers_of_shared_layers_do_not_bring_their_cache_back() -> None:
    # every layer of a Gemma 3n holds k_proj and v_proj; the last 10 read an earlier layer's cache
    text = gemma3n_e2b()["text_config"]
    small = {**text, "hidden_size": 64, "vocab_size": 512, "vocab_size_per_layer_input": 512}
    small |= {"intermediate_size": [128] * 30, "hidden_size_per_layer_input": 8, "head_dim": 16}
    t: dict[str, tuple[str, list[int]]] = {"model.language_model.embed_tokens.weight": ("BF16", [512, 64])}
    for i in range(30):
        p = f"model.language_model.layers.{i}.self_attn."
        t |= {p + f"{x}_proj.weight": ("BF16", [32 if x in "kv" else 128, 64]) for x in "qkvo"}
    head = header(t)
    files = [
        {"path": "model.safetensors", "size": max(v["data_offsets"][1] for k, v in head.items() if k != "__metadata__")}
    ]
    config = {**gemma3n_e2b(), "text_config": small}
    repo = repository_from_listing(files, config, headers=head)
    assert repo.shape.kv_bytes_per_token == 20 * 2 * 2 * 16 * 2


def test_falcon_h1_keeps_attention_and_mamba_side_by_side_on_every_layer() -> None:
    shape = shape_from_config(corpus_config("tiiuae--Falcon-H1-0.5B-Base"))
    # every layer caches 2 KV heads of 64 and keeps a Mamba-2 state: a convolution over x, B and C
    # (1536 + 2 x 128) and 24 heads of 64 x 128
    assert shape.kv_bytes_per_token == 36 * 2 * 2 * 64 * 2
    assert shape.state_bytes_per_sequence == 36 * (3 * 1792 * 2 + 24 * 64 * 128 * 2)
    attention = 2 * 1024 * 8 * 64 + 2 * 1024 * 2 * 64
    mamba = 1024 * (2 * 1536 + 2 * 128 + 24) + 1792 * 4 + 1536 * 1024
    hand = 32784 * 1024 * 2 + 36 * (attention + mamba + 3 * 1024 * 2048)
    assert abs(shape.params - hand) <= 0.001 * hand


LFM2_350M = {
    # LFM2.5-350M's shape: 6 attention layers among 16, short convolutions in the others
    "architectures": ["Lfm2ForCausalLM"],
    "model_type": "lfm2",
    "hidden_size": 1024,
    "intermediate_size": 6656,
    "block_auto_adjust_ff_dim": True,
    "block_ffn_dim_multiplier": 1.0,
    "block_multiple_of": 256,
    "conv_L_cache": 3,
    "conv_dim": 1024,
    "num_hidden_layers": 16,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "vocab_size": 65536,
    "tie_embedding": True,
    "max_position_embeddings": 128000,
    "layer_types": ["full_attention" if i in (2, 5, 8, 10, 12, 14) else "conv" for i in range(16)],
}


def test_lfm2_caches_its_attention_layers_and_keeps_a_short_convolution_state() -> None:
    shape = shape_from_config(LFM2_350M)
    assert shape.kv_bytes_per_token == 6 * 2 * 8 * 64 * 2
    assert shape.state_bytes_per_sequence == 10 * 2 * 1024 * 2
    # the MLP's width adjusted as Lfm2MLP does: 2/3 of 6656, up to a multiple of 256: 4608
    assert shape.mlp_width == 4608
    attention = 2 * 1024 * 1024 + 2 * 1024 * 512
    conv = 1024 * 3 * 1024 + 1024 * 3 + 1024 * 1024
    hand = 65536 * 1024 + 6 * attention + 10 * conv + 16 * 3 * 1024 * 4608 + 33 * 1024  # tied; norms
    assert abs(shape.params - hand) <= 0.0001 * hand
    # older configs give full_attn_idxs alone
    older = {k: v for k, v in LFM2_350M.items() if k != "layer_types"} | {"full_attn_idxs": [2, 5, 8, 10, 12, 14]}
    assert shape_from_config(older).kv_bytes_per_token == shape.kv_bytes_per_token


def kimi_linear() -> dict[str, Any]:
    """A Kimi Linear of Kimi-Linear-48B-A3B's shape: Kimi Delta Attention on 20 of 27 layers (counted from
    1 in ``linear_attn_config``), MLA on the other 7; 256 experts of 1024 and a shared one from layer 1."""
    full = [4, 8, 12, 16, 20, 24, 27]
    return {
        "architectures": ["KimiLinearForCausalLM"],
        "model_type": "kimi_linear",
        "hidden_size": 2304,
        "num_hidden_layers": 27,
        "num_attention_heads": 32,
        "kv_lora_rank": 512,
        "q_lora_rank": None,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "mla_use_nope": True,
        "num_experts": 256,
        "num_experts_per_token": 8,
        "moe_intermediate_size": 1024,
        "num_shared_experts": 1,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "intermediate_size": 9216,
        "vocab_size": 163840,
        "linear_attn_config": {
            "full_attn_layers": full,
            "kda_layers": [i for i in range(1, 28) if i not in full],
            "head_dim": 128,
            "num_heads": 32,
            "short_conv_kernel_size": 4,
        },
    }


def test_kimi_linear_caches_its_mla_layers_and_keeps_delta_attention_state() -> None:
    flat = shape_from_config(kimi_linear())
    assert flat.mla and flat.attention_layers == 7
    assert flat.kv_bytes_per_token == 7 * (512 + 64) * 2
    # three short convolutions (q, k, v) in 16 bits, a 128 x 128 state a head in float32
    assert flat.state_bytes_per_sequence == 20 * (3 * 3 * 32 * 128 * 2 + 32 * 128 * 128 * 4)
    hidden, inner = 2304, 32 * 128
    mla = hidden * 32 * 192 + hidden * 576 + 512 * 32 * 256 + 32 * 128 * hidden
    kda = 4 * hidden * inner + 2 * (hidden * 128 + 128 * inner) + hidden * 32 + 3 * inner * 4
    experts = 256 * 3 * hidden * 1024 + hidden * 256 + 3 * hidden * 1024
    hand = 163840 * hidden * 2 + 7 * mla + 20 * kda + 3 * hidden * 9216 + 26 * experts
    assert abs(flat.params - hand) <= 0.001 * hand
    # the larger models nest it in a text_config
    nested = shape_from_config({"model_type": "kimi_k3", "text_config": kimi_linear(), "vision_config": {}})
    assert (nested.kv_bytes_per_token, nested.state_bytes_per_sequence) == (
        flat.kv_bytes_per_token,
        flat.state_bytes_per_sequence,
    )


def test_exaone4_letters_say_which_layers_slide() -> None:
    config = {
        "model_type": "exaone4",
        "num_hidden_layers": 8,
        "hidden_size": 512,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "sliding_window": 4096,
        "sliding_window_pattern": "LLLG",
        "vocab_size": 1000,
    }
    per_layer = 4 * 128 * 2 * 2
    assert shape_from_config(config).windows == ((4096, 6 * per_layer),)
