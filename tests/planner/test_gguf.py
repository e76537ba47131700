"""A folder of GGUF files with no config.json: the shape from the first file's header."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from planner import InvalidInput, repository_from_folder
from planner.gguf import GgufHeader, read_header, shape_from_gguf

LLAMA_8B = {
    "general.architecture": "llama",
    "llama.block_count": 32,
    "llama.attention.head_count": 32,
    "llama.attention.head_count_kv": 8,
    "llama.embedding_length": 4096,
    "llama.context_length": 8192,
}


def gguf_string(s: str) -> bytes:
    raw = s.encode()
    return struct.pack("<Q", len(raw)) + raw


def gguf_value(v: Any) -> bytes:
    if isinstance(v, str):
        return struct.pack("<I", 8) + gguf_string(v)
    if isinstance(v, list):
        return struct.pack("<IIQ", 9, 8, len(v)) + b"".join(gguf_string(x) for x in v)
    return struct.pack("<II", 4, v)


def write_gguf(path: Path, metadata: dict[str, Any], tensors: list[tuple[str, list[int]]], pad: int = 64) -> None:
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    for key, value in metadata.items():
        out += gguf_string(key) + gguf_value(value)
    for name, dims in tensors:
        out += gguf_string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", 12, 0)
    path.write_bytes(out + bytes(pad))


def test_the_shape_and_parameters_from_a_gguf_header(tmp_path: Path) -> None:
    vocab = [f"tok{i}" for i in range(5000)]  # a long array, skipped by length
    tensors = [("token_embd.weight", [4096, 1000]), ("blk.0.attn_q.weight", [4096, 4096]), ("norm", [4096])]
    write_gguf(tmp_path / "m-Q4_K_M.gguf", {**LLAMA_8B, "tokenizer.ggml.tokens": vocab}, tensors)
    write_gguf(tmp_path / "m-Q8_0.gguf", LLAMA_8B, tensors, pad=4096)
    header = read_header(tmp_path / "m-Q4_K_M.gguf")
    assert header.metadata["tokenizer.ggml.tokens"] == 5000
    repo = repository_from_folder(tmp_path)
    assert [a.name for a in repo.artifacts] == ["m-Q4_K_M.gguf", "m-Q8_0.gguf"]
    # 2 x 32 layers x 8 KV heads x 128 head_dim x 2 bytes: Llama-3-8B's 131,072 bytes a token
    assert (repo.shape.kv_bytes_per_token, repo.shape.kv_heads, repo.shape.max_context) == (131_072, 8, 8192)
    assert repo.shape.params == 4096 * 1000 + 4096 * 4096 + 4096


def test_a_split_gguf_counts_every_part(tmp_path: Path) -> None:
    write_gguf(tmp_path / "big-Q8_0-00001-of-00002.gguf", LLAMA_8B, [("a", [10, 10])])
    write_gguf(tmp_path / "big-Q8_0-00002-of-00002.gguf", LLAMA_8B, [("b", [5])])
    assert repository_from_folder(tmp_path).shape.params == 105


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"GGUF" + struct.pack("<I", 1), "GGUF version 1"),
        (b"GGUF" + struct.pack("<IQ", 3, 1), "ends inside its GGUF header"),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1 << 40), "declares 1099511627776 metadata entries"),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gguf_string("k") + struct.pack("<I", 99), "unknown type 99"),
    ],
)
def test_a_broken_header_is_refused(tmp_path: Path, data: bytes, message: str) -> None:
    (tmp_path / "m-Q4_K_M.gguf").write_bytes(data)
    with pytest.raises(InvalidInput, match=message):
        repository_from_folder(tmp_path)


def test_a_header_without_the_shape_names_the_key(tmp_path: Path) -> None:
    write_gguf(tmp_path / "m-Q4_K_M.gguf", {"general.architecture": "llama"}, [])
    with pytest.raises(InvalidInput, match=r"llama.block_count: must be a whole number"):
        repository_from_folder(tmp_path)


def test_a_projector_by_its_header_is_not_an_artifact(tmp_path: Path) -> None:
    # named like a model, but its header says it is llama.cpp's clip projector
    write_gguf(tmp_path / "vision-f16.gguf", {"general.architecture": "clip"}, [("v.patch_embd.weight", [14, 14])])
    write_gguf(tmp_path / "m-Q4_K_M.gguf", LLAMA_8B, [("a", [10])])
    repo = repository_from_folder(tmp_path)
    assert [a.name for a in repo.artifacts] == ["m-Q4_K_M.gguf"]
    assert repo.shape.kv_bytes_per_token == 131_072


def gemma3n_gguf(**extra: Any) -> GgufHeader:
    """Gemma 3n E2B's GGUF metadata as llama.cpp's converter writes it: a window, shared KV layers."""
    meta = {
        "general.architecture": "gemma3n",
        "gemma3n.block_count": 30,
        "gemma3n.embedding_length": 2048,
        "gemma3n.attention.head_count": 8,
        "gemma3n.attention.head_count_kv": 2,
        "gemma3n.attention.key_length": 256,
        "gemma3n.attention.value_length": 256,
        "gemma3n.attention.sliding_window": 512,
        "gemma3n.attention.shared_kv_layers": 10,
        "gemma3n.context_length": 32768,
    }
    return GgufHeader({**meta, **extra}, 5_000_000_000)


def test_a_gguf_sliding_window_and_shared_layers_come_from_its_metadata() -> None:
    shape = shape_from_gguf(gemma3n_gguf(), "m.gguf")
    per_layer = 2 * 2 * 256 * 2
    # llama.cpp's set_swa_pattern(5) for gemma3n: layers 4, 9, 14 and 19 full among the 20 with a cache
    assert shape.kv_bytes_per_token == 20 * per_layer
    assert shape.windows == ((512, 16 * per_layer),)
    # a pattern in the metadata wins over the architecture's, a layer each
    pattern = [i % 2 == 0 for i in range(30)]
    shape = shape_from_gguf(gemma3n_gguf(**{"gemma3n.attention.sliding_window_pattern": pattern}), "m.gguf")
    assert shape.windows == ((512, 10 * per_layer),)


def test_a_gguf_with_kv_heads_a_layer_each_counts_each() -> None:
    heads = [2] * 20 + [0] * 10  # no KV heads on the last ten
    shape = shape_from_gguf(gemma3n_gguf(**{"gemma3n.attention.head_count_kv": heads}), "m.gguf")
    assert shape.kv_heads == 2
    assert shape.kv_bytes_per_token == 20 * 2 * 2 * 256 * 2
