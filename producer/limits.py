"""Bounds on what the client reads before it plans: listings, configs, indexes and safetensors headers, by
size and by count.

A repository's listing is at most a few thousand files, its ``config.json`` a few KiB, and the largest
``model.safetensors.index.json`` on the Hub maps some 100,000 tensors in under 10 MiB (their headers, with
dtypes and shapes, about twice that; ``planner.weights`` refuses more than a million tensors). Each bound sits far
past those, and is checked before anything is parsed, so that a 100 MB listing is refused at once rather
than after half a minute and gigabytes. Each can be raised by its environment variable, which the refusal
names.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from planner import InvalidInput

MiB = 1 << 20

LIMITS: dict[str, int] = {
    "listing_bytes": 16 * MiB,
    "config_bytes": 4 * MiB,
    "index_bytes": 64 * MiB,
    "headers_bytes": 128 * MiB,
    "pool_bytes": 64 * MiB,
    "listing_entries": 100_000,
    "index_entries": 1_000_000,
}
"""Each bound's default."""

ENV_PREFIX = "MODELPLAN_LIMIT_"


def env_name(name: str) -> str:
    return ENV_PREFIX + name.upper()


def limit(name: str) -> int:
    """The bound ``name`` in force: its environment variable when set to a whole number above 0, else the
    default."""
    raw = os.environ.get(env_name(name), "")
    if raw:
        if not raw.isdigit() or int(raw) <= 0:
            raise InvalidInput(env_name(name), "(setting)", f"must be a whole number above 0 (given {raw[:40]!r})")
        return int(raw)
    return LIMITS[name]


def _refuse(source: str, what: str, name: str, found: str) -> InvalidInput:
    return InvalidInput(source, what, f"{found}, past the limit of {limit(name):,} (raise it with {env_name(name)})")


def read_bounded(path: str | Path, what: str, name: str) -> bytes:
    """A file's bytes, refused unread when it is larger than the bound ``name``."""
    try:
        size = os.stat(path).st_size
    except OSError as e:
        raise InvalidInput(str(path), what, f"cannot be read: {e}") from e
    if size > limit(name):
        raise _refuse(str(path), what, name, f"is {size:,} bytes")
    try:
        with open(path, "rb") as f:
            data = f.read(limit(name) + 1)
    except OSError as e:
        raise InvalidInput(str(path), what, f"cannot be read: {e}") from e
    if len(data) > limit(name):  # grew while being read
        raise _refuse(str(path), what, name, "is larger")
    return data


def check_listing(files: Any, source: str = "files") -> None:
    """Refuse a listing with more entries than ``listing_entries``, before any entry is validated."""
    if isinstance(files, list) and len(files) > limit("listing_entries"):
        raise _refuse(source, "(file)", "listing_entries", f"lists {len(files):,} files")


def check_index(index: Any, source: str = "index") -> None:
    """Refuse an index whose ``weight_map`` has more entries than ``index_entries``."""
    weights = index.get("weight_map") if isinstance(index, Mapping) else None
    if isinstance(weights, Mapping) and len(weights) > limit("index_entries"):
        raise _refuse(source, "weight_map", "index_entries", f"maps {len(weights):,} tensors")


FOLDER_FILES = {"config.json": "config_bytes", "model.safetensors.index.json": "index_bytes"}
"""The files of a local folder that are read whole, with their bounds."""


def check_folder(folder: str | Path) -> None:
    """Refuse a local folder whose config or index is past its bound, before either is read."""
    for name, bound in FOLDER_FILES.items():
        path = Path(folder) / name
        try:
            size = path.stat().st_size
        except OSError:
            continue  # absent: the planner says what it needs
        if size > limit(bound):
            raise _refuse(str(path), "(file)", bound, f"is {size:,} bytes")
