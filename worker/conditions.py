"""What a replica's engine is doing: the node agent reports it in its heartbeat (``EngineReport``, one per
started hold), and the workers keep it on the replica in the job's record (``EngineCondition``), beside the
job's own state, as a Kubernetes Pod keeps its conditions beside its phase.

An engine goes ``starting`` (launched, not answering its health yet) -> ``serving`` (its health answers:
the ``endpoint`` other services call, ``host:port``, and the ``model`` name it serves) -> ``ended`` (it
died after serving, and its agent stopped restarting it). One that dies before it ever served is ``failed``
(``failed to start`` in the record), with the engine's last lines as the reason; when those lines are the
engine's own out-of-memory at start, ``out_of_memory`` says so and the workers plan the replica again with
more (``worker.ended``, ``worker.startfailures``).

Every text here ends up inside a node record, whose text keeps the layout ``heartbeat.lua`` reads: no
quote, backslash or control character, bounded lengths."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from worker.footprints import VERSION_PATTERN

REASON_PATTERN = r'^[^"\\\x00-\x1f]{0,400}$'
"""Why an engine ended or did not start: up to 400 characters (a few of its last lines, joined), no quote,
backslash or control character."""

ENDPOINT_PATTERN = r"^$|^(?:[A-Za-z0-9][A-Za-z0-9.-]{0,252}|\[[0-9A-Fa-f:.]{2,45}\]):[0-9]{1,5}$"
"""``host:port`` (a host name, an IPv4 address, or an IPv6 one in brackets), or "" while there is none."""

SERVED_PATTERN = r'^[^"\\\x00-\x1f]{0,200}$'
"""The model name an engine serves (``/v1/models``): up to 200 characters, no quote, backslash or control."""

MAX_RESTARTS = 1000
"""Past any restart budget an agent keeps: a count beyond it is not a count but noise."""

Reported = Literal["starting", "serving", "ended", "failed"]
"""What an agent reports of one started hold's engine."""

Condition = Literal["starting", "serving", "ended", "failed to start"]
"""What a replica's record says of its engine."""


class EngineReport(BaseModel):
    """One started hold's engine, as its node's agent reports it in a heartbeat (``Heartbeat.engines``).
    ``restarts``: how many times the agent started it again after it died while serving."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    condition: Reported
    endpoint: str = Field(default="", pattern=ENDPOINT_PATTERN)
    model: str = Field(default="", pattern=SERVED_PATTERN)
    reason: str = Field(default="", pattern=REASON_PATTERN)
    out_of_memory: bool = False
    restarts: int = Field(default=0, ge=0, le=MAX_RESTARTS)
    version: str = Field(default="", pattern=VERSION_PATTERN)
    """The engine's release as its log printed it ("" when it did not say): an out-of-memory start is kept
    as a run at that release."""


class EngineCondition(BaseModel):
    """A replica's engine as its job's record keeps it: ``state``, ``since`` when (the worker's clock, as
    it wrote the change), on which node and hold, and, while it serves, where other services call it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    state: Condition
    since: datetime
    node_id: str
    hold_id: str
    endpoint: str = ""
    model: str = ""
    reason: str = ""
    restarts: int = 0

    @property
    def dead(self) -> bool:
        """Whether the engine is gone while its cards are still held (ended, or never started)."""
        return self.state in ("ended", "failed to start")

    def same(self, other: EngineCondition | None) -> bool:
        """Whether ``other`` says the same of the engine, whenever it was written."""
        return other is not None and self.model_copy(update={"since": other.since}) == other


def condition_of(report: EngineReport) -> Condition:
    """The record's word for what an agent reported."""
    return "failed to start" if report.condition == "failed" else report.condition
