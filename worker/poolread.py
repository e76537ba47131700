"""Reading the pool from Redis into a worker's mirror (``worker.mirror.Mirror``): the whole of it, what
changed since the mirror's last read (``pool:changes``), or one node afresh."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import redis

from worker import constants as C
from worker import logs
from worker.errors import BadRecord
from worker.keys import ID_PATTERN
from worker.mirror import NEVER, Mirror
from worker.pool import ParsedNode, Snapshot, parse_cache
from worker.records import NodeRecord, read_record
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


def apply_changes(store: Store, mirror: Mirror, replies: list[Any]) -> bool:
    """Apply the replies to ``ask_changes`` (read with ``raise_on_error=False``); False when the mirror
    cannot catch up from them, said in the log with why: the whole pool is read next."""
    info, entries, epoch, now = replies
    for reply in (epoch, now):
        if isinstance(reply, Exception):
            raise reply
    secs, micros = now
    if isinstance(info, Exception):  # no stream: lost (a Redis restart, a delete) or not made yet
        if mirror.last_id != "0-0" or isinstance(entries, Exception) or entries:
            return _behind(mirror, "stream_gone")
        info = {}
    elif not mirror.continues(info):  # trimmed past its place, or made anew (a Redis restart, a delete)
        return _behind(mirror, _lost(info))
    if isinstance(entries, Exception):
        return _behind(mirror, "stream_gone")
    for entry_id, fields in entries:
        _apply_change(store, mirror, text(entry_id), fields)
    for _ in range(C.POOL_CHANGES_MAXLEN // C.MIRROR_BATCH + 1):
        if len(entries) < C.MIRROR_BATCH:
            break
        # more wait: read on a page at a time, each checked against a trim that overtook the mirror meanwhile
        with store.redis.pipeline(transaction=False) as pipe:
            pipe.xinfo_stream(store.keys.pool_changes)
            pipe.xrange(store.keys.pool_changes, min="(" + mirror.last_id, count=C.MIRROR_BATCH)
            pipe.time()
            info, entries, (secs, micros) = pipe.execute()
        if not mirror.continues(info):
            return _behind(mirror, _lost(info))
        for entry_id, fields in entries:
            _apply_change(store, mirror, text(entry_id), fields)
    else:
        return _behind(mirror, "far_behind")  # changes come faster than this worker applies them
    mirror.expire(secs * 1000 + micros // 1000)
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
    k = store.keys
    with store.redis.pipeline(transaction=True) as pipe:
        pipe.get(k.node(node_id))
        pipe.pttl(k.node(node_id))
        pipe.hgetall(k.held(node_id))
        pipe.time()
        raw, ttl, held, (secs, micros) = pipe.execute()
    pool = mirror.pool
    for hid in list(pool.held.get(node_id, {})):
        pool.set_hold(node_id, hid, None)
    for hid, h in store.holds_of(node_id, held).items():
        pool.set_hold(node_id, hid, h)
    try:
        parsed = parse_cache.node(raw, k.node(node_id)) if raw else None
    except BadRecord as e:
        store.report_bad(e, "left out of the pool")
        parsed = None
    if parsed is None:
        pool.drop_node(node_id)
        return
    pool.put_node(node_id, parsed)
    server_ms = secs * 1000 + micros // 1000
    mirror.expires(node_id, server_ms + int(ttl) if int(ttl) >= 0 else NEVER)


def _apply_change(store: Store, mirror: Mirror, entry_id: str, fields: dict[Any, Any]) -> None:
    k, pool = store.keys, mirror.pool
    mirror.last_id = entry_id
    if b"ns" in fields:
        # a call's refreshes: the nodes report what they did, and only when their heartbeats lapse moves. A
        # node the mirror does not hold (its record did not parse) stays out until a heartbeat changes it
        lapse = int(entry_id.split("-", 1)[0]) + int(text(fields.get(b"t", b"0")) or 0)
        mirror.refreshed(text(fields[b"ns"]), lapse)
        return
    node_id = text(fields.get(b"n", b""))
    if not ID_PATTERN.fullmatch(node_id):
        return
    if b"r" in fields:
        try:
            parsed = ParsedNode.of(read_record(NodeRecord, fields[b"r"], k.node(node_id)))
        except BadRecord as e:
            store.report_bad(e, "left out of the pool")
            pool.drop_node(node_id)
            return
        pool.put_node(node_id, parsed)
        mirror.expires(node_id, int(entry_id.split("-", 1)[0]) + int(text(fields.get(b"t", b"0")) or 0))
    elif b"t" in fields:
        # a refresh: the node reports what it did, and only when its heartbeat lapses moves. A node the
        # mirror does not hold (its record did not parse) stays out until a heartbeat that changes it
        if node_id in pool.records:
            mirror.expires(node_id, int(entry_id.split("-", 1)[0]) + int(text(fields[b"t"]) or 0))
    elif b"gone" in fields:
        pool.drop_node(node_id)
    elif b"h" in fields:
        value = fields.get(b"v", b"")
        held = store.holds_of(node_id, {fields[b"h"]: value}) if value else {text(fields[b"h"]): None}
        for hid, h in held.items():
            pool.set_hold(node_id, hid, h)
