"""A worker's mirror of the pool: the pool as plans see it (``worker.pool.Snapshot``), how far it has read
``pool:changes``, and when each node's heartbeat lapses, by the Redis server's clock. Pure: ``worker.poolread``
reads Redis and feeds it; this only keeps it."""

from __future__ import annotations

import heapq
from itertools import compress, repeat
from typing import Any

from worker.pool import Snapshot

NEVER = 1 << 62
"""When a node with no TTL lapses (a record written by hand): never."""
LAPSE_HEAP_SLACK = 10_000
"""Lapses to check kept past two a node before they are made one a node again: legitimately a few per
node (its last read, its batches' refreshes), all due within a TTL."""


def stream_id(value: str) -> tuple[int, int]:
    ms, _, seq = value.partition("-")
    return int(ms), int(seq or 0)


class Mirror:
    """A worker's pool in memory: the pool as plans see it (``pool``), how far it has read ``pool:changes``
    (``last_id``), and when each node's heartbeat lapses, by the Redis server's clock. ``worker.store``
    reads Redis and feeds it; this only keeps it."""

    def __init__(self, last_id: str, server_ms: int) -> None:
        self.last_id = last_id
        self.read_at = 0.0
        """When it was last brought up to date (this process's monotonic clock)."""
        self.pool = Snapshot("0", {}, {})
        self._lapses: dict[str, int] = {}
        """When each node's heartbeat lapses, as last heard."""
        self._due: list[tuple[int, int, str]] = []
        """A heap of lapses to check (when, in what order they came, the nodes' ids space-separated): a
        refreshed batch's is one entry, so that what a refresh costs is a dict entry set, not a heap entry
        moved. A node is in one at its latest lapse, and perhaps in earlier ones, passed over when due."""
        self._order = 0

    def copy(self) -> Mirror:
        """A mirror of its own, to bring up to date apart from this one."""
        other = Mirror(self.last_id, 0)
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
