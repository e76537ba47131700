"""What a node agent reports (``Heartbeat``) and what is stored of it (``NodeRecord``), with the text of a
stored record as ``heartbeat.lua`` reads it."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Annotated, Any

from pydantic import Field, TypeAdapter, ValidationError, field_validator, model_validator

from planner.pool import ID_REGEX, NodeReport, invalid_from
from worker.conditions import EngineReport
from worker.constants import SCHEMA_VERSION, SchemaVersion
from worker.footprints import Footprint
from worker.ids import HOLD_PATTERN
from worker.records import as_json

MAX_STARTED = 4096
"""How many hold ids one heartbeat may list as started: far past the cards of any node."""

ENDED_PATTERN = r'^[^"\\\x00-\x1f]{1,200}$'
"""Why an engine ended: up to 200 characters, no quote, backslash or control character (a node record's
text keeps the layout ``heartbeat.lua`` reads)."""

SEQ_MAX = 2**53
"""The highest seq a heartbeat may carry: a whole number Redis's scripts hold exactly."""


class Heartbeat(NodeReport):
    """A node agent's report: the pool record plus its order and its boot.

    ``seq`` rises with every heartbeat of one boot; an older one changes nothing. ``boot_id`` changes when
    the node restarts. ``started`` lists the holds (reservations, by hold id) whose cards or memory the
    report already counts as in use, so that they are not subtracted from what is free a second time;
    ``footprints`` what the engines of some of them were measured to hold (``worker.footprints``), left out
    of the JSON when there is none.
    """

    boot_id: str = Field(pattern=ID_REGEX)
    started: tuple[str, ...] = Field(default=(), max_length=MAX_STARTED)
    footprints: dict[str, Footprint] = Field(default_factory=dict, max_length=MAX_STARTED, exclude_if=lambda v: not v)
    ended: dict[str, Annotated[str, Field(pattern=ENDED_PATTERN)]] = Field(
        default_factory=dict, max_length=MAX_STARTED, exclude_if=lambda v: not v
    )
    """Started holds whose engine ended while the hold is still on the node, with why (``exit status 1``)."""
    simulated: bool = Field(default=False, exclude_if=lambda v: not v)
    """The cards are simulated (``modelplan agent --simulate``), not read from the driver; left out of the
    JSON for real cards."""
    engines: dict[str, EngineReport] = Field(default_factory=dict, max_length=MAX_STARTED, exclude_if=lambda v: not v)
    """What the engines of started holds are doing (``worker.conditions``): starting, serving (where), ended
    or failed to start (why); left out of the JSON when there is none."""
    seq: int = Field(ge=0, le=SEQ_MAX)
    """Last of the report's fields, so that a stored record is what a plan reads, then the seq, then when
    it arrived: ``heartbeat.lua`` tells a refresh from the text before the seq."""

    @field_validator("started")
    @classmethod
    def _started_ids(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for hold in value:
            if not HOLD_PATTERN.fullmatch(hold):
                raise ValueError(f"started holds {hold!r}, which is not a hold id ({{job_id}}:{{replica}}:{{version}})")
        return value

    @model_validator(mode="after")
    def _footprints_of_started(self) -> Heartbeat:
        for field, holds in (("footprints", self.footprints), ("ended", self.ended), ("engines", self.engines)):
            for hold in holds:
                if hold not in self.started:
                    raise ValueError(f"{field} has {hold!r}, which is not in started")
        return self


class NodeRecord(Heartbeat):
    """A heartbeat as stored: with when it arrived."""

    schema_version: SchemaVersion = SCHEMA_VERSION
    received_at: datetime


class Inbox:
    """The node records with footprints this process's mirrors read as they changed, the latest by node,
    until the maintenance sweep takes them (``worker.observations``): so that the sweep reads no node
    itself, and a worker notes one as it reads it anyway. Thread-safe (the sweep runs in its own thread);
    bounded by ``kept`` nodes (past it, emptied: a footprint is sent with every heartbeat, and the next
    change brings it again)."""

    def __init__(self, kept: int = 1 << 17) -> None:
        self._lock = threading.Lock()
        self._records: dict[str, NodeRecord] = {}
        self._kept = kept

    def put(self, node_id: str, record: NodeRecord) -> None:
        with self._lock:
            if len(self._records) >= self._kept and node_id not in self._records:
                self._records.clear()
            self._records[node_id] = record

    def take(self) -> dict[str, NodeRecord]:
        with self._lock:
            out, self._records = self._records, {}
        return out

    def give_back(self, records: Mapping[str, NodeRecord]) -> None:
        """Records taken and not done with: kept unless a newer one came meanwhile."""
        with self._lock:
            for node_id, record in records.items():
                self._records.setdefault(node_id, record)


FOOTPRINTS = Inbox()
"""This process's node records with footprints, for its sweeps."""

_AT = TypeAdapter(datetime)


def stored_json(beats: Sequence[Heartbeat], at: datetime) -> list[str]:
    """Each heartbeat as its stored ``NodeRecord`` (received ``at``) in JSON, exactly as
    ``NodeRecord.model_dump_json`` writes it: the heartbeat's own JSON with the record's two fields after
    it (a record is a heartbeat and then those, in that order). For a relay's batch: the heartbeats were
    validated, and building a record model of each again cost more than the rest of publishing it."""
    tail = stored_tail(at)
    return [hb.model_dump_json()[:-1] + tail for hb in beats]


def stored_tail(at: datetime) -> str:
    """What follows a heartbeat's own fields in its stored record, received ``at``: the record's two."""
    return f',"schema_version":{SCHEMA_VERSION},"received_at":' + _AT.dump_json(at).decode() + "}"


def parse_heartbeat(data: Any, source: str = "heartbeat") -> Heartbeat:
    """A heartbeat from JSON data (text or parsed), or ``InvalidInput`` naming the field."""
    try:
        return Heartbeat.model_validate_json(as_json(data, source))
    except ValidationError as e:
        raise invalid_from(e, source) from e
