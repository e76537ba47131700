"""Rules of config reading that hold beyond the corpus repositories they were taught on: tied heads by the
config class's default, QWen v1's halved MLP, MiMo-V2-Flash's sliding layers, the DSA indexer's key
cache."""

from __future__ import annotations

import pytest

from planner import InvalidInput, shape_from_config
from tests.planner.test_layers import corpus_config


def test_a_tie_the_config_turns_off_counts_the_head() -> None:
    """GPT-BigCode ties by its config class's default; a config that says false has a head of its own."""
    config = corpus_config("bigcode--gpt_bigcode-santacoder")
    tied = shape_from_config(config).params
    untied = shape_from_config({**config, "tie_word_embeddings": False}).params
    assert untied - tied == 49280 * 2048


def test_qwen_v1_counts_its_mlp_at_half_intermediate_size() -> None:
    config = corpus_config("Qwen--Qwen-7B")
    as_qwen = shape_from_config(config).params
    as_llama = shape_from_config({**config, "model_type": "llama"}).params
    assert as_llama - as_qwen == 32 * 3 * 4096 * 11008


def test_mimo_sliding_layers_keep_their_own_kv_heads() -> None:
    config = corpus_config("XiaomiMiMo--MiMo-V2-Flash")
    shape = shape_from_config(config)
    assert (shape.kv_heads, shape.attention_layers) == (4, 48)
    same = shape_from_config({**config, "swa_num_key_value_heads": 4})
    assert shape.kv_bytes_per_token - same.kv_bytes_per_token == 39 * 4 * (192 + 128) * 2


@pytest.mark.parametrize("key", ["swa_head_dim", "swa_v_head_dim", "swa_num_attention_heads"])
def test_mimo_sliding_sizes_the_planner_does_not_count_are_refused(key: str) -> None:
    config = {**corpus_config("XiaomiMiMo--MiMo-V2-Flash"), key: 96}
    with pytest.raises(InvalidInput, match=rf"{key}: model type 'mimo_v2_flash': 96 differs"):
        shape_from_config(config)


def test_mimo_pattern_of_the_wrong_length_is_refused() -> None:
    config = corpus_config("XiaomiMiMo--MiMo-V2-Flash")
    config["hybrid_layer_pattern"] = config["hybrid_layer_pattern"][:-1]
    with pytest.raises(InvalidInput, match=r"hybrid_layer_pattern: model type 'mimo_v2_flash': must list"):
        shape_from_config(config)


def test_the_indexer_key_cache_comes_with_index_topk() -> None:
    """DeepSeek-V3.2 without its indexer is DeepSeek-V3's MLA latent alone; with it, 132 bytes a layer."""
    config = corpus_config("deepseek-ai--DeepSeek-V3.2")
    without = {k: v for k, v in config.items() if k != "index_topk"}
    assert shape_from_config(without).kv_bytes_per_token == 61 * (512 + 64) * 2
    assert shape_from_config(config).kv_bytes_per_token == 61 * ((512 + 64) * 2 + 128 + 4)
