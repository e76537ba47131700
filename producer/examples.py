"""The example repositories shipped with modelplan (file listings and configs of well-known models), for
the demo and for trying things out. In a checkout they are in ``examples/models``; an installed package
has them under ``share/modelplan/examples/models`` in its prefix."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from planner import InvalidInput
from producer.client import request_from_listing
from worker.records import ServeRequest

_PLACES = (
    Path(__file__).resolve().parent.parent / "examples" / "models",
    Path(sys.prefix) / "share" / "modelplan" / "examples" / "models",
)


def models_dir() -> Path:
    """Where the example repositories are."""
    for place in _PLACES:
        if place.is_dir():
            return place
    raise InvalidInput("examples", "models", f"not found in {' or '.join(str(p) for p in _PLACES)}")


def example_request(model: str, *, name: str | None = None, **kw: Any) -> ServeRequest:
    """A serve request for the example repository ``model`` (a folder name under ``examples/models``)."""
    d = models_dir() / model
    if not d.is_dir():
        raise InvalidInput("examples", "model", f"no example {model!r} in {models_dir()}")
    index = d / "model.safetensors.index.json"
    return request_from_listing(
        json.loads((d / "files.json").read_text()),
        json.loads((d / "config.json").read_text()),
        json.loads(index.read_text()) if index.exists() else None,
        model=name or model,
        **kw,
    )
