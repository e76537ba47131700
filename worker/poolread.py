"""Reading the pool from Redis, for ``Store``: the whole of it, the entries of ``pool:changes`` past a
place, or some nodes afresh. Redis I/O only: what is read is handed back as values (``WholeRead``,
``NodesRead``, the stream's replies) for a mirror (``worker.mirror``) to apply; nothing here keeps a pool.

The reads of the changes (``ask_changes``) go onto a pipeline the caller sends with what else it needs, so
that a worker brings its mirror up to date in the same round trip as it reads a job or runs a script."""

from __future__ import annotations

from typing import Any

import redis

from worker import constants as C
from worker.errors import BadRecord
from worker.ids import ID_PATTERN
from worker.keys import Keys
from worker.mirror import Named, NodesRead, Unread, WholeRead
from worker.pool import parse_cache
from worker.scripts import text

CHANGE_REPLIES = 4
"""The replies ``ask_changes`` adds to a pipeline: the stream's ``XINFO``, its entries, the epoch, the
server's time."""


def server_ms(now: Any) -> int:
    """The server's clock, in ms, from a ``TIME`` reply."""
    secs, micros = now
    return int(secs) * 1000 + int(micros) // 1000


def member_text(member: Any) -> str:
    """An index's member as text, each byte that is not UTF-8 replaced (an id never has one)."""
    return member.decode(errors="replace") if isinstance(member, bytes) else str(member)


def ids_in(members: Any, index: str, what: str) -> tuple[list[str], list[BadRecord]]:
    """The members of an index (``index``, its key) that are ids, and a ``BadRecord`` for each that is not
    (``what``: the kind of id it should be), for the reader to report."""
    ids: list[str] = []
    bad: list[BadRecord] = []
    for member in members:
        value = member_text(member)
        if ID_PATTERN.fullmatch(value):
            ids.append(value)
        else:
            bad.append(BadRecord(index, f"not {what}", value.encode(), member=value))
    return ids, bad


class PoolReads:
    """The pool's reads, for ``Store``."""

    redis: redis.Redis
    keys: Keys

    def repair(self, key: str) -> None:
        raise NotImplementedError

    def read_whole(self) -> WholeRead:
        """The whole pool, in two round trips, with where ``pool:changes`` stood just before it."""
        k = self.keys
        read = (k.pool_changes, k.nodes, k.epoch, k.held_nodes)
        for _ in range(len(read) + 1):
            with self.redis.pipeline(transaction=True) as pipe:
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
                self.repair(key)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        last, ids_raw, epoch, held_nodes, now = replies
        at = server_ms(now)
        ids, bad_ids = ids_in(ids_raw, k.nodes, "a node id")
        held_ids, bad_held = ids_in(held_nodes, k.held_nodes, "a node id")
        held_ids.sort()
        unread = [Unread(b, "left out of the pool") for b in bad_ids] + [Unread(b, "skipped") for b in bad_held]
        with self.redis.pipeline(transaction=False) as pipe:
            if ids:
                node_keys = parse_cache.node_keys_of(k, ids)
                pipe.mget(node_keys)
                for key in node_keys:
                    pipe.pttl(key)
            for n in held_ids:
                pipe.hgetall(k.held(n))
            replies = pipe.execute()
        raws = replies.pop(0) if ids else []
        ttls, replies = replies[: len(ids)], replies[len(ids) :]
        # with no entry to go on from, its place is just before this read: a stream made since (even one lost
        # again) then starts past it, and an empty one holds nothing past it only if nothing was added since
        return WholeRead(
            last_id=text(last[0][0]) if last else f"{at - 1}-0",
            server_ms=at,
            epoch=text(epoch) if epoch is not None else "0",
            nodes={i: (raw, int(ttl)) for i, raw, ttl in zip(ids, raws, ttls, strict=True)},
            holds=dict(zip(held_ids, replies, strict=True)),
            unread=unread,
        )

    def ask_changes(self, pipe: Any, since: str) -> None:
        """Queue on ``pipe`` the reads of what ``pool:changes`` holds past ``since`` (``CHANGE_REPLIES`` of
        them), so that a worker can read them in the same round trip as what else it needs."""
        k = self.keys
        pipe.xinfo_stream(k.pool_changes)
        pipe.xrange(k.pool_changes, min="(" + since, count=C.MIRROR_BATCH)
        pipe.get(k.epoch)
        pipe.time()

    def read_page(self, since: str, named: Named) -> tuple[Any, list[Any], NodesRead]:
        """The next page of ``pool:changes`` past ``since`` (with the stream's ``XINFO`` and the server's
        time), and what ``named`` names, read in the same round trip."""
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.xinfo_stream(self.keys.pool_changes)
            pipe.xrange(self.keys.pool_changes, min="(" + since, count=C.MIRROR_BATCH)
            pipe.time()
            asked = self._ask_nodes(pipe, named)
            replies = pipe.execute()
        info, entries, now = replies[:3]
        return info, entries, self._nodes_read(asked, replies[3:], now)

    def read_named(self, named: Named) -> NodesRead:
        """What ``named`` names: its nodes' heartbeats with their TTLs, and its nodes' holds."""
        with self.redis.pipeline(transaction=False) as pipe:
            asked = self._ask_nodes(pipe, named)
            pipe.time()
            replies = pipe.execute()
        return self._nodes_read(asked, replies[:-1], replies[-1])

    def _ask_nodes(self, pipe: Any, named: Named) -> tuple[list[str], list[str]]:
        """Queue on ``pipe`` the reads of what ``named`` names (its nodes' heartbeats with their TTLs, then
        its nodes' holds): the nodes asked for, for ``_nodes_read``."""
        k = self.keys
        nodes, holds = sorted(named.nodes), sorted(named.holds)
        if nodes:
            keys = [k.node(n) for n in nodes]
            pipe.mget(keys)
            for key in keys:
                pipe.pttl(key)
        for n in holds:
            pipe.hgetall(k.held(n))
        return nodes, holds

    @staticmethod
    def _nodes_read(asked: tuple[list[str], list[str]], replies: list[Any], now: Any) -> NodesRead:
        nodes, holds = asked
        read = NodesRead(server_ms(now))
        if nodes:
            raws, ttls, replies = replies[0], replies[1 : len(nodes) + 1], replies[len(nodes) + 1 :]
            read.nodes.update(zip(nodes, zip(raws, map(int, ttls), strict=True), strict=True))
        read.holds.update(zip(holds, replies, strict=True))
        return read


def _wrong_type(reply: Any) -> bool:
    return isinstance(reply, redis.ResponseError) and str(reply).startswith("WRONGTYPE")
