"""Node ids two agents publish under (a cloned machine image): what ``heartbeat.lua`` records of each
(``conflict:{node_id}``, indexed in ``conflicts`` by the workers' intake), read for ``modelplan status``
and the metrics.

The script decides: a boot heard again after another took its place is a second agent, and the node is
out of the pool until one boot alone has been heard for ``CONFLICT_CLEAR_MS``. This only reads.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from planner.pool import ID_REGEX
from worker.constants import SCHEMA_VERSION, SchemaVersion
from worker.errors import BadRecord
from worker.records import read_record
from worker.reports import SEQ_MAX

if TYPE_CHECKING:
    from worker.store import Store


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


class BootHeard(BaseModel):
    """One boot heard under a node id in conflict."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    boot_id: str = Field(pattern=ID_REGEX)
    heard_ms: int
    """When it was last heard: ms since the epoch, the Redis server's clock."""
    seq: int = Field(ge=0, le=SEQ_MAX)
    """Its last seq: one no later than this is an older heartbeat of it, and changes nothing."""


class ConflictRecord(BaseModel):
    """``conflict:{node_id}``: the boots heard under one node id, written by ``heartbeat.lua`` (times in ms
    since the epoch, by the Redis server's clock: the script has no other)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node_id: str = Field(pattern=ID_REGEX)
    boots: tuple[BootHeard, ...]
    """In the order they were first heard."""
    last_boot: str = Field(pattern=ID_REGEX)
    """The boot of the last heartbeat heard."""
    flips: int = Field(ge=0)
    """How many times the boot heard changed since the conflict began, the change that showed it
    included."""
    since_ms: int
    last_heard_ms: int
    refused: int = Field(default=0, ge=0)
    """How many heartbeats were refused for the conflict: the workers' intake adds them to ``stats``."""
    schema_version: SchemaVersion = SCHEMA_VERSION

    @property
    def since(self) -> datetime:
        return _at(self.since_ms)

    @property
    def last_heard(self) -> datetime:
        return _at(self.last_heard_ms)


def read(store: Store) -> list[ConflictRecord]:
    """The node ids in conflict now, by id, in one round trip and one more: an id in the index whose record
    is gone has cleared; a record that does not parse is reported (``quarantine``) and left out."""
    k = store.keys
    ids = store.valid_ids(store.redis.zrange(k.conflicts, 0, -1), k.conflicts, "a node id", "skipped")
    if not ids:
        return []
    keys = [k.conflict(i) for i in sorted(ids)]
    out = []
    for key, raw in zip(keys, store.redis.mget(keys), strict=True):
        if raw is None:
            continue
        try:
            out.append(read_record(ConflictRecord, raw, key))
        except BadRecord as e:
            store.report_bad(e, "left out of the conflicts shown")
    return out


def prune(store: Store, now_ms: int) -> int:
    """Drop from the index the node ids whose conflict cleared by ``now_ms`` (their records gone with their
    TTL): how many."""
    return int(store.redis.zremrangebyscore(store.keys.conflicts, "-inf", now_ms))
