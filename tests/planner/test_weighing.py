"""Where the weights correct the config: exact parameters, the bits that follow, and the KV layers."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from planner import InvalidInput, repository_from_folder, repository_from_listing
from planner.constants import KV_BYTES_PER_ELEMENT
from tests.planner.test_repository import EXAMPLES, LLAMA_3_8B_PARAMS, load
from tests.planner.test_weights import header, llama

TINY = EXAMPLES / "tiny-llama-safetensors"


def write_safetensors(path: Path, head: dict[str, Any]) -> None:
    """A safetensors file of the header and zeros for the data."""
    raw = json.dumps(head).encode()
    end = max((t["data_offsets"][1] for k, t in head.items() if k != "__metadata__"), default=0)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(end))


def hybrid_config(layers: int = 8) -> dict[str, Any]:
    """A config the planner reads as a Llama: every layer would cache keys and values."""
    return {
        "model_type": "llama",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": layers,
        "intermediate_size": 128,
        "vocab_size": 1024,
        "torch_dtype": "bfloat16",
    }


def hybrid(layers: int = 8) -> dict[str, Any]:
    """Attention in layers 3 and 7 (2 KV heads of 16), Mamba mixers in the others."""
    t: dict[str, tuple[str, list[int]]] = {"model.embed_tokens.weight": ("BF16", [1024, 64])}
    for i in range(layers):
        p = f"model.layers.{i}."
        if i % 4 == 3:
            t |= {p + f"self_attn.{x}_proj.weight": ("BF16", [32 if x in "kv" else 64, 64]) for x in "qkvo"}
        else:
            t |= {p + "mamba.in_proj.weight": ("BF16", [256, 64]), p + "mamba.A_log": ("F32", [128, 16])}
    return header(t)


def test_the_tiny_folder_counts_its_header_and_agrees_with_its_config() -> None:
    repo = repository_from_folder(TINY)
    assert repo.shape.params == 205_120
    assert repo.shape.kv_bytes_per_token == 2 * 2 * 2 * 16 * KV_BYTES_PER_ELEMENT
    assert repo.notes == ()
    assert repo.artifacts[-1].quant == "bf16"


def test_a_hybrid_folder_caches_only_its_attention_layers(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(hybrid_config()))
    write_safetensors(tmp_path / "model.safetensors", hybrid())
    repo = repository_from_folder(tmp_path)
    shape, notes = repo.shape, repo.notes
    # two layers of 2 KV heads x 16, keys and values, not the config's eight
    assert shape.kv_bytes_per_token == 2 * 64 * KV_BYTES_PER_ELEMENT
    # and the count: six of the config's eight dense layers are Mamba mixers in the weights
    assert len(notes) == 2
    assert "2 of 8 layers hold key/value projections" in notes[0]
    assert "the config's arithmetic gave 1,024" in notes[0]
    assert "the config's shapes count 427,072 (213% of them)" in notes[1]
    assert shape.params == sum(n for n in _elements(hybrid()).values())


def _elements(head: dict[str, Any]) -> dict[str, int]:
    out = {}
    for name, t in head.items():
        if name != "__metadata__":
            n = 1
            for d in t["shape"]:
                n *= d
            out[name] = n
    return out


def test_headers_on_a_listing_read_as_the_folder_does(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(hybrid_config()))
    write_safetensors(tmp_path / "model.safetensors", hybrid())
    folder = repository_from_folder(tmp_path)
    files = [{"path": "model.safetensors", "size": (tmp_path / "model.safetensors").stat().st_size}]
    listed = repository_from_listing(files, hybrid_config(), headers={"model.safetensors": hybrid()})
    assert listed == folder


def test_without_headers_the_config_arithmetic_stands() -> None:
    files = [{"path": "model.safetensors", "size": 900_000}]  # the config's 427,072 parameters at 16 bits
    assert repository_from_listing(files, hybrid_config()).shape.kv_bytes_per_token == 8 * 64 * KV_BYTES_PER_ELEMENT


def fp8_at_half(with_index: bool) -> tuple[Any, Any, Any]:
    files, config, index = load("llama-3.1-8b-instruct")
    half = [{**f, "size": f["size"] // 2} if f["path"].endswith(".safetensors") else f for f in files]
    index = {"metadata": {"total_size": index["metadata"]["total_size"] // 2}} if with_index else None
    return half, config, index


@pytest.mark.parametrize("with_index", [True, False])
def test_an_fp8_original_at_half_the_bytes_is_read_at_eight_bits(with_index: bool) -> None:
    files, config, index = fp8_at_half(with_index)
    repo = repository_from_listing(files, config, index)
    # the index's total over 2 bytes would halve the parameters, and bits per weight would read 16
    assert repo.shape.params == LLAMA_3_8B_PARAMS
    bits = repo.artifacts[-1].weights_bytes * 8 / repo.shape.params
    assert 7.9 < bits < 8.1
    assert len(repo.notes) == 1 and "8.0 bits a weight, not the 16" in repo.notes[0]


def test_the_16_bit_originals_take_no_note() -> None:
    for model in ("llama-3.1-8b-instruct", "llama-3.1-70b-instruct", "qwen2.5-7b-instruct"):
        files, config, index = load(model)
        assert repository_from_listing(files, config, index).notes == ()


def test_fp8_headers_name_the_quant_and_count_exactly() -> None:
    head = llama(vocab=128)
    for name, t in head.items():
        if name.endswith("_proj.weight"):
            t["dtype"] = "F8_E4M3"
    files = [{"path": "model.safetensors", "size": 300_000}]
    repo = repository_from_listing(files, {**hybrid_config(2), "vocab_size": 128}, headers=head)
    assert repo.artifacts[-1].quant == "fp8"
    # each layer's 7 projections (36,864) and 2 norms, the final norm, embeddings and head
    assert repo.shape.params == 2 * (36_864 + 128) + 64 + 2 * 128 * 64
    assert repo.notes == ()


def test_bad_headers_on_a_listing_get_one_line() -> None:
    files = [{"path": "model.safetensors", "size": 300_000}]
    with pytest.raises(InvalidInput, match="not a list of sizes") as e:
        repository_from_listing(files, hybrid_config(2), headers={"x": {"dtype": "BF16", "shape": "4"}})
    assert "\n" not in str(e.value)


def test_a_folder_header_past_the_limit_is_refused(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(hybrid_config(2)))
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", 200 << 20) + b"{}")
    with pytest.raises(InvalidInput, match="past the format's limit") as e:
        repository_from_folder(tmp_path)
    assert "\n" not in str(e.value)


def test_an_unknown_model_type_whose_index_shows_non_attention_layers_is_not_planned_as_a_dense_decoder() -> None:
    """A model type the reader has no rule for, whose config reads as a plain decoder, and whose index names
    key/value projections in half its layers (the others a Mamba mixer): the names win, and it says so."""
    config = {
        "model_type": "mystery",
        "architectures": ["MysteryForCausalLM"],
        "hidden_size": 1024,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "intermediate_size": 4096,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
        "torch_dtype": "bfloat16",
    }
    shard = "model-00001-of-00001.safetensors"
    weight_map = {}
    for i in range(4):
        parts = ("q_proj", "k_proj", "v_proj", "o_proj") if i % 2 == 0 else ("in_proj", "A_log", "conv1d", "out_proj")
        where = "self_attn" if i % 2 == 0 else "mixer"
        weight_map.update({f"model.layers.{i}.{where}.{p}.weight": shard for p in parts})
    # the config's 132,644,864 parameters at 16 bits
    index = {"metadata": {"total_size": 265_289_728}, "weight_map": weight_map}
    files = [{"path": "config.json", "size": 500}, {"path": shard, "size": 265_289_728}]
    dense = repository_from_listing(files, config)
    read = repository_from_listing([*files, {"path": "model.safetensors.index.json", "size": 1000}], config, index)
    assert dense.shape.kv_bytes_per_token == 4 * 2 * 8 * 128 * 2
    assert read.shape.kv_bytes_per_token == 2 * 2 * 8 * 128 * 2
    assert read.shape.attention_layers == 2
    assert any("2 of 4 layers hold key/value projections" in n for n in read.notes)
