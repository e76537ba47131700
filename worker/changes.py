"""An entry of ``pool:changes``, the stream the scripts write each change to the pool onto, as one model.

The scripts write an entry's fields under short names, kept short because a heartbeat's refresh writes one
entry per call and the stream holds ``POOL_CHANGES_MAXLEN`` of them (``WIRE`` names them). Each kind of
entry, as the scripts write it::

    heartbeat   n (node id), r (its record's SHA-1), t (its TTL)  intake.lua: a node joined or changed
    refreshes   ns (node ids, space-separated), t (their TTL)     an older modelplan's heartbeat.lua
    gone        n, gone                                           intake.lua, the sweep: a node left
    hold        n, h (hold id), v (the hold as stored; "" gone)   transition.lua, reclaim_holds.lua, quarantine

Only workers write the stream (a node's login may not: ``producer.roles``); an entry is still only a
reason to read again what it names, and a name that is no id is read as no entry (``ChangeKind.NONE``).
Pure: no Redis.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from worker import constants as C
from worker.ids import HOLD_PATTERN, ID_MAX, ID_PATTERN

WIRE = {
    "n": "node_id",
    "r": "kind",
    "t": "lapses_at_ms",
    "gone": "kind",
    "ns": "refreshed",
    "h": "hold_id",
    "v": "hold",
}
"""Each field a script writes on an entry, and the ``PoolChange`` field it is read into (``r`` and ``gone``
say which kind of entry it is; ``t`` is read with the entry's time as when the nodes lapse)."""


class ChangeKind(Enum):
    HEARTBEAT = "heartbeat"
    """A node's heartbeat stored: it joined, or what it reports changed."""
    REFRESHES = "refreshes"
    """Heartbeats that changed nothing but their TTL."""
    GONE = "gone"
    """A node left the pool."""
    HOLD = "hold"
    """A hold written or cleared on a node."""
    NONE = "none"
    """Nothing modelplan writes: an id that is no id, a field missing."""


@dataclass(frozen=True, slots=True)
class PoolChange:
    """One entry of ``pool:changes``, read (``parse_change``)."""

    entry_id: str
    kind: ChangeKind
    node_id: str = ""
    """The node a heartbeat, gone or hold entry names (``n``)."""
    refreshed: str = ""
    """The nodes a refreshes entry names, space-separated as written (``ns``, or ``n`` from an older
    modelplan)."""
    lapses_at_ms: int | None = None
    """When a refresh lapses by the server's clock: the entry's time and its TTL (``t``); None when the TTL
    is no number."""
    hold_id: str = ""
    """The hold a hold entry names (``h``)."""
    hold: bytes = b""
    """The hold as stored, as the entry says (``v``); empty when it was cleared."""


def parse_change(entry_id: str, fields: dict[Any, Any]) -> PoolChange:
    """An entry as the stream gives it (its id, its fields as bytes) read into a ``PoolChange``."""
    if b"ns" in fields or (b"t" in fields and b"r" not in fields):
        # a call's refreshes (or, from an older modelplan, one); one longer than any call writes is none
        ids = fields.get(b"ns", fields.get(b"n", b""))
        if len(ids) > C.REFRESHES_MAX_BYTES:
            return PoolChange(entry_id, ChangeKind.NONE)
        lapses = _lapse(entry_id, fields.get(b"t", b""))
        return PoolChange(entry_id, ChangeKind.REFRESHES, refreshed=ids.decode(errors="replace"), lapses_at_ms=lapses)
    node_id = _node_id(fields.get(b"n", b""))
    if node_id is None:
        return PoolChange(entry_id, ChangeKind.NONE)
    if b"r" in fields:
        return PoolChange(entry_id, ChangeKind.HEARTBEAT, node_id)
    if b"gone" in fields:
        return PoolChange(entry_id, ChangeKind.GONE, node_id)
    if b"h" in fields:
        hold_id = fields[b"h"].decode(errors="replace")
        if not HOLD_PATTERN.fullmatch(hold_id):
            return PoolChange(entry_id, ChangeKind.NONE)  # no modelplan script writes one
        return PoolChange(entry_id, ChangeKind.HOLD, node_id, hold_id=hold_id, hold=bytes(fields.get(b"v", b"")))
    return PoolChange(entry_id, ChangeKind.NONE)


def gone_fields(node_id: str) -> dict[str, str]:
    """The fields of a gone entry, for a writer in Python (the sweep dropping a silent node)."""
    return {"n": node_id, "gone": "1"}


def _node_id(raw: bytes) -> str | None:
    if len(raw) > ID_MAX:
        return None
    node_id = raw.decode(errors="replace")
    return node_id if ID_PATTERN.fullmatch(node_id) else None


def _lapse(entry_id: str, ttl: bytes) -> int | None:
    """When a heartbeat refreshed at ``entry_id`` with ``ttl`` lapses; None for a TTL that is no number."""
    try:
        return int(entry_id.split("-", 1)[0]) + int(ttl)
    except ValueError:
        return None
