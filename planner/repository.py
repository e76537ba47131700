"""From a model repository to what the planner needs: its artifacts and its shape.

A repository is a file listing (path and size, as the Hub's tree listing gives it) with the model's
``config.json``, or a local folder (a downloaded snapshot) holding both.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planner.constants import KV_BYTES_PER_ELEMENT
from planner.errors import InvalidInput
from planner.gguf import read_header, shape_from_gguf
from planner.model import ORIGINAL, Artifact, Shape
from planner.pool import invalid_from
from planner.quant import quant_of

MAX_FILE_BYTES = 1 << 50
"""A file size past a PiB is a typo, not a file."""

MAX_CONFIG_DIMENSION = 1 << 24
"""Bounds on a config's layer, head and width counts: far past any model, short of overflowing the
arithmetic."""

SAFETENSORS_HEADER_LIMIT = 100 << 20
"""The safetensors format caps its JSON header at 100 MB; a larger length prefix means a broken file."""

_GGUF_SPLIT = re.compile(r"^(?P<stem>.+)-(?P<part>\d{5})-of-(?P<total>\d{5})\.gguf$", re.IGNORECASE)
_SHARD = re.compile(r"-(?P<part>\d{5})-of-(?P<total>\d{5})\.safetensors$", re.IGNORECASE)
_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float": 4, "half": 2}


@dataclass(frozen=True, slots=True)
class Repository:
    """The artifacts a repository offers and the shape of its model."""

    artifacts: tuple[Artifact, ...]
    shape: Shape


class ListedFile(BaseModel):
    """One entry of a file listing. Other keys (``type``, ``oid``, ``lfs``) are ignored, so the Hub's tree
    listing can be passed as it comes."""

    model_config = ConfigDict(frozen=True, extra="ignore", strict=True)

    path: str = Field(min_length=1, max_length=1024)
    size: int = Field(default=0, ge=0, le=MAX_FILE_BYTES)
    type: str = "file"


def parse_listing(data: Any, source: str = "files") -> list[ListedFile]:
    """A listing from JSON data: a list of ``{"path", "size"}``; folders (``"type": "directory"``) are
    dropped."""
    if not isinstance(data, list):
        raise InvalidInput(source, "(file)", f"expected a JSON list of {{path, size}}, got {type(data).__name__}")
    files: list[ListedFile] = []
    seen: set[str] = set()
    for i, item in enumerate(data):
        where = f"{source}[{i}]"
        try:
            f = ListedFile.model_validate(item)
        except ValidationError as e:
            raise invalid_from(e, where) from e
        if f.type == "directory":
            continue
        parts = PurePosixPath(f.path).parts
        if f.path.startswith("/") or ".." in parts or "\\" in f.path or any(ord(ch) < 32 for ch in f.path):
            raise InvalidInput(where, "path", f"{f.path!r} is not a relative path inside the repository")
        if f.path in seen:
            raise InvalidInput(where, "path", f"{f.path!r} appears twice")
        seen.add(f.path)
        files.append(f)
    return files


def artifacts_from_listing(files: Iterable[ListedFile], source: str = "files") -> list[Artifact]:
    """The artifacts in a listing.

    Each ``.gguf`` model file is one, its quant read from its path; parts named
    ``<name>-00001-of-0000N.gguf`` are one artifact, ``<name>``, of N shards, their bytes summed;
    multimodal projectors (``mmproj*``) are not artifacts of their own. The root ``*.safetensors`` shards
    are one artifact, ``original`` (a root ``consolidated*.safetensors`` beside them is the same weights
    in another layout, and is left out). Weights under ``original/`` and every other file are ignored.
    """
    singles: list[Artifact] = []
    splits: dict[tuple[str, int], dict[int, int]] = {}
    root_weights: list[ListedFile] = []
    for f in files:
        path = PurePosixPath(f.path)
        lower = path.name.lower()
        if lower.endswith(".gguf"):
            if lower.startswith("mmproj"):
                continue
            _refuse_empty(f, source)
            m = _GGUF_SPLIT.match(f.path)
            if m is None:
                singles.append(Artifact(name=f.path, format="gguf", bytes=f.size, quant=quant_of(f.path)))
                continue
            part, total = int(m["part"]), int(m["total"])
            if not 1 <= part <= total:
                raise InvalidInput(source, "path", f"{f.path!r}: part {part} of {total} is out of range")
            splits.setdefault((m["stem"], total), {})[part] = f.size
        elif lower.endswith(".safetensors") and len(path.parts) == 1:
            _refuse_empty(f, source)
            root_weights.append(f)

    out = sorted(singles, key=lambda a: a.name)
    for (stem, total), parts in sorted(splits.items()):
        missing = sorted(set(range(1, total + 1)) - set(parts))
        if missing:
            raise InvalidInput(source, "path", f"split GGUF {stem!r} lacks part(s) {_listed(missing)} of {total}")
        out.append(Artifact(name=stem, format="gguf", bytes=sum(parts.values()), shards=total, quant=quant_of(stem)))
    out.sort(key=lambda a: a.name)

    if any(not f.path.lower().startswith("consolidated") for f in root_weights):
        root_weights = [f for f in root_weights if not f.path.lower().startswith("consolidated")]
    if root_weights:
        _check_shards(root_weights, source)
        out.append(
            Artifact(
                name=ORIGINAL,
                format="safetensors",
                bytes=sum(f.size for f in root_weights),
                shards=len(root_weights) if len(root_weights) > 1 else 0,
                quant="bf16",
            )
        )
    if not out:
        raise InvalidInput(source, "(listing)", "no weights: no .gguf model file and no *.safetensors at the root")
    return out


def _refuse_empty(f: ListedFile, source: str) -> None:
    if f.size <= 0:
        raise InvalidInput(source, "size", f"{f.path!r} is a weights file of {f.size} bytes")


def _check_shards(files: list[ListedFile], source: str) -> None:
    totals: dict[int, set[int]] = {}
    for f in files:
        m = _SHARD.search(f.path)
        if m:
            totals.setdefault(int(m["total"]), set()).add(int(m["part"]))
    for total, parts in totals.items():
        missing = sorted(set(range(1, total + 1)) - parts)
        if missing:
            raise InvalidInput(source, "path", f"safetensors shards lack part(s) {_listed(missing)} of {total}")


def _listed(numbers: list[int]) -> str:
    shown = ", ".join(str(n) for n in numbers[:5])
    return shown + (f" and {len(numbers) - 5} more" if len(numbers) > 5 else "")


def shape_from_config(config: Any, *, params: int = 0, source: str = "config.json") -> Shape:
    """A model's shape from its ``config.json``.

    Multimodal configs nest the language model's fields under ``text_config``; those win over the top
    level. ``num_key_value_heads`` absent means as many as the attention heads; ``head_dim`` absent means
    ``hidden_size / num_attention_heads``. MLA models (``kv_lora_rank``, as DeepSeek's) cache one latent of
    ``kv_lora_rank + qk_rope_head_dim`` per layer instead of keys and values per head. A sliding window
    is not counted: every layer is planned for the whole context, which can over-estimate, never under.
    ``params`` is the parameter count where something else tells it (0 is unknown).
    """
    if not isinstance(config, Mapping):
        raise InvalidInput(source, "(file)", f"expected a JSON object, got {type(config).__name__}")
    cfg: dict[str, Any] = dict(config)
    text = config.get("text_config")
    if isinstance(text, Mapping):
        cfg.update(text)
        source = f"{source} (text_config)"

    def whole(name: str, *, default: int | None = None) -> int:
        value = cfg.get(name)
        if value is None:
            if default is not None:
                return default
            raise InvalidInput(source, name, "missing")
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_CONFIG_DIMENSION:
            allowed = f"must be a whole number from 1 to {MAX_CONFIG_DIMENSION}"
            raise InvalidInput(source, name, f"{allowed} (given {value!r})")
        return value

    layers = whole("num_hidden_layers")
    heads = whole("num_attention_heads")
    kv_heads = whole("num_key_value_heads", default=heads)
    if cfg.get("kv_lora_rank") is not None:
        per_layer = whole("kv_lora_rank") + whole("qk_rope_head_dim")
    else:
        if cfg.get("head_dim") is not None:
            head_dim = whole("head_dim")
        else:
            hidden = whole("hidden_size")
            if hidden % heads:
                raise InvalidInput(source, "hidden_size", f"{hidden} does not divide by num_attention_heads {heads}")
            head_dim = hidden // heads
        per_layer = 2 * kv_heads * head_dim
    max_context = cfg.get("max_position_embeddings")
    if not isinstance(max_context, int) or isinstance(max_context, bool) or max_context <= 0:
        max_context = 0
    return Shape(
        kv_bytes_per_token=layers * per_layer * KV_BYTES_PER_ELEMENT,
        kv_heads=kv_heads,
        params=params,
        max_context=max_context,
    )


def dtype_bytes(config: Mapping[str, Any]) -> int:
    """Bytes per weight of unquantised original weights by ``torch_dtype`` (newer configs: ``dtype``); 0
    when unknown or when the weights are quantised (``quantization_config``)."""
    if config.get("quantization_config") is not None:
        return 0
    text = config.get("text_config")
    dtype = config.get("torch_dtype") or config.get("dtype")
    if dtype is None and isinstance(text, Mapping):
        dtype = text.get("torch_dtype") or text.get("dtype")
    return _DTYPE_BYTES.get(str(dtype), 0)


def params_from_index(index: Any, config: Mapping[str, Any]) -> int:
    """The parameter count from ``model.safetensors.index.json``'s ``metadata.total_size`` (bytes) and the
    weights' dtype; 0 when either is unknown."""
    width = dtype_bytes(config)
    meta = index.get("metadata") if isinstance(index, Mapping) else None
    total = meta.get("total_size") if isinstance(meta, Mapping) else None
    if not width or isinstance(total, bool) or not isinstance(total, int | float) or not 0 < total < 1 << 60:
        return 0
    return int(total) // width


def repository_from_listing(files: Any, config: Any, index: Any = None, *, source: str = "files") -> Repository:
    """A repository from a listing's JSON data, its ``config.json`` data and, where there is one, its
    ``model.safetensors.index.json`` data (which tells the parameter count)."""
    artifacts = artifacts_from_listing(parse_listing(files, source), source)
    params = params_from_index(index, config) if isinstance(config, Mapping) else 0
    return Repository(tuple(artifacts), shape_from_config(config, params=params))


def repository_from_folder(folder: str | os.PathLike[str]) -> Repository:
    """A repository from a local folder (a downloaded snapshot): sizes from disk, ``config.json`` inside.

    Hidden entries (``.cache``, ``.git``) are skipped and links followed, as the Hub's cache keeps a
    snapshot's files as links to its blobs. The parameter count comes from the safetensors headers
    where the weights are unquantised, else from the index. A folder of GGUF files with no
    ``config.json`` (as most quantised repositories are) takes its shape and parameter count from the
    first GGUF file's header.
    """
    root = Path(folder)
    if not root.is_dir():
        raise InvalidInput(str(folder), "(folder)", "not a folder")
    config = _read_json(root / "config.json", required=False)
    listing: list[dict[str, Any]] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            full = Path(dirpath) / name
            try:
                size = full.stat().st_size
            except OSError as e:
                raise InvalidInput(str(full), "(file)", f"cannot be read: {e.strerror}") from e
            listing.append({"path": full.relative_to(root).as_posix(), "size": size})
    artifacts = artifacts_from_listing(parse_listing(listing, str(root)), str(root))
    if config is None:
        return Repository(tuple(artifacts), _shape_from_gguf_files(root, artifacts, listing))
    params = 0
    if isinstance(config, Mapping) and dtype_bytes(config):
        original = [
            root / f["path"] for f in listing if f["path"].lower().endswith(".safetensors") and "/" not in f["path"]
        ]
        if any(a.name == ORIGINAL for a in artifacts):
            params = sum(
                safetensors_params(p)
                for p in original
                if not p.name.lower().startswith("consolidated") or len(original) == 1
            )
        if not params:
            params = params_from_index(_read_json(root / "model.safetensors.index.json", required=False), config)
    return Repository(tuple(artifacts), shape_from_config(config, params=params, source=str(root / "config.json")))


def _shape_from_gguf_files(root: Path, artifacts: Sequence[Artifact], listing: Sequence[Mapping[str, Any]]) -> Shape:
    gguf = [a for a in artifacts if a.format == "gguf"]
    if not gguf:
        raise InvalidInput(str(root / "config.json"), "(file)", "missing: a repository needs its config.json")
    first = gguf[0]
    files = [first.name]
    if first.shards:
        parts = ((f["path"], _GGUF_SPLIT.match(f["path"])) for f in listing)
        files = sorted(path for path, m in parts if m is not None and m["stem"] == first.name)
    headers = [read_header(root / f) for f in files]
    shape = shape_from_gguf(headers[0], str(root / files[0]))
    return replace(shape, params=sum(h.params for h in headers))


def safetensors_params(path: Path) -> int:
    """The number of values in a safetensors file, from its header alone."""
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise InvalidInput(str(path), "(header)", "shorter than a safetensors header")
        (length,) = struct.unpack("<Q", head)
        if length > SAFETENSORS_HEADER_LIMIT:
            raise InvalidInput(str(path), "(header)", f"declares a {length}-byte header, past the format's limit")
        try:
            header = json.loads(f.read(length))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise InvalidInput(str(path), "(header)", f"not JSON: {e}") from e
    if not isinstance(header, dict):
        raise InvalidInput(str(path), "(header)", "not a JSON object")
    total = 0
    for name, tensor in header.items():
        if name == "__metadata__":
            continue
        shape = tensor.get("shape") if isinstance(tensor, dict) else None
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise InvalidInput(str(path), f"{name}.shape", f"not a list of sizes (given {shape!r})")
        total += math.prod(shape)
    return total


def _read_json(path: Path, *, required: bool) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as e:
        if not required:
            return None
        raise InvalidInput(str(path), "(file)", "missing: a repository needs its config.json") from e
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidInput(str(path), "(file)", f"cannot be read: {e}") from e
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, over-long integers, nesting past the stack
        raise InvalidInput(str(path), "(file)", f"not JSON: {e}") from e
