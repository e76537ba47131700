"""What a started hold's engine was seen to hold on its node: the agent measures it and reports it in the
heartbeat, beside the hold id in ``started``; the workers keep what was seen and plans use it.

A footprint is structure only here (whole, non-negative, bounded figures; a version with no quote in it,
so that a node record's text keeps the layout ``heartbeat.lua`` reads). Whether its figures make sense for
the node and the hold (a card's bytes past the card, say) is for whoever reads it to judge."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_BYTES = 2**44
"""16 TiB: past any card or any node's RAM, and whole in a double, as Lua's cjson reads it."""

MAX_CARDS = 64
"""Cards one hold may list, past any node's."""

VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$|^$"

Source = Literal["nvml", "nvidia-smi", "proc"]
"""Where the figures were read: NVML's per-process memory, ``nvidia-smi --query-compute-apps``, or
``/proc`` (the resident memory of the engine's process tree, on a CPU node)."""


class Footprint(BaseModel):
    """What one started hold's engine holds, measured by its node's agent once the engine serves.

    On cards, ``card_bytes`` has one figure per card given to the hold (in the hold's card order): the
    memory the engine's processes hold on it. On a CPU node ``ram_bytes`` is the resident memory of the
    engine's process tree once steady, ``ram_peak_bytes`` the most seen. ``kv_bytes`` is the part of each
    card's figure (or of the RAM) that is the KV cache the engine allocated, as the engine reports it (0
    when it does not say): vLLM sizes its cache to fill its share of the card, so what the plan's estimate
    predicts is the figure less the cache."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    engine: Literal["vllm", "llamacpp"]
    version: str = Field(default="", pattern=VERSION_PATTERN)
    """The engine's release as it reports it (``0.11.0``, ``b6500``); "" when it does not say."""
    source: Source
    card_bytes: tuple[Annotated[int, Field(ge=0, le=MAX_BYTES)], ...] = Field(default=(), max_length=MAX_CARDS)
    ram_bytes: int = Field(default=0, ge=0, le=MAX_BYTES)
    ram_peak_bytes: int = Field(default=0, ge=0, le=MAX_BYTES)
    kv_bytes: int = Field(default=0, ge=0, le=MAX_BYTES)
