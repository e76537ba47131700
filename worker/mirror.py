"""A worker's mirror of the pool: the pool as plans see it (``worker.pool.Snapshot``), how far it has read
``pool:changes``, and when each node's heartbeat lapses, by the Redis server's clock.

Pure: no Redis, no store. It is fed values: the change stream's entries, parsed (``worker.changes``), and
readings of nodes and holds (``NodesRead``, ``WholeRead``) that the store took from Redis. It says back
which nodes and holds an entry makes worth reading again (``Named``), and what it could not read
(``Unread``: records that do not parse, ids that are none), for its caller to report.

What a mirror holds of a node is what its keys hold (``node:{id}`` and its TTL, ``held:{id}``), never what
an entry says: a node agent may add to the stream, so an entry is a reason to read the node it names again,
and no more. An entry that would change nothing (a worker's own commit read back) names nothing. A node
stays in the mirror until its record is read gone (a gone entry names it): a refresh moves only its
record's TTL and is written nowhere a worker reads, so a TTL as read says nothing of when it lapses."""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import compress, repeat
from typing import Any

from worker.changes import ChangeKind, PoolChange
from worker.errors import BadRecord
from worker.keys import Keys
from worker.pool import Held, ParsedNode, Snapshot, parse_cache, read_holds
from worker.reports import NodeRecord

NEVER = 1 << 62
"""When a node with no TTL lapses (a record written by hand): never."""
LAPSE_HEAP_SLACK = 10_000
"""Lapses to check kept past two a node before they are made one a node again: legitimately a few per
node (its last read, its batches' refreshes), all due within a TTL."""


@dataclass(frozen=True, slots=True)
class Unread:
    """A stored value the mirror could not read, and what was done about it, for the caller to report."""

    bad: BadRecord
    action: str


@dataclass(slots=True)
class Named:
    """The nodes a batch of entries names, to read again: their heartbeats, their holds."""

    nodes: set[str] = field(default_factory=set)
    holds: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.nodes or self.holds)


@dataclass(frozen=True, slots=True)
class NodesRead:
    """Nodes read again, by the server's clock at ``server_ms``: each node's stored heartbeat (None: none)
    with its TTL in ms (``PTTL``: -1 none, -2 gone), and each node's holds as ``HGETALL`` gives them."""

    server_ms: int
    nodes: dict[str, tuple[bytes | None, int]] = field(default_factory=dict)
    holds: dict[str, dict[Any, Any]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WholeRead:
    """The whole pool as read at ``server_ms``: where ``pool:changes`` stood just before (``last_id``), the
    pool's epoch, every node's heartbeat and TTL, the holds on each node that has any, and the ids in the
    indexes that were none (already ``Unread``)."""

    last_id: str
    server_ms: int
    epoch: str
    nodes: dict[str, tuple[bytes | None, int]]
    holds: dict[str, dict[Any, Any]]
    unread: list[Unread] = field(default_factory=list)


def stream_id(value: str) -> tuple[int, int]:
    ms, _, seq = value.partition("-")
    return int(ms), int(seq or 0)


class Mirror:
    """A worker's pool in memory: the pool as plans see it (``pool``), how far it has read ``pool:changes``
    (``last_id``), and when each node's heartbeat lapses, by the Redis server's clock. Fed by its owner
    (``worker.mirrored``) with what the store read; keeps it, and reads nothing itself."""

    def __init__(self, last_id: str, server_ms: int = 0, keys: Keys | None = None) -> None:
        self.keys = keys or Keys()
        """The keys the pool was read from: named in what the mirror could not read."""
        self.last_id = last_id
        self.read_at = 0.0
        """When it was last brought up to date (this process's monotonic clock)."""
        self.pool = Snapshot("0", {}, {})
        self.footprints: dict[str, NodeRecord] = {}
        """The node records read with footprints or engine conditions since the owner last took them
        (``worker.observations``, ``worker.ended``)."""
        self._lapses: dict[str, int] = {}
        """When each node's heartbeat lapses, as last heard."""
        self._due: list[tuple[int, int, str]] = []
        """A heap of lapses to check (when, in what order they came, the nodes' ids space-separated): a
        refreshed batch's is one entry, so that what a refresh costs is a dict entry set, not a heap entry
        moved. A node is in one at its latest lapse, and perhaps in earlier ones, passed over when due."""
        self._order = 0

    @staticmethod
    def whole(read: WholeRead, keys: Keys) -> tuple[Mirror, list[Unread]]:
        """A mirror of the whole pool as ``read``, and what of it could not be read."""
        mirror = Mirror(read.last_id, read.server_ms, keys)
        unread = list(read.unread)
        parsed: dict[str, ParsedNode] = {}
        raws = []
        for node_id, (raw, _ttl) in read.nodes.items():
            raws.append(raw)
            if not raw:
                continue
            try:
                parsed[node_id] = parse_cache.node(raw, keys.node(node_id))
            except BadRecord as e:
                unread.append(Unread(e, "left out of the pool"))
                continue
            if parsed[node_id].record.footprints or parsed[node_id].record.ended or parsed[node_id].record.engines:
                mirror.footprints[node_id] = parsed[node_id].record
            mirror.expires(node_id, NEVER)
        held = {n: mirror._holds(n, raw, unread) for n, raw in read.holds.items()}
        parse_cache.trim(raws)
        records = {i: p.record for i, p in parsed.items()}
        mirror.pool = Snapshot(read.epoch, records, held, parsed)
        return mirror, unread

    def note(self, changes: Iterable[PoolChange]) -> Named:
        """Note entries of ``pool:changes`` past ``last_id``, in order: what reading again could change in
        the mirror. A refresh moves its nodes' lapses now, taken from the entry as it comes, for a read per
        refresh is the cost of every heartbeat: a refresh forged short only has the node read again when it
        is due (``due``), one forged long keeps it in the mirror past its lapse, where a commit on it is
        refused as ``silent`` and the worker reads it again, as the sweep's entry for it does once it drops
        the node. A node the mirror does not hold (its record did not parse) stays out until a heartbeat
        changes it."""
        named = Named()
        pool = self.pool
        for change in changes:
            self.last_id = change.entry_id
            kind = change.kind
            if kind is ChangeKind.REFRESHES:
                if change.lapses_at_ms is not None:
                    self.refreshed(change.refreshed, change.lapses_at_ms)
            elif kind is ChangeKind.HEARTBEAT:
                named.nodes.add(change.node_id)
            elif kind is ChangeKind.GONE:
                if change.node_id in pool.records:
                    named.nodes.add(change.node_id)
            elif kind is ChangeKind.HOLD:
                said = parse_cache.hold(change.hold) if change.hold else None
                # the same as the mirror holds (this worker's own commit, read back): nothing to read again
                if pool.held.get(change.node_id, {}).get(change.hold_id) != said:
                    named.holds.add(change.node_id)
        return named

    def put(self, read: NodesRead) -> list[Unread]:
        """Put what was read again: each node as its key holds it (out of the pool when it has none that
        parses), each node's holds as its ``held:{id}`` holds them. What could not be read."""
        unread: list[Unread] = []
        pool = self.pool
        for node_id, (raw, ttl) in read.nodes.items():
            # read apart, the key may lapse between its GET and its PTTL (-2): it is gone
            parsed = None
            if raw is not None and ttl != -2:
                try:
                    parsed = parse_cache.node(raw, self.keys.node(node_id), keep=False)
                except BadRecord as e:
                    unread.append(Unread(e, "left out of the pool"))
            if parsed is None:
                self.drop(node_id)
                continue
            pool.put_node(node_id, parsed)
            if parsed.record.footprints or parsed.record.ended or parsed.record.engines:
                self.footprints[node_id] = parsed.record
            self.expires(node_id, NEVER)
        for node_id, raw_holds in read.holds.items():
            pool.put_holds(node_id, self._holds(node_id, raw_holds, unread))
        return unread

    def _holds(self, node_id: str, raw: dict[Any, Any], unread: list[Unread]) -> dict[str, Held]:
        holds, bad = read_holds(self.keys.held(node_id), raw)
        unread += (Unread(b, "its node's cards kept taken") for b in bad)
        return holds

    def copy(self) -> Mirror:
        """A mirror of its own, to bring up to date apart from this one."""
        other = Mirror(self.last_id, 0, self.keys)
        other.read_at = self.read_at
        other.pool = self.pool.copy()
        other._lapses = dict(self._lapses)
        other._due = list(self._due)
        other._order = self._order
        return other

    def continues(self, info: dict[str, Any]) -> bool:
        """Whether ``pool:changes`` (as ``XINFO STREAM`` describes it) still holds every change past
        ``last_id``: False when it was trimmed past it, or made anew (a Redis restart lost it)."""
        first = info.get("recorded-first-entry-id")
        if self.last_id == "0-0":
            return bool(info.get("entries-added", 0) == info.get("length", 0))
        if first is None:
            return False
        first_id = first.decode() if isinstance(first, bytes) else str(first)
        if first_id == "0-0":  # empty: it holds every change past ours only if none was added since
            last = info.get("last-generated-id") or "0-0"
            return stream_id(last.decode() if isinstance(last, bytes) else str(last)) <= stream_id(self.last_id)
        return stream_id(first_id) <= stream_id(self.last_id)

    def expires(self, node_id: str, at_ms: int) -> None:
        """A node's heartbeat lapses at ``at_ms`` (it published, or was read)."""
        self._lapses[node_id] = at_ms
        self._check_at(at_ms, node_id)

    def refreshed(self, node_ids: str, at_ms: int) -> None:
        """``expires`` for each node of ``node_ids`` (space-separated, as a stream entry names a call's
        refreshes) the mirror holds: a node it does not hold (its record did not parse) stays out until a
        heartbeat changes it."""
        lapses = self._lapses
        held = lapses.keys() & node_ids.split(" ")
        if held:
            lapses.update(dict.fromkeys(held, at_ms))
            self._check_at(at_ms, node_ids)

    def _check_at(self, at_ms: int, node_ids: str) -> None:
        self._order += 1
        due = self._due
        if len(due) > 2 * len(self._lapses) + LAPSE_HEAP_SLACK:
            # entries far in the future pile up (a writer of pool:changes picks the TTLs): kept to one a node
            due[:] = [(at, i, node_id) for i, (node_id, at) in enumerate(self._lapses.items())]
            heapq.heapify(due)
        heapq.heappush(due, (at_ms, self._order, node_ids))

    def due(self, server_ms: int) -> list[str]:
        """The nodes the mirror holds whose heartbeats lapse by ``server_ms`` as last heard. They stay in
        until their records are read again (``drop`` those that are gone): a lapse is heard from
        ``pool:changes``, which is no authority on it. Each is checked again at the next call, unless
        heard of meanwhile, so that none is lost should that read fail."""
        due, lapses, records = self._due, self._lapses, self.pool.records
        out: list[str] = []
        while due and due[0][0] <= server_ms:
            ids = heapq.heappop(due)[2].split(" ")
            # most were published since, and are due at their new lapse: the ones that were not are picked
            # out in C, a batch at a time (a node the mirror does not hold counts as never lapsing)
            out += compress(ids, map(server_ms.__ge__, map(lapses.get, ids, repeat(NEVER))))
        out = list(dict.fromkeys(out))
        for node_id in [n for n in out if n not in records]:
            del lapses[node_id]
        out = [node_id for node_id in out if node_id in records]
        if out:
            self._check_at(server_ms, " ".join(out))
        return out

    def drop(self, node_id: str) -> None:
        """A node with no live heartbeat, as read from its key: out of the pool, and no longer timed."""
        self._lapses.pop(node_id, None)
        self.pool.drop_node(node_id)

    def expire(self, server_ms: int) -> None:
        """Leave out every node whose heartbeat lapses by ``server_ms`` as last heard, without reading it
        again: for a mirror fed by hand."""
        for node_id in self.due(server_ms):
            self.drop(node_id)
