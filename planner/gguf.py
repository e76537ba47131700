"""A GGUF file's header: the model's shape and parameter count, for a repository that ships GGUF files
and no ``config.json`` (most quantised repositories on the Hub are such).

The header is a magic, a version (2 or 3), counts of tensors and of metadata entries, the metadata (key,
type, value), then each tensor's name, dimensions, type and offset. Only the header is read, never the
weights; counts and lengths are bounded, so a broken or hostile file is refused, not followed.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from planner.constants import KV_BYTES_PER_ELEMENT
from planner.errors import InvalidInput
from planner.model import Shape

MAX_METADATA = 1 << 16
MAX_TENSORS = 1 << 20
MAX_ARRAY = 1 << 26
MAX_STRING = 1 << 24
"""Bounds past any real header (a 128k-token vocabulary is one array of 128k strings)."""

KEPT_ARRAY = 64
"""Arrays of strings longer than this (vocabularies, merges) are skipped, keeping only their length."""

KEPT_NUMBERS = 4096
"""Arrays of numbers up to this long are kept: per-layer values (``head_count_kv``,
``sliding_window_pattern``) a layer each, past any model's layer count."""

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True, slots=True)
class GgufHeader:
    metadata: Mapping[str, Any]
    params: int
    """Values in all the file's tensors: the model's parameter count (of this part, for a split file)."""


class _Reader:
    def __init__(self, f: BinaryIO, source: str) -> None:
        self.f, self.source = f, source

    def take(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        raw = self.f.read(size)
        if len(raw) < size:
            raise InvalidInput(self.source, "(header)", "ends inside its GGUF header")
        return struct.unpack(fmt, raw)[0]

    def count(self, bound: int, what: str) -> int:
        n = int(self.take("<Q"))
        if n > bound:
            raise InvalidInput(self.source, "(header)", f"declares {n} {what}, past {bound}")
        return n

    def string(self) -> str:
        raw = self.f.read(self.count(MAX_STRING, "bytes in a string"))
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InvalidInput(self.source, "(header)", f"a string is not UTF-8: {e.reason}") from e

    def value(self, kind: int) -> Any:
        if kind in _SCALARS:
            return self.take(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            inner = int(self.take("<I"))
            n = self.count(MAX_ARRAY, "array elements")
            if inner == _ARRAY:
                raise InvalidInput(self.source, "(header)", "holds an array of arrays")
            if n > (KEPT_ARRAY if inner == _STRING else KEPT_NUMBERS):
                self.skip(inner, n)
                return n
            return [self.value(inner) for _ in range(n)]
        raise InvalidInput(self.source, "(header)", f"holds a value of unknown type {kind}")

    def skip(self, kind: int, n: int) -> None:
        if kind in _SCALARS:
            self.f.seek(struct.calcsize(_SCALARS[kind]) * n, 1)
        elif kind == _STRING:
            for _ in range(n):
                self.f.seek(self.count(MAX_STRING, "bytes in a string"), 1)
        else:
            raise InvalidInput(self.source, "(header)", f"holds an array of unknown type {kind}")


def read_header(path: Path, *, metadata_only: bool = False) -> GgufHeader:
    """The metadata and parameter count of the GGUF file at ``path`` (with ``metadata_only``, the metadata
    alone: the parameter count is then 0)."""
    source = str(path)
    try:
        with path.open("rb") as f:
            r = _Reader(f, source)
            if f.read(4) != b"GGUF":
                raise InvalidInput(source, "(header)", "not a GGUF file (no GGUF magic)")
            version = int(r.take("<I"))
            if version not in (2, 3):
                raise InvalidInput(source, "(header)", f"GGUF version {version}; versions 2 and 3 are read")
            tensors = r.count(MAX_TENSORS, "tensors")
            entries = r.count(MAX_METADATA, "metadata entries")
            metadata: dict[str, Any] = {}
            for _ in range(entries):
                key = r.string()
                metadata[key] = r.value(int(r.take("<I")))
            params = 0
            for _ in range(0 if metadata_only else tensors):
                r.string()
                dims = int(r.take("<I"))
                if dims > 8:
                    raise InvalidInput(source, "(header)", f"a tensor of {dims} dimensions")
                params += math.prod(int(r.take("<Q")) for _ in range(dims))
                r.take("<I")
                r.take("<Q")
    except OSError as e:
        raise InvalidInput(source, "(file)", f"cannot be read: {e.strerror}") from e
    return GgufHeader(metadata, params)


def shape_from_gguf(header: GgufHeader, source: str) -> Shape:
    """A model's shape from its GGUF metadata (``{arch}.block_count``, ``.attention.head_count_kv`` and the
    rest), as ``shape_from_config`` reads it from a ``config.json``."""
    meta = header.metadata
    arch = meta.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise InvalidInput(source, "general.architecture", "missing")

    def whole(name: str, default: int | None = None) -> int:
        value = meta.get(f"{arch}.{name}")
        if value is None and default is not None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 1 << 24:
            raise InvalidInput(
                source, f"{arch}.{name}", f"must be a whole number from 1 to {1 << 24} (given {value!r})"
            )
        return value

    layers = whole("block_count")
    heads = whole("attention.head_count")
    per_layer_heads = _per_layer(meta.get(f"{arch}.attention.head_count_kv"), layers)
    kv_heads = min(h for h in per_layer_heads if h) if per_layer_heads else whole("attention.head_count_kv", heads)
    heads_of = per_layer_heads or [kv_heads] * layers
    if meta.get(f"{arch}.attention.kv_lora_rank") is not None:
        values = [whole("attention.kv_lora_rank") + whole("rope.dimension_count")] * layers
    else:
        head_dim = whole("embedding_length") // heads
        key = whole("attention.key_length", head_dim)
        value = whole("attention.value_length", key)
        values = [h * (key + value) for h in heads_of]
    # llama.cpp's n_layer_kv_from_start: the last shared_kv_layers read an earlier layer's cache (Gemma 3n)
    shared = meta.get(f"{arch}.attention.shared_kv_layers")
    own = (
        layers - shared if isinstance(shared, int) and not isinstance(shared, bool) and 0 < shared < layers else layers
    )
    sliding = _sliding(meta, arch, layers)
    kv = sum(values[:own]) * KV_BYTES_PER_ELEMENT
    slid = sum(v for i, v in enumerate(values[:own]) if sliding[i]) * KV_BYTES_PER_ELEMENT
    window = meta.get(f"{arch}.attention.sliding_window")
    context = meta.get(f"{arch}.context_length")
    max_context = context if isinstance(context, int) and not isinstance(context, bool) and context > 0 else 0
    return Shape(
        kv_bytes_per_token=kv,
        windows=((int(window), slid),) if slid and isinstance(window, int) else (),
        kv_heads=kv_heads,
        params=header.params,
        max_context=max_context,
        layers=layers,
        hidden=_count(meta.get(f"{arch}.embedding_length")),
        vocab=_count(meta.get(f"{arch}.vocab_size", meta.get("tokenizer.ggml.tokens"))),
        experts=_count(meta.get(f"{arch}.expert_count")),
    )


SWA_PERIOD: dict[str, int] = {
    # llama.cpp's load_hparams: hparams.set_swa_pattern(n) for these architectures (src/llama-model.cpp),
    # where the GGUF gives no attention.sliding_window_pattern of its own
    "gemma2": 2,
    "gemma3": 6,
    "gemma3n": 5,
    "cohere2": 4,
    "gpt-oss": 2,
    "exaone4": 4,
}
"""Every n-th layer full, the others sliding, by architecture."""


def _sliding(meta: Mapping[str, Any], arch: str, layers: int) -> list[bool]:
    """Which layers llama.cpp's SWA cache keeps for ``attention.sliding_window`` tokens only:
    ``attention.sliding_window_pattern`` a layer each (true: sliding), or its period, or the architecture's
    (``SWA_PERIOD``); ``set_swa_pattern(n)`` makes layer ``il`` sliding where ``il % n < n - 1``. None
    without a window, or where every layer would slide (cached whole, as ``planner.caches`` counts it)."""
    none = [False] * layers
    window = meta.get(f"{arch}.attention.sliding_window")
    if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
        return none
    pattern = meta.get(f"{arch}.attention.sliding_window_pattern", SWA_PERIOD.get(arch))
    if isinstance(pattern, list) and len(pattern) == layers:
        flags = [bool(p) for p in pattern]
    elif isinstance(pattern, int) and not isinstance(pattern, bool) and pattern >= 2:
        flags = [i % pattern < pattern - 1 for i in range(layers)]
    else:
        return none
    return flags if any(flags) and not all(flags) else none


def _per_layer(value: Any, layers: int) -> list[int]:
    """A per-layer array of counts (``head_count_kv`` a layer each, as llama.cpp's ``get_key_or_arr``
    reads it); empty where the value is one count."""
    if isinstance(value, list) and len(value) == layers and all(isinstance(v, int) and v >= 0 for v in value):
        return [int(v) for v in value]
    return []


def _count(value: Any) -> int:
    """A size the measured estimate reads, 0 where the header has none: a count, or the length of an array
    (the vocabulary, whose strings are skipped and only counted)."""
    if isinstance(value, list):
        value = len(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 1 << 24:
        return 0
    return value
