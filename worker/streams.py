"""The request streams a worker reads: the shared ``requests`` and each registered client's own.

The registered clients are the members of ``clients`` (``modelplan client add``), read again every
``CLIENTS_REFRESH_S``; each stream is read as the consumer group ``workers``, made (with the stream) the
first time a worker reads it. One ``XREADGROUP`` reads them all, at most ``REQUEST_BATCH`` entries a
stream, so that a client filling its own stream does not hold back the others'.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import redis

from worker import constants as C
from worker import logs
from worker.errors import BadId
from worker.ids import check_client_id
from worker.keys import Keys
from worker.scripts import text

log = logs.get_logger("modelplan.requests")


@dataclass(frozen=True)
class Source:
    """A request stream, and the client its entries act for (None: the shared stream, no client)."""

    stream: str
    client_id: str | None = None


Taken = tuple[Source, str, dict[Any, Any]]
"""An entry taken off a stream: where from, its id, its fields."""


class Streams:
    """One worker's reading of the request streams, as a consumer of the group ``workers``."""

    def __init__(self, client: redis.Redis, keys: Keys, name: str) -> None:
        self.redis, self.keys, self.name = client, keys, name
        self.shared = Source(keys.requests)
        self._sources: dict[str, Source] = {self.shared.stream: self.shared}
        self._ready: set[str] = set()
        """Streams whose group this worker has made, or found made."""
        self._refreshed = -math.inf
        self._reclaimed = -math.inf

    def sources(self) -> list[Source]:
        """Every stream to read, the registered clients read again when due, each with its group."""
        if time.monotonic() - self._refreshed >= C.CLIENTS_REFRESH_S:
            self.refresh()
        missing = [s for s in self._sources.values() if s.stream not in self._ready]
        if missing:
            self._make_groups(missing)
        return list(self._sources.values())

    def refresh(self) -> None:
        """Read the registered clients again: a client added is read from now on, one removed no longer."""
        try:
            members: Any = self.redis.smembers(self.keys.clients)
        except redis.ResponseError as e:  # not a set: the shared stream and the clients known are read on
            log.warning("clients_unreadable", key=self.keys.clients, error=str(e)[:200], worker=self.name)
            self._refreshed = time.monotonic()
            return
        sources = {self.shared.stream: self.shared}
        for member in sorted(text(m) for m in members):
            try:
                source = Source(self.keys.client_requests(check_client_id(member)), member)
            except BadId:
                log.warning("client_skipped", member=member[:80], reason="not a client id")
                continue
            sources[source.stream] = source
        added = sorted(s.client_id or "" for k, s in sources.items() if k not in self._sources)
        if added:
            log.info("clients_added", clients=added, worker=self.name)
        self._sources = sources
        self._ready &= set(sources)
        self._refreshed = time.monotonic()

    def _make_groups(self, sources: list[Source]) -> None:
        """Make each stream's group from the stream's start (entries appended before any worker read it
        are carried out too), and the stream with it."""
        with self.redis.pipeline(transaction=False) as pipe:
            for s in sources:
                pipe.xgroup_create(s.stream, C.REQUEST_GROUP, id="0", mkstream=True)
            replies = pipe.execute(raise_on_error=False)
        for s, reply in zip(sources, replies, strict=True):
            if isinstance(reply, Exception) and "BUSYGROUP" not in str(reply):
                raise reply
            self._ready.add(s.stream)

    def read(self, block_ms: int | None) -> list[Taken]:
        """New entries of every stream, waiting up to ``block_ms`` for one (None: not at all)."""
        sources = self.sources()
        by_stream = {s.stream: s for s in sources}
        try:
            got: Any = self.redis.xreadgroup(
                C.REQUEST_GROUP,
                self.name,
                {s.stream: ">" for s in sources},
                count=C.REQUEST_BATCH,
                block=block_ms,
            )
        except redis.ResponseError as e:
            if "NOGROUP" not in str(e):
                raise
            # a stream was deleted with its group (or its client removed): the clients are read again and
            # the groups made again next time
            self._ready.clear()
            self._refreshed = -math.inf
            return []
        return [(by_stream[text(key)], text(i), fields or {}) for key, entries in got or () for i, fields in entries]

    def stale(self) -> list[tuple[Source, str, int]]:
        """Entries another worker took and left unacknowledged past the claim time, with how many times
        each was handed out: looked for at most every ``REQUEST_RECLAIM_S``, in one round trip."""
        if time.monotonic() - self._reclaimed < C.REQUEST_RECLAIM_S:
            return []
        self._reclaimed = time.monotonic()
        sources = [s for s in self.sources() if s.stream in self._ready]
        with self.redis.pipeline(transaction=False) as pipe:
            for s in sources:
                pipe.xpending_range(
                    s.stream, C.REQUEST_GROUP, min="-", max="+", count=C.REQUEST_BATCH, idle=C.REQUEST_CLAIM_IDLE_MS
                )
            replies = pipe.execute(raise_on_error=False)
        out = []
        for s, reply in zip(sources, replies, strict=True):
            if isinstance(reply, Exception):
                self._ready.discard(s.stream)  # gone with its group: made again next time
                continue
            out += [(s, text(item["message_id"]), int(item["times_delivered"])) for item in reply]
        return out

    def claim(self, source: Source, entry_id: str) -> dict[Any, Any] | None:
        """Take over an entry: its fields (empty if it was deleted meanwhile), or None if another worker
        took it first."""
        idle = C.REQUEST_CLAIM_IDLE_MS
        claimed: Any = self.redis.xclaim(source.stream, C.REQUEST_GROUP, self.name, idle, [entry_id])
        if not claimed:
            return None
        return claimed[0][1] or {}

    def finish(self, source: Source, entry_id: str) -> None:
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.xack(source.stream, C.REQUEST_GROUP, entry_id)
            pipe.xdel(source.stream, entry_id)
            pipe.execute()

    def leave(self) -> None:
        """Drop this worker from each stream's group, where it holds no entry (one it holds is left for
        another worker)."""
        for stream in sorted(self._ready):
            try:
                pending: Any = self.redis.xpending_range(stream, C.REQUEST_GROUP, "-", "+", 1, consumername=self.name)
                if not pending:
                    self.redis.xgroup_delconsumer(stream, C.REQUEST_GROUP, self.name)
            except redis.RedisError:
                pass  # a worker stopping while Redis is away leaves its name in the group; harmless
