"""The pool as plans see it, in memory: each live node as its agent reports it, the holds on it, and what
a plan may count as free. Pure: the store reads Redis and a worker's mirror (``worker.mirror``) feeds what
it read in here; this module only holds and adjusts it.

The pool has four types, each for one thing: ``planner.index.PoolIndex``, nodes indexed by what a plan
asks of them; ``planner.view.PoolView``, an index with a few nodes seen otherwise, which is what the
planner reads; ``Snapshot`` (here), the nodes with their holds, which keeps the index and gives each job
its view; ``worker.mirror.Mirror``, a snapshot kept up to date from the change stream.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from planner import PoolNode
from planner.index import PoolIndex
from planner.view import PoolView
from worker import constants as C
from worker.errors import BadRecord
from worker.ids import HOLD_PATTERN, job_of_hold
from worker.keys import Keys
from worker.records import read_record
from worker.reports import NodeRecord


@dataclass(frozen=True, slots=True)
class Held:
    """One hold on one node, as stored in ``held:{node}``."""

    gpus: int
    host_gb: float
    boot_id: str
    nominated: bool = False
    unreadable: str = ""
    api_key: str = field(default="", compare=False)
    """The API key its engine is started with (``worker.apikeys``); "" where none was given. Not compared:
    what a plan counts of a hold is its cards and memory, and a worker's mirror stages its own commits
    without it (read back, they are the same hold)."""
    """Why the stored hold could not be read, if it could not: it then counts as holding every card and
    all host memory of its node (``UNREADABLE``), since which it held is unknown."""

    @staticmethod
    def parse(value: bytes | str) -> Held:
        """A stored hold; ``UNREADABLE`` (with the reason) for one that does not parse, or that is longer
        than ``HOLD_MAX_BYTES`` (not parsed at all)."""
        if len(value) > C.HOLD_MAX_BYTES:
            why = f"hold is {len(value)} bytes, past the {C.HOLD_MAX_BYTES} a hold may have"
            return replace(UNREADABLE, unreadable=why)
        try:
            d = json.loads(value)
            gpus, host_gb = d["gpus"], d["host_gb"]
            if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (gpus, host_gb)):
                raise ValueError("gpus and host_gb must be numbers")
            if not (0 <= gpus <= UNREADABLE.gpus and 0 <= host_gb <= UNREADABLE.host_gb):
                raise ValueError("gpus or host_gb out of range")
            key = d.get("api_key", "")
            if not (isinstance(key, str) and key.isalnum() and len(key) <= C.API_KEY_MAX) and key != "":
                raise ValueError("api_key must be letters and digits")
            return Held(
                int(gpus), float(host_gb), str(d.get("boot_id", "")), bool(d.get("nominated", False)), api_key=key
            )
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as e:
            why = str(e) if isinstance(e, ValueError) and not isinstance(e, json.JSONDecodeError) else "not JSON"
            return replace(UNREADABLE, unreadable=f"hold does not parse ({why[:80]})")


UNREADABLE = Held(gpus=1 << 20, host_gb=float(1 << 40), boot_id="", unreadable="hold does not parse")
"""A hold that cannot be read: more cards and memory than any node has, so none of its node counts free."""


def read_holds(key: str, raw: dict[Any, Any]) -> tuple[dict[str, Held], list[BadRecord]]:
    """A node's holds by id, as ``HGETALL`` of its ``held:{id}`` (``key``) gives them, and the ones that
    could not be read. One that does not parse, or whose id is not a hold id, is kept as ``UNREADABLE``:
    none of the node's cards count as free while it is there."""
    out: dict[str, Held] = {}
    bad: list[BadRecord] = []
    for name, value in raw.items():
        hid = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
        held = parse_cache.hold(value)
        if not HOLD_PATTERN.fullmatch(hid):
            held = replace(UNREADABLE, unreadable="not a hold id")
        if held.unreadable:
            bad.append(BadRecord(key, held.unreadable, bytes(value), member=hid))
        out[hid] = held
    return out, bad


@dataclass(frozen=True, slots=True)
class HoldSpec:
    """A hold to write: on ``node_id``, named ``hold_id``."""

    node_id: str
    hold_id: str
    gpus: int = 0
    host_gb: float = 0.0
    nominated: bool = False
    api_key: str = ""
    """What the hold's engine wants of its callers (``worker.apikeys``); "" for a nomination."""


@dataclass(frozen=True, slots=True)
class ParsedNode:
    """A node's stored heartbeat, validated once, with what plans read of it."""

    record: NodeRecord
    reported: PoolNode
    """The node as its agent reports it, before any hold is counted."""
    started: frozenset[str]

    @staticmethod
    def of(record: NodeRecord) -> ParsedNode:
        return ParsedNode(record, record.to_pool_node(), frozenset(record.started))


class ParseCache:
    """Parsed values by the raw bytes they were parsed from, kept by a process across snapshots.

    A worker reads every node's heartbeat for every plan, but a node's stored bytes change only when it
    publishes (every 5 s), so nearly every read is of bytes already validated: the same bytes parse to the
    same value, so the cached one is exact. Kept to about the size of the latest reads, so a pool that
    shrinks does not keep what it lost; and bounded whatever is written to the pool's keys between reads:
    no more node records than twice the pool and ``PARSE_CACHE_SLACK``, each at most
    ``PARSE_CACHE_ENTRY_MAX_BYTES`` (a longer one is parsed each time, not kept), and no more holds than
    ``PARSE_CACHE_SLACK``, each at most ``HOLD_MAX_BYTES`` (a longer one is not even parsed). A cache that
    reaches its bound is emptied: the next reads fill it again."""

    def __init__(self) -> None:
        self.nodes: dict[bytes, ParsedNode] = {}
        self.bad_nodes: dict[bytes, BadRecord] = {}
        self.holds: dict[bytes, Held] = {}
        self.node_keys: dict[str, dict[str, str]] = {}
        """``Keys.node`` of each node id, by prefix: the key checks its id, and a pool is read often."""
        self.pool_size = 0
        """Nodes in the pool being read, or last read whole: the node cache keeps twice that and slack."""

    def node_keys_of(self, keys: Keys, ids: Sequence[str]) -> list[str]:
        """The keys of a whole read's nodes (``ids``): the read's start, which sizes the node cache."""
        self.pool_size = max(self.pool_size, len(ids))
        known = self.node_keys.setdefault(keys.prefix, {})
        if len(known) > 2 * len(ids) + C.PARSE_CACHE_SLACK:
            known.clear()
        out = []
        for i in ids:
            key = known.get(i)
            if key is None:
                key = known[i] = keys.node(i)
            out.append(key)
        return out

    def node(self, raw: bytes, key: str, *, keep: bool = True) -> ParsedNode:
        """The node a stored heartbeat holds; ``BadRecord`` for one that does not parse (remembered, so
        that it is not parsed again while its bytes stay the same). ``keep=False``: what was not cached
        is parsed and not kept, for reads between two whole reads (which trim the cache): a changed
        heartbeat's bytes are seldom read again."""
        got = self.nodes.get(raw)
        if got is not None:
            return got
        bad = self.bad_nodes.get(raw)
        if bad is not None:
            raise BadRecord(key, bad.what, raw, newer=bad.newer)
        keep = keep and len(raw) <= C.PARSE_CACHE_ENTRY_MAX_BYTES
        try:
            got = ParsedNode.of(read_record(NodeRecord, raw, key))
        except BadRecord as e:
            if keep:
                if len(self.bad_nodes) >= C.PARSE_CACHE_SLACK:
                    self.bad_nodes.clear()
                self.bad_nodes[raw] = e
            raise
        if keep:
            if len(self.nodes) >= 2 * self.pool_size + C.PARSE_CACHE_SLACK:
                self.nodes.clear()
            self.nodes[raw] = got
        return got

    def hold(self, raw: bytes) -> Held:
        got = self.holds.get(raw)
        if got is None:
            got = Held.parse(raw)
            if not (got.unreadable and len(raw) > C.HOLD_MAX_BYTES):  # not parsed: nothing to keep
                if len(self.holds) >= C.PARSE_CACHE_SLACK:
                    self.holds.clear()
                self.holds[raw] = got
        return got

    def trim(self, node_raws: Sequence[bytes | None]) -> None:
        """Drop what the latest read no longer holds once the cache has grown well past it."""
        live = self.pool_size = len(node_raws)
        if len(self.nodes) > 2 * live + C.PARSE_CACHE_SLACK:
            self.nodes = {raw: self.nodes[raw] for raw in node_raws if raw is not None and raw in self.nodes}
        if len(self.holds) > C.PARSE_CACHE_SLACK:
            self.holds = {}
        if len(self.bad_nodes) > C.PARSE_CACHE_SLACK:
            self.bad_nodes = {}


parse_cache = ParseCache()
"""This process's parse cache, kept across snapshots."""


class Snapshot:
    """The pool as plans see it: each live node, and what is free on it. For: handing each plan its view of
    the pool (``nodes_for``), counting a commit in it as soon as it is made (``apply``, ``stage``), and
    being copied to plan on as if something had happened (``copy``).

    Free is what the agent reports less what placed jobs hold there that the agent does not show yet
    (holds not in its ``started``), and less the cards nominated for a waiting job: a card is never
    counted free twice, and a card taken by something outside modelplan stays taken. A job sees its own
    nomination as free for it (``nodes_for``).

    A plan reads the pool once per attempt and a worker plans hundreds of times a second, so what does not
    change between plans is kept rather than worked out per plan: the nodes as any plan sees them, in a
    ``PoolIndex`` (indexed once, on the first plan, then changed a node at a time as heartbeats, holds and
    commits change them), and each job's nominated holds. A plan for a job is a view of that index with
    only the job's own nominated nodes seen otherwise, so it costs the kinds of node, not the nodes.
    """

    __slots__ = ("_nominated", "_plain", "_reported", "_started", "epoch", "held", "records")

    def __init__(
        self,
        epoch: str,
        records: dict[str, NodeRecord],
        held: dict[str, dict[str, Held]],
        parsed: dict[str, ParsedNode] | None = None,
    ) -> None:
        self.epoch = epoch
        self.records = records
        self.held = held
        if parsed is None:
            parsed = {node_id: ParsedNode.of(r) for node_id, r in records.items()}
        self._reported = {node_id: p.reported for node_id, p in parsed.items()}
        self._started = {node_id: p.started for node_id, p in parsed.items()}
        self._plain: PoolIndex | None = None
        self._nominated: dict[str, dict[tuple[str, str], int]] = {}
        """Each job's nominated holds: cards by (node, hold id)."""
        for node_id, holds in held.items():
            for hid, h in holds.items():
                self._note(node_id, hid, None, h)

    @property
    def nodes(self) -> list[PoolNode]:
        """The nodes as any plan sees them (no job's nomination counted as free)."""
        if self._plain is not None:
            return list(self._plain)
        return [self._plain_node(node_id) for node_id in self._reported]

    def nodes_for(self, job_id: str | None) -> PoolView:
        """The nodes as a plan for ``job_id`` sees them (its own nomination counted as free)."""
        pool = self._index()
        mine = self._nominated.get(job_id or "")
        if not mine:
            return PoolView(pool)
        nodes = {node_id for node_id, _ in mine} & self._reported.keys()
        return PoolView(pool, (self._pool_node(node_id, job_id) for node_id in nodes))

    def held_for_others(self, job_id: str) -> dict[str, int]:
        """Cards nominated on each node for jobs other than ``job_id``."""
        out: dict[str, int] = {}
        for job, holds in self._nominated.items():
            if job != job_id:
                for (node_id, _), gpus in holds.items():
                    out[node_id] = out.get(node_id, 0) + gpus
        return {node_id: gpus for node_id, gpus in out.items() if gpus}

    def _note(self, node_id: str, hid: str, old: Held | None, new: Held | None) -> None:
        """Keep the nominations as a hold on ``node_id`` goes from ``old`` to ``new`` (None: none)."""
        if old is not None and old.nominated:
            job = job_of_hold(hid)
            holds = self._nominated[job]
            del holds[(node_id, hid)]
            if not holds:
                del self._nominated[job]
        if new is not None and new.nominated:
            self._nominated.setdefault(job_of_hold(hid), {})[(node_id, hid)] = new.gpus

    def prepare(self) -> None:
        """Index the nodes now rather than at the first plan: a worker that has just read the whole pool
        (at 100,000 nodes indexing takes a fraction of a second, not to be paid by a waiting job)."""
        self._index()

    def _index(self) -> PoolIndex:
        if self._plain is None:
            self._plain = PoolIndex(self._plain_node(node_id) for node_id in self._reported)
        return self._plain

    def _plain_node(self, node_id: str) -> PoolNode:
        return self._pool_node(node_id, None) if self.held.get(node_id) else self._reported[node_id]

    def _replot(self, node_id: str) -> None:
        """Count anew what is free on ``node_id`` for any plan, where the nodes are indexed already."""
        if self._plain is not None and node_id in self._reported:
            self._plain.put(self._pool_node(node_id, None))

    def _pool_node(self, node_id: str, job_id: str | None) -> PoolNode:
        node = self._reported[node_id]
        started = self._started[node_id]
        unseen = [
            h
            for hid, h in self.held.get(node_id, {}).items()
            if hid not in started and not (h.nominated and job_of_hold(hid) == job_id)
        ]
        if not unseen:
            return node
        free = max(0, node.free_gpus - sum(h.gpus for h in unseen))
        host_free = max(0, int(node.host_free_gb - sum(h.host_gb for h in unseen)))
        return replace(node, free_gpus=free, host_free_gb=host_free)

    def apply(self, written: Sequence[HoldSpec], cleared: Sequence[tuple[str, str, str]]) -> None:
        """Count a commit just made, so that the next plan against this snapshot sees it."""
        touched: set[str] = set()
        for node_id, hid, _ in cleared:
            self._note(node_id, hid, self.held.get(node_id, {}).pop(hid, None), None)
            touched.add(node_id)
        for h in written:
            rec = self.records.get(h.node_id)
            boot = rec.boot_id if rec else ""
            holds = self.held.setdefault(h.node_id, {})
            new = Held(h.gpus, h.host_gb, boot, h.nominated)
            self._note(h.node_id, h.hold_id, holds.get(h.hold_id), new)
            holds[h.hold_id] = new
            touched.add(h.node_id)
        for node_id in touched:
            self._replot(node_id)

    def stage(self, written: Sequence[HoldSpec], cleared: Sequence[tuple[str, str, str]]) -> Staged:
        """``apply`` a commit about to be sent, so that the plans made before it is answered see it; what
        ``unstage`` needs to take it back if it is refused."""
        before = [(n, hid, self.held.get(n, {}).get(hid)) for n, hid, _ in cleared]
        before += [(h.node_id, h.hold_id, self.held.get(h.node_id, {}).get(h.hold_id)) for h in written]
        self.apply(written, cleared)
        return before

    def unstage(self, before: Staged) -> None:
        """Take back a commit staged and then refused: each hold it touched as it was."""
        for node_id, hid, held in reversed(before):
            self.set_hold(node_id, hid, held)

    # --- kept up to date from the pool's change stream (``worker.mirror``) ----------------------------------

    def copy(self) -> Snapshot:
        """A snapshot of its own, to plan on as if something had happened that has not yet."""
        parsed = {n: ParsedNode(self.records[n], self._reported[n], self._started[n]) for n in self.records}
        snap = Snapshot(self.epoch, dict(self.records), {n: dict(h) for n, h in self.held.items()}, parsed)
        snap._plain = self._plain.copy() if self._plain is not None else None
        return snap

    def put_node(self, node_id: str, parsed: ParsedNode) -> None:
        """A node's new heartbeat: it joins the pool, or what it reports changes."""
        old = self.records.get(node_id)
        if old is parsed.record or old == parsed.record:
            return  # read again and found as it was
        self.records[node_id] = parsed.record
        self._reported[node_id] = parsed.reported
        self._started[node_id] = parsed.started
        self._replot(node_id)

    def drop_node(self, node_id: str) -> None:
        """A node that left the pool (its heartbeat lapsed, or it was dropped from the index)."""
        if node_id not in self.records:
            return
        del self.records[node_id], self._reported[node_id], self._started[node_id]
        if self._plain is not None:
            self._plain.drop(node_id)

    def put_holds(self, node_id: str, holds: dict[str, Held]) -> None:
        """Every hold on a node, as read from ``held:{node}``: the ones not there any more are cleared."""
        old = self.held.get(node_id, {})
        if old == holds:
            return
        for hid in old.keys() - holds.keys():
            self._note(node_id, hid, old[hid], None)
        for hid, h in holds.items():
            if old.get(hid) != h:
                self._note(node_id, hid, old.get(hid), h)
        if holds:
            self.held[node_id] = dict(holds)
        else:
            self.held.pop(node_id, None)
        self._replot(node_id)

    def set_hold(self, node_id: str, hold_id: str, held: Held | None) -> None:
        """A hold written (or, with None, cleared) on a node."""
        holds = self.held.setdefault(node_id, {})
        old = holds.get(hold_id)
        if held is not None and old == held:
            return  # as counted already: a worker's own commit, read back from the stream
        if held is None:
            holds.pop(hold_id, None)
        else:
            holds[hold_id] = held
        if not holds:
            del self.held[node_id]
        self._note(node_id, hold_id, old, held)
        self._replot(node_id)


Staged = list[tuple[str, str, Held | None]]
"""What a staged commit changed: each hold it touched (node, hold id) with what it was before."""
