"""From file listings, configs and folders to artifacts and shapes."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

import pytest

from planner import Artifact, InvalidInput, repository_from_folder, repository_from_listing, shape_from_config
from planner.repository import artifacts_from_listing, parse_listing

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "models"
LLAMA_3_8B_PARAMS = 128256 * 4096 * 2 + 32 * (4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336) + 65 * 4096
"""Embeddings and output head, then each layer's attention (q, o; k, v of 8 heads), MLP and two norms, and the
final norm: 8,030,261,248, the published count."""


def load(model: str) -> tuple[Any, Any, Any]:
    d = EXAMPLES / model
    index = d / "model.safetensors.index.json"
    return (
        json.loads((d / "files.json").read_text()),
        json.loads((d / "config.json").read_text()),
        json.loads(index.read_text()) if index.exists() else None,
    )


def arts(listing: list[dict[str, Any]]) -> list[Artifact]:
    return artifacts_from_listing(parse_listing(listing))


# --- listings -------------------------------------------------------------------------------------------


def test_each_gguf_file_is_an_artifact_with_its_quant() -> None:
    got = arts(
        [
            {"path": "b/model-Q8_0.gguf", "size": 8},
            {"path": "model.Q4_K_M.gguf", "size": 4},
            {"path": "README.md", "size": 10},
        ]
    )
    assert got == [
        Artifact("b/model-Q8_0.gguf", "gguf", 8, quant="Q8_0"),
        Artifact("model.Q4_K_M.gguf", "gguf", 4, quant="Q4_K_M"),
    ]


def test_split_gguf_parts_are_one_artifact() -> None:
    listing = [{"path": f"Q8_0/big-Q8_0-0000{i}-of-00003.gguf", "size": 10 * i} for i in (3, 1, 2)]
    listing += [
        {"path": "big-Q4_K_M-00001-of-00002.gguf", "size": 5},
        {"path": "big-Q4_K_M-00002-of-00002.gguf", "size": 6},
    ]
    assert arts(listing) == [
        Artifact("Q8_0/big-Q8_0", "gguf", 60, shards=3, quant="Q8_0"),
        Artifact("big-Q4_K_M", "gguf", 11, shards=2, quant="Q4_K_M"),
    ]


def test_a_split_with_a_missing_part_is_refused() -> None:
    with pytest.raises(InvalidInput, match=r"split GGUF 'big-Q8_0' lacks part\(s\) 2 of 3"):
        arts([{"path": "big-Q8_0-00001-of-00003.gguf", "size": 1}, {"path": "big-Q8_0-00003-of-00003.gguf", "size": 1}])


def test_projectors_and_non_weights_are_not_artifacts() -> None:
    got = arts(
        [
            {"path": "mmproj-model-f16.gguf", "size": 600},
            {"path": "MMPROJ-x.gguf", "size": 1},
            {"path": "m-Q4_0.gguf", "size": 4},
            {"path": "imatrix.dat", "size": 9},
            {"path": "config.json", "size": 1},
        ]
    )
    assert [a.name for a in got] == ["m-Q4_0.gguf"]


def test_root_safetensors_are_one_original_artifact() -> None:
    listing = [{"path": f"model-0000{i}-of-00002.safetensors", "size": 100 + i} for i in (1, 2)]
    listing += [
        {"path": "original/consolidated.00.pth", "size": 999},
        {"path": "original/model.safetensors", "size": 999},
        {"path": "vae/diffusion.safetensors", "size": 999},
    ]
    assert arts(listing) == [Artifact("original", "safetensors", 203, shards=2, quant="bf16")]
    assert arts([{"path": "model.safetensors", "size": 7}]) == [Artifact("original", "safetensors", 7, quant="bf16")]


def test_consolidated_beside_hf_shards_is_left_out() -> None:
    listing = [
        {"path": "consolidated.safetensors", "size": 500},
        {"path": "model-00001-of-00001.safetensors", "size": 499},
    ]
    assert arts(listing) == [Artifact("original", "safetensors", 499, quant="bf16")]
    assert arts(listing[:1])[0].bytes == 500


def test_gguf_and_safetensors_together() -> None:
    got = arts([{"path": "model.safetensors", "size": 16}, {"path": "m-Q4_K_M.gguf", "size": 5}])
    assert [(a.name, a.format) for a in got] == [("m-Q4_K_M.gguf", "gguf"), ("original", "safetensors")]


def test_the_hubs_tree_listing_is_taken_as_it_comes() -> None:
    got = arts(
        [
            {"type": "directory", "oid": "x", "path": "Q8_0", "size": 0},
            {"type": "file", "oid": "y", "size": 42, "path": "m-Q8_0.gguf", "lfs": {"size": 42, "oid": "z"}},
        ]
    )
    assert got == [Artifact("m-Q8_0.gguf", "gguf", 42, quant="Q8_0")]


@pytest.mark.parametrize(
    ("listing", "message"),
    [
        ({"path": "x"}, r"files: \(file\): expected a JSON list"),
        ([{"size": 1}], r"files\[0\]: path: missing"),
        ([{"path": "m.gguf", "size": -5}], r"files\[0\]: size: .*at least 0.*-5"),
        ([{"path": "m.gguf", "size": "big"}], r"files\[0\]: size: must be a whole number.*'big'"),
        ([{"path": "m.gguf", "size": 2**60}], r"files\[0\]: size: .*must be at most"),
        ([{"path": "m.gguf", "size": 0}], r"files: size: 'm.gguf' is a weights file of 0 bytes"),
        ([{"path": "../m.gguf", "size": 1}], r"files\[0\]: path: '../m.gguf' is not a relative path"),
        ([{"path": "a.gguf", "size": 1}, {"path": "a.gguf", "size": 1}], r"files\[1\]: path: 'a.gguf' appears twice"),
        ([{"path": "README.md", "size": 1}], r"no weights"),
        ([], r"no weights"),
        ([{"path": "model-00001-of-00002.safetensors", "size": 1}], r"lack part\(s\) 2 of 2"),
    ],
)
def test_a_bad_listing_gets_one_clear_error(listing: Any, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        artifacts_from_listing(parse_listing(listing))


# --- configs --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "kv_per_token", "kv_heads", "params", "max_context"),
    [
        ("llama-3.1-8b-instruct", 131_072, 8, 16_060_522_496 // 2, 131072),
        ("qwen2.5-7b-instruct", 57_344, 4, 15_231_233_024 // 2, 32768),
        ("llama-3.1-70b-instruct", 327_680, 8, 141_107_412_992 // 2, 131072),
        # no index: counted from the config's shapes
        ("llama-3-8b-gguf", 131_072, 8, LLAMA_3_8B_PARAMS, 8192),
    ],
)
def test_reference_models(model: str, kv_per_token: int, kv_heads: int, params: int, max_context: int) -> None:
    repo = repository_from_listing(*load(model))
    assert repo.shape.kv_bytes_per_token == kv_per_token
    assert (repo.shape.kv_heads, repo.shape.params, repo.shape.max_context) == (kv_heads, params, max_context)


def test_config_defaults() -> None:
    # no num_key_value_heads: as many as the heads; no head_dim: hidden / heads
    shape = shape_from_config({"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64})
    assert (shape.kv_bytes_per_token, shape.kv_heads, shape.max_context) == (2 * 2 * 4 * 16 * 2, 4, 0)
    # an explicit head_dim wins over hidden / heads (Gemma, Qwen3)
    shape = shape_from_config(
        {
            "num_hidden_layers": 2,
            "num_attention_heads": 8,
            "num_key_value_heads": 2,
            "hidden_size": 64,
            "head_dim": 256,
            "num_key_value_heads_extra": None,
        }
    )
    assert shape.kv_bytes_per_token == 2 * 2 * 2 * 256 * 2


def test_multimodal_configs_nest_the_language_model() -> None:
    config = {
        "architectures": ["LlavaForConditionalGeneration"],
        "vision_config": {"num_hidden_layers": 24},
        "text_config": {
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "hidden_size": 4096,
            "max_position_embeddings": 32768,
        },
    }
    shape = shape_from_config(config)
    assert (shape.kv_bytes_per_token, shape.kv_heads, shape.max_context) == (131_072, 8, 32768)


def test_mla_caches_one_latent_per_layer() -> None:
    deepseek_v3 = {
        "num_hidden_layers": 61,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "hidden_size": 7168,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
    }
    assert shape_from_config(deepseek_v3).kv_bytes_per_token == 61 * (512 + 64) * 2


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ([1, 2], r"config.json: \(file\): expected a JSON object, got list"),
        ({"num_attention_heads": 8, "hidden_size": 64}, r"config.json: num_hidden_layers: missing"),
        ({"num_hidden_layers": 2, "num_attention_heads": 0, "hidden_size": 64}, r"num_attention_heads: .*given 0"),
        (
            {"num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 0, "hidden_size": 64},
            r"num_key_value_heads: .*given 0",
        ),
        ({"num_hidden_layers": "32", "num_attention_heads": 8, "hidden_size": 64}, r"num_hidden_layers: .*given '32'"),
        ({"num_hidden_layers": 2, "num_attention_heads": 8}, r"hidden_size: missing"),
        ({"num_hidden_layers": 2, "num_attention_heads": 3, "hidden_size": 64}, r"hidden_size: 64 does not divide"),
        ({"num_hidden_layers": 2**40, "num_attention_heads": 8, "hidden_size": 64}, r"num_hidden_layers: .*from 1 to"),
        ({"text_config": {"num_hidden_layers": 2}}, r"config.json \(text_config\): num_attention_heads: missing"),
    ],
)
def test_a_bad_config_gets_one_clear_error(config: Any, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        shape_from_config(config)


def test_quantised_originals_have_no_params_from_the_index() -> None:
    # the index's total is bytes of mixed widths: the count comes from the config's shapes instead
    files, config, index = load("llama-3.1-8b-instruct")
    config = {**config, "quantization_config": {"quant_method": "awq", "bits": 4}}
    repo = repository_from_listing(files, config, index)
    assert repo.shape.params == LLAMA_3_8B_PARAMS
    assert repo.artifacts[-1].quant == "awq-int4"


# --- folders --------------------------------------------------------------------------------------------


def write_safetensors(path: Path, shapes: dict[str, list[int]], pad: int = 0) -> None:
    """A safetensors file of BF16 tensors of ``shapes``, their zeros, and ``pad`` bytes more."""
    header: dict[str, Any] = {}
    end = 0
    for name, s in shapes.items():
        size = 2 * math.prod(s)
        header[name] = {"dtype": "BF16", "shape": s, "data_offsets": [end, end + size]}
        end += size
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * (end + pad))


CONFIG = {
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "hidden_size": 64,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 4096,
}


def test_a_folder_is_a_repository(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    write_safetensors(tmp_path / "model-00001-of-00002.safetensors", {"a": [64, 64], "b": [64]}, pad=100)
    write_safetensors(tmp_path / "model-00002-of-00002.safetensors", {"c": [10, 10, 10]})
    (tmp_path / "gguf").mkdir()
    (tmp_path / "gguf" / "m-Q4_K_M.gguf").write_bytes(b"GGUF" + b"\0" * 60)
    (tmp_path / ".cache").mkdir()
    (tmp_path / ".cache" / "x-Q8_0.gguf").write_bytes(b"GGUF")
    blob = tmp_path.parent / f"{tmp_path.name}-blob"
    blob.write_bytes(b"\1" * 1000)
    (tmp_path / "linked-Q8_0.gguf").symlink_to(blob)  # the Hub's cache keeps files as links to blobs
    repo = repository_from_folder(tmp_path)
    sizes = {p.name: p.stat().st_size for p in tmp_path.glob("model-*")}
    assert [(a.name, a.bytes, a.shards) for a in repo.artifacts] == [
        ("gguf/m-Q4_K_M.gguf", 64, 0),
        ("linked-Q8_0.gguf", 1000, 0),
        ("original", sum(sizes.values()), 2),
    ]
    assert repo.shape.params == 64 * 64 + 64 + 1000
    assert repo.shape.kv_bytes_per_token == 2 * 2 * 2 * 16 * 2


def test_a_folder_without_config_is_refused(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"x")
    with pytest.raises(InvalidInput, match=r"config.json: \(file\): missing"):
        repository_from_folder(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    (tmp_path / "m-Q4_K_M.gguf").write_bytes(b"x")
    with pytest.raises(InvalidInput, match=r"m-Q4_K_M.gguf: \(header\): not a GGUF file"):
        repository_from_folder(tmp_path)
    with pytest.raises(InvalidInput, match="not a folder"):
        repository_from_folder(tmp_path / "nope")


def test_a_broken_safetensors_header_is_refused(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    with pytest.raises(InvalidInput, match="past the format's limit"):
        repository_from_folder(tmp_path)
