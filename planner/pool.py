"""The pool as nodes report it: one record per node, the same one ``modelplan plan`` reads from a file
and node agents publish as heartbeats."""

from __future__ import annotations

import json
import reprlib
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from planner.errors import InvalidInput
from planner.model import PoolNode
from planner.platform import DRIVER_VERSION_REGEX
from planner.quant import mem_from_class
from planner.wording import plain

ID_REGEX = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
"""Node ids, class labels and fabric names: letters, digits, ``.``, ``_`` and ``-``, up to 128 characters.
They become parts of Redis keys and command lines, so nothing else is let in. The pattern's text, anchored,
as pydantic's ``Field(pattern=)`` takes it; ``worker.ids.ID_PATTERN`` is the same rule compiled."""

RESERVED_CLASSES = {"cpu": "a CPU node's host memory", "any": "a job that any freed class wakes"}
"""Class names with a meaning of their own where pending jobs are indexed by class (``pending:for``,
``pending:classes``, ``wake:classes``): no card class may take one."""

MAX_GPUS_PER_NODE = 1024
MAX_MEM_GB = 1 << 20
"""Bounds on what one node may report (a node with a PiB of RAM is a typo, not a node)."""

LABELLED_SHARE = 0.9
"""The least share of the size its class label names that a card has: a label names the size a card is
sold as (an L40S, sold as 48 GB, is ``l40s-48g``) and the driver reports a little less (46068 MiB, 45 GiB;
ECC on GDDR memory takes a sixteenth). ``gpu_mem_gb`` is then what the card has, and what plans count; a
label whose size is past ``gpu_mem_gb / LABELLED_SHARE`` names other cards."""


class NodeReport(BaseModel):
    """One node as its agent reports it: its cards and host memory, total and free now."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    node_id: str = Field(pattern=ID_REGEX)
    gpu_class: str = Field(default="", pattern=r"^$|" + ID_REGEX)
    """The card class label, such as ``h100-80g``; ``""`` for a node with no GPU."""
    fabric: str = Field(default="", pattern=r"^$|" + ID_REGEX)
    """The interconnect its cards share with other nodes' (pipeline parallel spans one fabric)."""
    gpu_mem_gb: int = Field(default=0, ge=0, le=MAX_MEM_GB)
    """One card's memory in GiB, what plans count: at most the size the class label names, and at least
    ``LABELLED_SHARE`` of it (rounded down); when 0, the label's size."""
    gpus: int = Field(default=0, ge=0, le=MAX_GPUS_PER_NODE)
    free_gpus: int = Field(default=0, ge=0, le=MAX_GPUS_PER_NODE)
    host_mem_gb: int = Field(ge=0, le=MAX_MEM_GB)
    host_free_gb: int = Field(ge=0, le=MAX_MEM_GB)
    gpu_vendor: Literal["", "nvidia", "amd"] = Field(default="", exclude_if=lambda v: not v)
    """Who made the cards: ``nvidia`` or ``amd``; ``""`` (left out of the JSON) where not said."""
    gpu_driver: str = Field(default="", pattern=r"^$|" + DRIVER_VERSION_REGEX, exclude_if=lambda v: not v)
    """The cards' driver as its tools print it (``535.230.02``); ``""`` (left out) where not said. With
    ``gpu_vendor``, what the plan sizes vLLM's graphs by on this node's cards (``planner.platform``)."""

    @model_validator(mode="after")
    def _consistent(self) -> NodeReport:
        if self.free_gpus > self.gpus:
            raise ValueError(f"free_gpus {self.free_gpus} is more than gpus {self.gpus}")
        if self.host_free_gb > self.host_mem_gb:
            raise ValueError(f"host_free_gb {self.host_free_gb} is more than host_mem_gb {self.host_mem_gb}")
        if self.gpu_driver and not self.gpu_vendor:
            raise ValueError(f"gpu_driver {self.gpu_driver!r} given without gpu_vendor: name whose driver it is")
        if not self.gpu_class:
            if self.gpus or self.gpu_mem_gb:
                raise ValueError('a node with gpu_class "" has no cards: gpus and gpu_mem_gb must be 0')
            if self.gpu_vendor:
                raise ValueError('a node with gpu_class "" has no cards: gpu_vendor and gpu_driver must be ""')
            return self
        if self.gpu_class in RESERVED_CLASSES:
            raise ValueError(
                f"gpu_class {self.gpu_class!r} is reserved (it stands for {RESERVED_CLASSES[self.gpu_class]}): "
                "name the card class, such as h100-80g"
            )
        if self.gpus == 0:
            raise ValueError(f"gpu_class {self.gpu_class!r} given with gpus 0")
        labelled = mem_from_class(self.gpu_class)
        if self.gpu_mem_gb == 0 and labelled == 0:
            raise ValueError(
                f"gpu_mem_gb is needed: the class label {self.gpu_class!r} carries no size (like h100-80g)"
            )
        if labelled > MAX_MEM_GB:
            raise ValueError(f"the class label {self.gpu_class!r} names a card of {labelled} GiB, past {MAX_MEM_GB}")
        if self.gpu_mem_gb and labelled and self.gpu_mem_gb > labelled:
            raise ValueError(
                f"gpu_mem_gb {self.gpu_mem_gb} is more than the {labelled} GiB the class label {self.gpu_class!r} names"
            )
        if self.gpu_mem_gb and labelled and self.gpu_mem_gb < int(labelled * LABELLED_SHARE):
            raise ValueError(
                f"gpu_mem_gb {self.gpu_mem_gb} disagrees with the class label {self.gpu_class!r}: a card of that "
                f"class has {int(labelled * LABELLED_SHARE)} to {labelled} GiB"
            )
        return self

    @property
    def card_gb(self) -> int:
        """One card's memory in GiB, given or read from the label."""
        return self.gpu_mem_gb or mem_from_class(self.gpu_class)

    def to_pool_node(self) -> PoolNode:
        return PoolNode(
            id=self.node_id,
            gpu_class=self.gpu_class,
            fabric=self.fabric,
            gpu_mem_gb=self.card_gb,
            gpus=self.gpus,
            free_gpus=self.free_gpus,
            host_mem_gb=self.host_mem_gb,
            host_free_gb=self.host_free_gb,
            gpu_vendor=self.gpu_vendor,
            gpu_driver=self.gpu_driver,
        )


def parse_node(data: Any, source: str = "node") -> NodeReport:
    """A node record from JSON data, or ``InvalidInput`` naming the field and what was wrong."""
    try:
        return NodeReport.model_validate(data)
    except ValidationError as e:
        raise invalid_from(e, source) from e


def parse_pool(text: str, source: str = "pool") -> list[NodeReport]:
    """A pool file: a JSON list of node records, node ids unique."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, over-long integers, nesting past the stack
        raise InvalidInput(source, "(file)", f"not JSON: {e}") from e
    if not isinstance(data, list):
        raise InvalidInput(source, "(file)", f"expected a JSON list of nodes, got {type(data).__name__}")
    reports = [parse_node(item, f"{source}[{i}]") for i, item in enumerate(data)]
    seen: set[str] = set()
    for i, r in enumerate(reports):
        if r.node_id in seen:
            raise InvalidInput(f"{source}[{i}]", "node_id", f"{r.node_id!r} appears twice")
        seen.add(r.node_id)
    return reports


def pool_nodes(reports: Iterable[NodeReport]) -> list[PoolNode]:
    return [r.to_pool_node() for r in reports]


_SHORT = reprlib.Repr()
"""Values shown in messages: short, and bounded however deep or long the input."""
_SHORT.maxstring = _SHORT.maxother = 60
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxdict = 2, 4, 4


LOC_MAX = 200
"""The longest field path an error repeats back."""


def invalid_from(e: ValidationError, source: str) -> InvalidInput:
    """The first problem pydantic found, as one line naming the field, the value and the rule."""
    err = e.errors()[0]
    inner = (err.get("ctx") or {}).get("error")
    if isinstance(inner, InvalidInput):  # a validator's own message already names its field
        return InvalidInput(source, inner.field, inner.problem)
    loc = (
        ".".join(
            p if isinstance(p, str) and p.isidentifier() else _SHORT.repr(p) if isinstance(p, str) else str(p)
            for p in err["loc"]
        )
        or "(record)"
    )
    if len(loc) > LOC_MAX:  # a field name is the caller's text too: shown cut, as a value is
        loc = loc[: LOC_MAX - 1] + "…"
    given = err.get("input")
    if isinstance(given, dict):
        # a check across a record's fields (a model validator) names the values it compares: the record
        # itself is no value to repeat; an object where a value belongs is said as one
        shown = "" if err["type"] == "value_error" else " (given an object)"
    else:
        shown = f" (given {_SHORT.repr(given)})"
    msg = plain(err)
    if err["type"] == "string_pattern_mismatch":
        pattern = str(err.get("ctx", {}).get("pattern", ""))
        if ID_REGEX in pattern:
            msg = "only letters, digits, '.', '_' and '-' (up to 128, starting with a letter or digit)"
        else:
            msg = f"not of the form it must take ({pattern})"
    if err["type"] == "extra_forbidden":
        return InvalidInput(source, loc, "unknown field")
    if err["type"] == "missing":
        return InvalidInput(source, loc, "missing")
    return InvalidInput(source, loc, msg + shown)
