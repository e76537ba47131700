"""From a model repository to what the planner needs: its artifacts and its shape.

A repository is a file listing (path and size, as the Hub's tree listing gives it) with the model's
``config.json``, or a local folder (a downloaded snapshot) holding both.
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planner.errors import InvalidInput
from planner.gguf import read_header, shape_from_gguf
from planner.model import ORIGINAL, Artifact, Shape
from planner.pool import invalid_from
from planner.quant import quant_of
from planner.quantconfig import config_dtype, is_quantised, original_quant
from planner.shape import MAX_CONFIG_DIMENSION, shape_from_config
from planner.weighing import check_gguf_bits, dtype_bytes, params_from_index, shape_of
from planner.weights import MAX_HEADER_BYTES, WeightsReading, read_weights

__all__ = [
    "MAX_CONFIG_DIMENSION",
    "Repository",
    "dtype_bytes",
    "params_from_index",
    "shape_from_config",
]

MAX_FILE_BYTES = 1 << 50
"""A file size past a PiB is a typo, not a file."""

SAFETENSORS_HEADER_LIMIT = MAX_HEADER_BYTES
"""The safetensors format caps its JSON header at 100 MB; a larger length prefix means a broken file."""

_GGUF_SPLIT = re.compile(r"^(?P<stem>.+)-(?P<part>\d{5})-of-(?P<total>\d{5})\.gguf$", re.IGNORECASE)
_SHARD = re.compile(r"-(?P<part>\d{5})-of-(?P<total>\d{5})\.(?:safetensors|bin)$", re.IGNORECASE)
_NOT_MODEL_GGUF = ("mmproj", "imatrix")
"""Names of GGUF files that are no model: multimodal projectors and importance matrices (llama.cpp's
llama-imatrix writes GGUF), wherever the word sits in the name."""
_ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")


@dataclass(frozen=True, slots=True)
class Repository:
    """The artifacts a repository offers and the shape of its model."""

    artifacts: tuple[Artifact, ...]
    shape: Shape
    notes: tuple[str, ...] = ()
    """Where the weights' headers or sizes corrected the config's arithmetic, one line each
    (``planner.weighing``); empty where nothing did."""


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


def artifacts_from_listing(
    files: Iterable[ListedFile], source: str = "files", *, base_model: str = ""
) -> list[Artifact]:
    """The artifacts in a listing.

    Each ``.gguf`` model file is one, its quant read from its path; parts named
    ``<name>-00001-of-0000N.gguf`` are one artifact, ``<name>``, of N shards, their bytes summed;
    projectors and importance matrices (``mmproj`` or ``imatrix`` anywhere in the name) are not
    artifacts. The root ``*.safetensors`` shards are one artifact, ``original`` (a root
    ``consolidated*.safetensors`` beside them is the same weights in another layout, and is left out);
    where there are none, the root ``pytorch_model*.bin`` files are, as vLLM loads them. Weights under
    ``original/`` and every other file are ignored. A repository of an adapter alone
    (``adapter_config.json`` with ``adapter_model.*``) is refused, naming ``base_model`` where it is known.
    """
    singles: list[Artifact] = []
    splits: dict[tuple[str, int], dict[int, int]] = {}
    root_weights: list[ListedFile] = []
    root_bins: list[ListedFile] = []
    root_names: set[str] = set()
    for f in files:
        path = PurePosixPath(f.path)
        lower = path.name.lower()
        if len(path.parts) == 1:
            root_names.add(lower)
        if lower.endswith(".gguf"):
            if any(word in lower for word in _NOT_MODEL_GGUF):
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
        elif lower.endswith(".safetensors") and len(path.parts) == 1 and lower not in _ADAPTER_WEIGHTS:
            _refuse_empty(f, source)
            root_weights.append(f)
        elif lower.startswith("pytorch_model") and lower.endswith(".bin") and len(path.parts) == 1:
            _refuse_empty(f, source)
            root_bins.append(f)

    out = sorted(singles, key=lambda a: a.name)
    for (stem, total), parts in sorted(splits.items()):
        missing = sorted(set(range(1, total + 1)) - set(parts))
        if missing:
            raise InvalidInput(source, "path", f"split GGUF {stem!r} lacks part(s) {_listed(missing)} of {total}")
        out.append(Artifact(name=stem, format="gguf", bytes=sum(parts.values()), shards=total, quant=quant_of(stem)))
    out.sort(key=lambda a: a.name)

    if any(not f.path.lower().startswith("consolidated") for f in root_weights):
        root_weights = [f for f in root_weights if not f.path.lower().startswith("consolidated")]
    original = root_weights or root_bins
    if original:
        _check_shards(original, source)
        out.append(
            Artifact(
                name=ORIGINAL,
                format="safetensors" if root_weights else "pytorch",
                bytes=sum(f.size for f in original),
                shards=len(original) if len(original) > 1 else 0,
                quant="bf16",
            )
        )
    if not out and (base_model or root_names & {"adapter_config.json", *_ADAPTER_WEIGHTS}):
        base = f"its base model {base_model!r}" if base_model else "the base model its adapter_config.json names"
        raise InvalidInput(source, "(listing)", f"an adapter, not a model: serve {base} with this adapter")
    if not out:
        raise InvalidInput(
            source, "(listing)", "no weights: no .gguf model file, no *.safetensors, no pytorch_model*.bin at the root"
        )
    return out


def original_safetensors(paths: Iterable[str]) -> list[str]:
    """The files of the ``original`` artifact's safetensors, as ``artifacts_from_listing`` picks them: the
    root ``*.safetensors`` but an adapter's, ``consolidated*`` ones only where there are no others."""
    root = [p for p in paths if "/" not in p and p.lower().endswith(".safetensors")]
    root = [p for p in root if p.lower() not in _ADAPTER_WEIGHTS]
    if any(not p.lower().startswith("consolidated") for p in root):
        root = [p for p in root if not p.lower().startswith("consolidated")]
    return sorted(root)


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


def _as_loaded(
    artifacts: list[Artifact], config: Any, hf_quant: Any, params: int, reading: WeightsReading | None = None
) -> tuple[Artifact, ...]:
    """The original weights named for what they are (``bf16``, ``fp16``, ``fp8``, ``awq-int4``, ...); an
    fp32 original is loaded by vLLM in 16 bits (dtype ``auto`` turns float32 into float16, bfloat16 since
    v0.10.1: ``_get_and_verify_dtype``, vllm/config/model.py), so it holds half its files' bytes. A config
    that names no dtype (GPT-2's) vLLM takes as float32, and newer releases read the safetensors' own
    dtype: here such an original is fp32 where its files hold more than three bytes a parameter, else
    bf16. Where the config names no quantisation and the weights' headers show one (``fp8``), it is that."""
    if not isinstance(config, Mapping):
        return tuple(artifacts)
    quant = original_quant(config, hf_quant)
    if not is_quantised(quant) and reading is not None and reading.quant():
        quant = reading.quant()
    out = []
    for a in artifacts:
        if a.name == ORIGINAL and a.format != "gguf":
            this = quant
            if not config_dtype(config) and not is_quantised(quant) and params and a.bytes > 3 * params:
                this = "fp32"
            a = replace(a, quant=this, load_bytes=a.bytes // 2 if this == "fp32" else 0)
        out.append(a)
    return tuple(out)


def _original_bytes(artifacts: Sequence[Artifact]) -> int:
    return sum(a.bytes for a in artifacts if a.name == ORIGINAL)


def _base_model(adapter: Any) -> str:
    base = adapter.get("base_model_name_or_path") if isinstance(adapter, Mapping) else None
    return base[:200] if isinstance(base, str) else ""


def repository_from_listing(
    files: Any,
    config: Any,
    index: Any = None,
    *,
    hf_quant: Any = None,
    adapter: Any = None,
    source: str = "files",
    headers: Any = None,
    weights: WeightsReading | None = None,
    config_source: str = "config.json",
) -> Repository:
    """A repository from a listing's JSON data, its ``config.json`` data and, where there is one, its
    ``model.safetensors.index.json`` data (which tells the parameter count of 16-bit weights), ModelOpt's
    ``hf_quant_config.json`` data (which tells a quantisation that ``config.json`` does not) and an
    ``adapter_config.json`` (which names the base model of a repository that is only an adapter).

    The original's safetensors ``headers`` (any shape ``planner.weights.read_weights`` takes), or what was
    read of them (``weights``), make the parameter count exact and correct the config's KV cache
    arithmetic where they disagree (``planner.weighing``). ``source`` and ``config_source`` name the listing
    and the config in messages."""
    if adapter is None and isinstance(config, Mapping) and "peft_type" in config:
        adapter = config  # an adapter_config.json given as the config
    artifacts = artifacts_from_listing(parse_listing(files, source), source, base_model=_base_model(adapter))
    if weights is None and headers is not None and isinstance(config, Mapping):
        weights = read_weights(headers, quant=original_quant(config, hf_quant), source=f"{source} headers")
    shape, notes = shape_of(config, index, hf_quant, _original_bytes(artifacts), weights, config_source)
    check_gguf_bits(artifacts, shape, config_source)
    return Repository(_as_loaded(artifacts, config, hf_quant, shape.params, weights), shape, notes)


def repository_from_folder(folder: str | os.PathLike[str]) -> Repository:
    """A repository from a local folder (a downloaded snapshot): sizes from disk, ``config.json`` inside.

    Hidden entries (``.cache``, ``.git``) are skipped and links followed, as the Hub's cache keeps a
    snapshot's files as links to its blobs. The parameter count comes from the original's safetensors
    headers (read without the data: ``planner.weights``), else from the index, else from the config's
    shapes; the headers' KV layers win over the config's where they disagree. A folder of
    GGUF files with no ``config.json`` (as most quantised repositories are) takes its shape and parameter
    count from the first GGUF file's header.
    """
    root = Path(folder)
    if not root.is_dir():
        raise InvalidInput(str(folder), "(folder)", "not a folder")
    config = _read_json(root / "config.json", required=False)
    hf_quant = _read_json(root / "hf_quant_config.json", required=False)
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
    adapter = _read_json(root / "adapter_config.json", required=False) if config is None else None
    artifacts = artifacts_from_listing(parse_listing(listing, str(root)), str(root), base_model=_base_model(adapter))
    artifacts = [a for a in artifacts if not _is_projector(root, a, listing)]
    if config is None:
        return Repository(tuple(artifacts), _shape_from_gguf_files(root, artifacts, listing))
    reading = None
    if isinstance(config, Mapping) and any(a.name == ORIGINAL and a.format == "safetensors" for a in artifacts):
        files = original_safetensors(f["path"] for f in listing)
        headers = {name: safetensors_header(root / name) for name in files}
        reading = read_weights(headers, quant=original_quant(config, hf_quant), source=str(root))
    index = None
    if reading is None or not reading.params:
        index = _read_json(root / "model.safetensors.index.json", required=False)
    shape, notes = shape_of(config, index, hf_quant, _original_bytes(artifacts), reading, str(root / "config.json"))
    return Repository(_as_loaded(artifacts, config, hf_quant, shape.params, reading), shape, notes)


PROJECTOR_ARCHITECTURES = ("clip", "mmproj")
"""``general.architecture`` of llama.cpp's multimodal projector files (``clip``, as its clip.cpp writes them)."""


def _is_projector(root: Path, a: Artifact, listing: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a GGUF artifact is a projector by its header, whatever its name; a header that cannot be
    read leaves it an artifact (reading the shape from it says what is wrong)."""
    if a.format != "gguf":
        return False
    first = a.name
    if a.shards:
        parts = sorted(f["path"] for f in listing if (m := _GGUF_SPLIT.match(f["path"])) and m["stem"] == a.name)
        first = parts[0] if parts else a.name
    try:
        arch = read_header(root / first, metadata_only=True).metadata.get("general.architecture")
    except InvalidInput:
        return False
    return arch in PROJECTOR_ARCHITECTURES


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


def safetensors_header(path: Path) -> dict[str, Any]:
    """A safetensors file's header (tensor names to ``{dtype, shape, data_offsets}``), read without the
    data: the first 8 bytes say its length."""
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
    return header


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
