"""Reading the pool from Redis into a worker's mirror (``worker.mirror.Mirror``): the whole of it, what
changed since the mirror's last read (``pool:changes``), or some nodes afresh.

What a mirror holds of a node is what its keys hold (``node:{id}`` and its TTL, ``held:{id}``), never what
an entry of ``pool:changes`` says: a node agent may add to the stream (the heartbeat script writes it with
the caller's rights), so an entry is a reason to read the node it names again, and no more. The nodes a
batch of entries names are read in one round trip after it; an entry that would change nothing in the
mirror (a worker's own commit read back) names nothing, so a catch-up costs that round trip only when
something changed. A refresh's TTL is the one thing taken from an entry, as a hint of when to look again
(``_note_change``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import redis

from worker import constants as C
from worker import logs
from worker.errors import BadRecord
from worker.keys import HOLD_PATTERN, ID_MAX, ID_PATTERN
from worker.mirror import NEVER, Mirror
from worker.pool import ParsedNode, Snapshot, parse_cache
from worker.scripts import text

if TYPE_CHECKING:
    from worker.store import Store

log = logs.get_logger("modelplan.worker")


def full_read(store: Store) -> Mirror:
    """The whole pool, in two round trips, with where ``pool:changes`` stood just before it."""
    k = store.keys
    read = (k.pool_changes, k.nodes, k.epoch, k.held_nodes)
    for _ in range(len(read) + 1):
        with store.redis.pipeline(transaction=True) as pipe:
            pipe.xrevrange(k.pool_changes, count=1)
            pipe.zrange(k.nodes, 0, -1)
            pipe.get(k.epoch)
            pipe.smembers(k.held_nodes)
            pipe.time()
            replies = pipe.execute(raise_on_error=False)
        # a hint of another type (a hand-written SET on the change feed, say) is repaired rather than
        # failing every read after it; anything else is raised
        mistyped = [key for key, reply in zip(read, replies, strict=False) if _wrong_type(reply)]
        if not mistyped:
            break
        for key in mistyped:
            store.repair(key)
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    last, ids_raw, epoch, held_nodes, (secs, micros) = replies
    server_ms = secs * 1000 + micros // 1000
    cache = parse_cache
    ids = store.valid_ids(ids_raw, k.nodes, "a node id", "left out of the pool")
    held_ids = sorted(store.valid_ids(held_nodes, k.held_nodes, "a node id", "skipped"))
    with store.redis.pipeline(transaction=False) as pipe:
        if ids:
            node_keys = cache.node_keys_of(k, ids)
            pipe.mget(node_keys)
            for key in node_keys:
                pipe.pttl(key)
        for n in held_ids:
            pipe.hgetall(k.held(n))
        replies = pipe.execute()
    raws = replies.pop(0) if ids else []
    ttls, replies = replies[: len(ids)], replies[len(ids) :]
    parsed: dict[str, ParsedNode] = {}
    # with no entry to go on from, its place is just before this read: a stream made since (even one lost
    # again) then starts past it, and an empty one holds nothing past it only if nothing was added since
    mirror = Mirror(text(last[0][0]) if last else f"{server_ms - 1}-0", server_ms)
    for i, raw, ttl in zip(ids, raws, ttls, strict=True):
        if raw:
            try:
                parsed[i] = cache.node(raw, k.node(i))
            except BadRecord as e:
                store.report_bad(e, "left out of the pool")
                continue
            mirror.expires(i, server_ms + max(int(ttl), 0) if int(ttl) != -1 else NEVER)
    held = {n: store.holds_of(n, h) for n, h in zip(held_ids, replies, strict=True)}
    cache.trim(raws)
    records = {i: p.record for i, p in parsed.items()}
    mirror.pool = Snapshot(text(epoch) if epoch is not None else "0", records, held, parsed)
    return mirror


def _wrong_type(reply: Any) -> bool:
    return isinstance(reply, redis.ResponseError) and str(reply).startswith("WRONGTYPE")


def catch_up(store: Store, mirror: Mirror) -> bool:
    """Apply to ``mirror`` what ``pool:changes`` holds past it; False when it cannot (the stream was
    trimmed past it, or is gone), and says why in the log: the whole pool is read next."""
    with store.redis.pipeline(transaction=False) as pipe:
        ask_changes(pipe, store, mirror)
        replies = pipe.execute(raise_on_error=False)
    return apply_changes(store, mirror, replies)


CHANGE_REPLIES = 4
"""The replies ``ask_changes`` adds to a pipeline."""


def ask_changes(pipe: Any, store: Store, mirror: Mirror) -> None:
    """Queue on ``pipe`` the reads that bring ``mirror`` up to date (``CHANGE_REPLIES`` of them), so
    that a worker can read them in the same round trip as what else it needs."""
    k = store.keys
    pipe.xinfo_stream(k.pool_changes)
    pipe.xrange(k.pool_changes, min="(" + mirror.last_id, count=C.MIRROR_BATCH)
    pipe.get(k.epoch)
    pipe.time()


@dataclass(slots=True)
class Named:
    """The nodes a batch of entries names, to read again: their heartbeats, their holds."""

    nodes: set[str] = field(default_factory=set)
    holds: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.nodes or self.holds)


def apply_changes(store: Store, mirror: Mirror, replies: list[Any]) -> bool:
    """Apply the replies to ``ask_changes`` (read with ``raise_on_error=False``); False when the mirror
    cannot catch up from them, said in the log with why: the whole pool is read next."""
    info, entries, epoch, now = replies
    for reply in (epoch, now):
        if isinstance(reply, Exception):
            raise reply
    if isinstance(info, Exception):  # no stream: lost (a Redis restart, a delete) or not made yet
        if mirror.last_id != "0-0" or isinstance(entries, Exception) or entries:
            return _behind(mirror, "stream_gone")
        info = {}
    elif not mirror.continues(info):  # trimmed past its place, or made anew (a Redis restart, a delete)
        return _behind(mirror, _lost(info))
    if isinstance(entries, Exception):
        return _behind(mirror, "stream_gone")
    started = mirror.last_id
    try:
        return _apply(store, mirror, entries, now, epoch)
    except BaseException:
        # the entries past its place were noted, the nodes they name perhaps not read: all of it again
        mirror.last_id = started
        raise


def _apply(store: Store, mirror: Mirror, entries: list[Any], now: Any, epoch: Any) -> bool:
    named = Named()
    for entry_id, fields in entries:
        _note_change(mirror, text(entry_id), fields, named)
    for _ in range(C.POOL_CHANGES_MAXLEN // C.MIRROR_BATCH + 1):
        if len(entries) < C.MIRROR_BATCH:
            break
        # more wait: read on a page at a time, each checked against a trim that overtook the mirror
        # meanwhile, the nodes the page before named read in the same round trip
        with store.redis.pipeline(transaction=False) as pipe:
            pipe.xinfo_stream(store.keys.pool_changes)
            pipe.xrange(store.keys.pool_changes, min="(" + mirror.last_id, count=C.MIRROR_BATCH)
            pipe.time()
            asked = _ask_nodes(pipe, store, named)
            replies = pipe.execute()
        info, entries, now = replies[:3]
        _put_nodes(store, mirror, asked, replies[3:], now)
        if not mirror.continues(info):
            return _behind(mirror, _lost(info))
        named = Named()
        for entry_id, fields in entries:
            _note_change(mirror, text(entry_id), fields, named)
    else:
        return _behind(mirror, "far_behind")  # changes come faster than this worker applies them
    secs, micros = now
    named.nodes.update(mirror.due(secs * 1000 + micros // 1000))
    if named:
        with store.redis.pipeline(transaction=False) as pipe:
            asked = _ask_nodes(pipe, store, named)
            pipe.time()
            replies = pipe.execute()
        _put_nodes(store, mirror, asked, replies[:-1], replies[-1])
    # the epoch read with the entries, not one read since: capacity freed past the last entry applied is
    # not in the mirror yet, and a plan made on it must not pass for having seen that
    mirror.pool.epoch = text(epoch) if epoch is not None else "0"
    return True


def _lost(info: dict[str, Any]) -> str:
    return "stream_trimmed" if info.get("entries-added") != info.get("length") else "stream_new"


def _behind(mirror: Mirror, reason: str) -> bool:
    # rare (a worker far behind, the stream trimmed or lost), and each costs a whole read: worth a line; an
    # empty mirror (no stream yet, no node yet) costs nothing to read again
    if mirror.pool.records:
        log.info("pool_read_whole", reason=reason, after=mirror.last_id)
    return False


def reread_node(store: Store, mirror: Mirror, node_id: str) -> None:
    """Read one node's heartbeat and holds afresh into the mirror: a commit found the mirror wrong
    about it (a change that never went onto ``pool:changes``, such as a record written by hand)."""
    if not ID_PATTERN.fullmatch(node_id):
        return
    with store.redis.pipeline(transaction=False) as pipe:
        asked = _ask_nodes(pipe, store, Named({node_id}, {node_id}))
        pipe.time()
        replies = pipe.execute()
    _put_nodes(store, mirror, asked, replies[:-1], replies[-1])


def _ask_nodes(pipe: Any, store: Store, named: Named) -> tuple[list[str], list[str]]:
    """Queue on ``pipe`` the reads of what ``named`` names (its nodes' heartbeats with their TTLs, then
    its nodes' holds): the nodes asked for, for ``_put_nodes``."""
    k = store.keys
    nodes, holds = sorted(named.nodes), sorted(named.holds)
    if nodes:
        keys = [k.node(n) for n in nodes]
        pipe.mget(keys)
        for key in keys:
            pipe.pttl(key)
    for n in holds:
        pipe.hgetall(k.held(n))
    return nodes, holds


def _put_nodes(store: Store, mirror: Mirror, asked: tuple[list[str], list[str]], replies: list[Any], now: Any) -> None:
    """Put into ``mirror`` what ``_ask_nodes`` read: each node as its key holds it (out of the pool when
    it has none that parses), each node's holds as its ``held:{id}`` holds them."""
    nodes, holds = asked
    pool = mirror.pool
    if nodes:
        raws, ttls, replies = replies[0], replies[1 : len(nodes) + 1], replies[len(nodes) + 1 :]
        secs, micros = now
        server_ms = secs * 1000 + micros // 1000
        for node_id, raw, ttl in zip(nodes, raws, ttls, strict=True):
            # read apart, the key may lapse between its GET and its PTTL (-2): it is gone
            parsed = _parsed(store, node_id, raw) if raw is not None and ttl != -2 else None
            if parsed is None:
                mirror.drop(node_id)
                continue
            pool.put_node(node_id, parsed)
            mirror.expires(node_id, server_ms + ttl if ttl >= 0 else NEVER)
    for node_id, held in zip(holds, replies, strict=True):
        pool.put_holds(node_id, store.holds_of(node_id, held))


def _parsed(store: Store, node_id: str, raw: bytes) -> ParsedNode | None:
    try:
        return parse_cache.node(raw, store.keys.node(node_id), keep=False)
    except BadRecord as e:
        store.report_bad(e, "left out of the pool")
        return None


def _note_change(mirror: Mirror, entry_id: str, fields: dict[Any, Any], named: Named) -> None:
    """Note one entry of ``pool:changes``: the node it names, in ``named`` when reading it again could
    change the mirror."""
    mirror.last_id = entry_id
    if b"ns" in fields or (b"t" in fields and b"r" not in fields):
        # a call's refreshes (or, from an older modelplan, one): the nodes report what they did, and only
        # when their heartbeats lapse moves. Taken from the entry as it comes, for a read per refresh is
        # the cost of every heartbeat: a refresh forged short only has the node read again when it is due
        # (``Mirror.due``), one forged long keeps it in the mirror past its lapse, where a commit on it is
        # refused as ``silent`` and the worker reads it again (``planning._committed``), as the sweep's
        # entry for it does once it drops the node (``Store.forget_node_if_silent``). A node the mirror
        # does not hold (its record did not parse) stays out until a heartbeat changes it
        at = _lapse(entry_id, fields.get(b"t", b""))
        ids = fields.get(b"ns", fields.get(b"n", b""))
        if at is not None and len(ids) <= C.REFRESHES_MAX_BYTES:
            mirror.refreshed(ids.decode(errors="replace"), at)
        return
    node_id = _node_id(fields.get(b"n", b""))
    if node_id is None:
        return
    pool = mirror.pool
    if b"r" in fields:
        named.nodes.add(node_id)
    elif b"gone" in fields:
        if node_id in pool.records:
            named.nodes.add(node_id)
    elif b"h" in fields:
        hid = fields[b"h"].decode(errors="replace")
        if not HOLD_PATTERN.fullmatch(hid):
            return  # no modelplan script writes one: nothing to look at
        value = fields.get(b"v", b"")
        said = parse_cache.hold(value) if value else None
        # the same as the mirror holds (this worker's own commit, read back): nothing to read again
        if pool.held.get(node_id, {}).get(hid) != said:
            named.holds.add(node_id)


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
