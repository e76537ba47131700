"""A worker's store with its mirror of the pool: what planning, wake-up passes and moves work on.

Data flows one way: the store (``worker.store``) reads Redis and hands back what it read; the mirror
(``worker.mirror``) is fed those values and keeps the pool; the planner plans on a view of it
(``Snapshot.nodes_for``); the commit goes back through the store. This module joins the first two: each
read that brings the mirror up to date goes in the same round trip as what the worker reads or runs anyway
(``_with_pool``), and what the mirror could not read is reported through the store.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import redis

from worker import constants as C
from worker import logs
from worker.changes import parse_change
from worker.errors import BadRecord
from worker.ids import ID_PATTERN, job_of_hold
from worker.keys import Keys
from worker.mirror import Mirror, Named, Unread
from worker.pool import Snapshot
from worker.poolread import server_ms
from worker.records import JobRecord, utcnow
from worker.reports import FOOTPRINTS
from worker.scripts import text
from worker.store import Also, Store, Woken

log = logs.get_logger("modelplan.worker")

T = TypeVar("T")


class MirroredStore(Store):
    """A ``Store`` and this process's mirror of the pool under its prefix, kept from ``pool:changes``."""

    def __init__(self, client: redis.Redis, keys: Keys | None = None) -> None:
        super().__init__(client, keys)
        self._mirror: Mirror | None = None
        self.whole_reads = 0
        """How many times this store has read the pool whole (its first read included)."""
        self.lock = threading.RLock()
        """Held while a job or a wake-up pass plans on this store's mirror: one at a time in a process."""

    # --- the pool, as plans see it --------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The pool as it is now: this store's mirror of it, brought up to date from ``pool:changes`` in one
        round trip; the whole pool read afresh the first time, and whenever the mirror cannot catch up
        (the stream trimmed past it, or lost with a Redis restart). A commit re-checks every node's room
        in Lua, so a mirror a moment behind can make a commit fail and re-plan, never double-book."""
        self._with_pool(lambda also: (None, self.read_with(also)))
        assert self._mirror is not None
        return self._mirror.pool

    def recent_snapshot(self, max_age_s: float) -> Snapshot:
        """The pool as this store last read it, if that was less than ``max_age_s`` ago (with this
        process's own commits applied since), else as it is now."""
        if self._mirror is None or time.monotonic() - self._mirror.read_at > max_age_s:
            return self.snapshot()
        return self._mirror.pool

    def _took(self, mirror: Mirror, unread: Sequence[Unread]) -> None:
        """After a read into ``mirror``: report what it could not read, and hand the node records it read
        with footprints to this process's sweeps (``reports.FOOTPRINTS``, taken by ``worker.observations``)."""
        self.report_unread(unread)
        for node_id, record in mirror.footprints.items():
            FOOTPRINTS.put(node_id, record)
        mirror.footprints.clear()

    def keep_warm(self, idle_s: float) -> None:
        """Bring the mirror up to date if it was last read more than ``idle_s`` ago, or read it if it was
        never read: a worker between jobs (or starting), so that the next job does not find it behind."""
        if self._mirror is None or time.monotonic() - self._mirror.read_at > idle_s:
            self.snapshot()

    def reread_node(self, node_id: str) -> None:
        """Read one node's heartbeat and holds afresh into the mirror: a commit found the mirror wrong
        about it (a change that never went onto ``pool:changes``, such as a record written by hand)."""
        if self._mirror is not None and ID_PATTERN.fullmatch(node_id):
            self._took(self._mirror, self._mirror.put(self.read_named(Named({node_id}, {node_id}))))

    # --- reads that bring the mirror up to date on the way ---------------------------------------------

    def job_and_pool(self, job_id: str) -> JobRecord | None:
        """``job(job_id)``, with the pool brought up to date (``snapshot()``) in the same round trip: what
        a worker reads before it plans a job."""
        return self._with_pool(lambda also: self.job_with(job_id, also))

    def claim_and_pool(self, job_id: str, worker: str) -> tuple[bool, JobRecord] | None:
        """``claim_with`` now, with the pool brought up to date in the same round trip: what a worker does
        before it plans a job."""
        now = utcnow()
        return self._with_pool(lambda also: self.claim_with(job_id, worker, now, also))

    def take_wake(self, full: bool) -> Woken:
        """``take_wake_with``, with the pool brought up to date in the same round trip: a wake-up pass
        starts."""
        return self._with_pool(lambda also: self.take_wake_with(full, also))

    def fail_unreadable_job(self, job_id: str, bad: BadRecord, holds: Sequence[tuple[str, str]] | None = None) -> bool:
        """``Store.fail_unreadable_job``, freeing the holds the mirror knows of the job."""
        if holds is None and not bad.newer:
            pool = self.snapshot()
            holds = [(n, hid) for n, hs in pool.held.items() for hid in hs if job_of_hold(hid) == job_id]
        return super().fail_unreadable_job(job_id, bad, holds or ())

    # --- bringing the mirror up to date ---------------------------------------------------------------

    def _with_pool(self, send: Callable[[Also], tuple[T, list[Any]]]) -> T:
        """What ``send`` sends (with the reads it is given queued after its own), and the mirror brought up
        to date from those reads' replies in the same round trip; the whole pool read when it cannot catch
        up; the read stamped. ``send``'s answer."""
        mirror = self._mirror
        also: Also = None
        if mirror is not None:
            since = mirror.last_id
            also = lambda pipe: self.ask_changes(pipe, since)  # noqa: E731
        answer, replies = send(also)
        if mirror is None or not self._catch_up(mirror, replies):
            mirror = self._read_whole()
        mirror.read_at = time.monotonic()
        return answer

    def _read_whole(self) -> Mirror:
        first = self._mirror is None
        started = time.perf_counter()
        mirror, unread = Mirror.whole(self.read_whole(), self.keys)
        self._mirror = mirror
        self._took(mirror, unread)
        mirror.pool.prepare()
        self.whole_reads += 1
        if first:
            ms = round((time.perf_counter() - started) * 1000, 1)
            log.info("pool_read_whole", reason="start", nodes=len(mirror.pool.records), ms=ms)
        return mirror

    def _catch_up(self, mirror: Mirror, replies: list[Any]) -> bool:
        """Apply the replies to ``ask_changes``; False when the mirror cannot catch up from them, said in
        the log with why: the whole pool is read next."""
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
            return self._apply(mirror, entries, now, epoch)
        except BaseException:
            # the entries past its place were noted, the nodes they name perhaps not read: all of it again
            mirror.last_id = started
            raise

    def _apply(self, mirror: Mirror, entries: list[Any], now: Any, epoch: Any) -> bool:
        at = server_ms(now)
        named = mirror.note(parse_change(text(i), fields) for i, fields in entries)
        for _ in range(C.POOL_CHANGES_MAXLEN // C.MIRROR_BATCH + 1):
            if len(entries) < C.MIRROR_BATCH:
                break
            # more wait: read on a page at a time, each checked against a trim that overtook the mirror
            # meanwhile, the nodes the page before named read in the same round trip
            info, entries, read = self.read_page(mirror.last_id, named)
            self._took(mirror, mirror.put(read))
            if not mirror.continues(info):
                return _behind(mirror, _lost(info))
            named = mirror.note(parse_change(text(i), fields) for i, fields in entries)
            at = read.server_ms
        else:
            return _behind(mirror, "far_behind")  # changes come faster than this worker applies them
        named.nodes.update(mirror.due(at))
        if named:
            self._took(mirror, mirror.put(self.read_named(named)))
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
