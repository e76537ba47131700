"""modelplan's state in Redis: job records and their transitions, heartbeats, the pool's reads. Redis I/O
only: the pool a worker plans on is kept apart from it (``worker.mirror``, ``worker.mirrored``).

Every change to a job goes through ``transition.lua`` against the version it was made from, so two
workers can never both move one job, and a placement is written only if every node still has the room.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import redis

from worker import apikeys, logs, quarantine
from worker import calls as calls_
from worker import constants as C
from worker.beats import Heartbeats
from worker.changes import gone_fields
from worker.errors import BadRecord, WrongType
from worker.handoffs import Handoffs
from worker.jobtext import read_job
from worker.keys import Keys
from worker.mirror import Unread
from worker.pool import Held, HoldSpec, parse_cache, read_holds
from worker.poolread import PoolReads, ids_in, member_text
from worker.queueing import planning_queue
from worker.records import JobRecord, JobState, utcnow
from worker.replies import Reply
from worker.reports import NodeRecord
from worker.scripts import script, text

log = logs.get_logger("modelplan.worker")


def now_ms() -> int:
    return int(time.time() * 1000)


def _job_or_bad(key: str, raw: bytes | str | None) -> JobRecord | BadRecord | None:
    """A job's record as read: the record, None when there is none, or the ``BadRecord`` it is."""
    try:
        return read_job(raw, key) if raw is not None else None
    except BadRecord as e:
        return e


@dataclass(frozen=True, slots=True)
class Outcome:
    """What ``transition.lua`` said of one commit."""

    code: Reply
    """``OK``, ``STALE``, ``GONE``, ``FULL`` or ``SILENT`` (``WRONGTYPE`` is repaired and run again)."""
    detail: str
    wake: bool

    @property
    def ok(self) -> bool:
        return self.code is Reply.OK


Also = Callable[[Any], None] | None
"""Reads to send in the same round trip as a store's own (queued on its pipeline, after its commands): a
worker's mirror asks for the pool's changes so (``worker.mirrored``). Their replies come back apart."""


Woken = tuple[set[str], list[tuple[str, JobRecord | BadRecord | None]]]
"""What ``take_wake`` takes: the classes freed, and the pending jobs to look at with their records."""


class Store(PoolReads, Handoffs, Heartbeats):
    """One Redis connection's view of modelplan's state under one prefix: reads and commits, Redis I/O
    only. What it reads of the pool it hands back as values (``PoolReads``); it keeps no pool itself
    (``worker.mirrored.MirroredStore`` keeps a worker's)."""

    def __init__(self, client: redis.Redis, keys: Keys | None = None) -> None:
        self.redis = client
        self.keys = keys or Keys()
        self.queue = planning_queue(client, self.keys)

    # --- nodes ------------------------------------------------------------------------------------------

    def node_ids(self) -> list[str]:
        """The ids in the pool's index; a member that is not a node id is reported and skipped."""
        return self.valid_ids(self.redis.zrange(self.keys.nodes, 0, -1), self.keys.nodes, "a node id", "skipped")

    def node_boot(self, node_id: str) -> str | None:
        """The boot a node's stored heartbeat reports; None when it has none that parses."""
        rec = self.node_record(node_id)
        return None if rec is None else rec.boot_id

    def node_record(self, node_id: str) -> NodeRecord | None:
        """A node's stored heartbeat; None when it has none that parses."""
        key = self.keys.node(node_id)
        raw = self.redis.get(key)
        if raw is None:
            return None
        try:
            return parse_cache.node(raw.encode() if isinstance(raw, str) else raw, key).record
        except BadRecord as e:
            self.report_bad(e, "left out of the pool")
            return None

    def silent_nodes(self) -> list[str]:
        """Nodes in the index whose heartbeat has lapsed: those whose lapse as last taken in (their scores)
        is by now on the server's clock, each checked gone; not a pass over the whole index. A refresh moves
        only its record's TTL, so a node found alive here has its score moved to its TTL's end; and asking
        for a lapsed key has the server expire it (its notification rings the intake)."""
        secs, micros = self.redis.time()
        now = secs * 1000 + micros // 1000
        raw = self.redis.zrangebyscore(self.keys.nodes, "-inf", now)
        ids = self.valid_ids(raw, self.keys.nodes, "a node id", "skipped")
        if not ids:
            return []
        with self.redis.pipeline(transaction=False) as pipe:
            for i in ids:
                pipe.pttl(self.keys.node(i))
            ttls = pipe.execute()
        alive = {i: now + (t if t >= 0 else 1 << 52) for i, t in zip(ids, ttls, strict=True) if t != -2}
        if alive:
            self.redis.zadd(self.keys.nodes, alive, xx=True, gt=True)
        return [i for i in ids if i not in alive]

    def forget_node_if_silent(self, node_id: str) -> bool:
        """Drop a silent node from the index, unless a heartbeat brought it back meanwhile."""
        node_key = self.keys.node(node_id)
        self.intake([node_id])  # taken in as gone, should its expiry have been announced to no one
        with self.redis.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(node_key)  # type: ignore[no-untyped-call]
                if pipe.exists(node_key):
                    return False
                pipe.multi()
                pipe.zrem(self.keys.nodes, node_id)
                pipe.xadd(self.keys.pool_changes, gone_fields(node_id), maxlen=C.POOL_CHANGES_MAXLEN)  # type: ignore[arg-type]
                pipe.execute()
            except redis.WatchError:
                return False
        return True

    def held_on(self, node_id: str) -> dict[str, Held]:
        return self.holds_of(node_id, self.redis.hgetall(self.keys.held(node_id)))

    def holds_of(self, node_id: str, raw: dict[Any, Any]) -> dict[str, Held]:
        """A node's holds by id (``pool.read_holds``); one that cannot be read is reported."""
        holds, bad = read_holds(self.keys.held(node_id), raw)
        for b in bad:
            self.report_bad(b, "its node's cards kept taken")
        return holds

    def valid_ids(self, raw: Any, index: str, what: str, action: str) -> list[str]:
        """The members of an index that are ids; each one that is not is reported."""
        ids, bad = ids_in(raw, index, what)
        for b in bad:
            self.report_bad(b, action)
        return ids

    # --- records that do not parse --------------------------------------------------------------------

    def report_bad(self, bad: BadRecord, action: str) -> None:
        """Log a record that does not parse, and count it in ``quarantine``, once for its bytes."""
        quarantine.report(self.redis, self.keys, bad, action)

    def report_unread(self, unread: Sequence[Unread]) -> None:
        """``report_bad`` each value a mirror could not read, with what was done about it."""
        for u in unread:
            self.report_bad(u.bad, u.action)

    def fail_unreadable_job(self, job_id: str, bad: BadRecord, holds: Sequence[tuple[str, str]]) -> bool:
        """Mark a job whose record does not parse as failed, keeping the record's bytes and freeing what it
        held (``holds``: each ``(node, hold id)`` of its), unless the record changed since it was read; a
        record of a newer schema is only reported (a newer worker may own it). True when the job was
        marked."""
        if bad.newer:
            self.report_bad(bad, "left alone: a newer modelplan owns it")
            return False
        k = self.keys
        states = [s for s in JobState if s is not JobState.FAILED]
        keys = [k.job(job_id), k.job_events(job_id), k.events, k.jobs(JobState.FAILED)]
        keys += [k.jobs(s) for s in states]
        keys += [k.pending, k.pending_for, k.epoch, k.wake_signal, k.wake_classes, k.held_nodes, k.quarantine]
        keys += [k.pool_changes, k.pending_classes, k.pending_records]
        keys += [k.held(n) for n, _ in holds]
        reason = f"its record does not parse ({bad.what}); marked failed, the record kept as it was"
        at = utcnow()
        args: list[Any] = [
            job_id,
            bad.raw,
            reason,
            int(at.timestamp() * 1000),
            C.FINISHED_TTL_S,
            C.EVENTS_MAXLEN,
            C.JOB_EVENTS_MAXLEN,
            quarantine.entry(bad, "marked failed", at),
            len(holds),
            C.POOL_CHANGES_MAXLEN,
        ]
        for n, hid in holds:
            args += [n, hid]
        run = script(self.redis, "quarantine_job")
        code, detail = run(keys=keys, args=args)
        if Reply.of(code) is Reply.WRONGTYPE:
            self.repair(text(detail))
            code, detail = run(keys=keys, args=args)
        if Reply.of(code) is not Reply.OK:
            return False
        quarantine.logged(self.keys, bad, "marked failed")
        return True

    # --- jobs -------------------------------------------------------------------------------------------

    def job(self, job_id: str) -> JobRecord | None:
        """A job's record; None when there is none, ``BadRecord`` when it does not parse."""
        key = self.keys.job(job_id)
        raw = self.redis.get(key)
        return read_job(raw, key) if raw is not None else None

    def job_with(self, job_id: str, also: Also) -> tuple[JobRecord | None, list[Any]]:
        """``job(job_id)``, with what ``also`` reads in the same round trip (its replies, read with
        ``raise_on_error=False``)."""
        key = self.keys.job(job_id)
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.get(key)
            if also is not None:
                also(pipe)
            replies = pipe.execute(raise_on_error=False)
        raw = replies[0]
        if isinstance(raw, Exception):
            raise raw
        return (read_job(raw, key) if raw is not None else None), replies[1:]

    def read_with(self, also: Also) -> list[Any]:
        """What ``also`` reads, alone in a round trip (read with ``raise_on_error=False``)."""
        if also is None:
            return []
        with self.redis.pipeline(transaction=False) as pipe:
            also(pipe)
            return list(pipe.execute(raise_on_error=False))

    def claim_with(
        self, job_id: str, worker: str, now: datetime, also: Also = None
    ) -> tuple[tuple[bool, JobRecord] | None, list[Any]]:
        """Take a queued job into ``planning`` for ``worker`` under a lease from ``now`` (``claim.lua``),
        with what ``also`` reads in the same round trip (its replies come second).

        ``(True, record)``: taken, ``record`` as now stored. ``(False, record)``: not a queued record
        (planning, settled, or written otherwise), left as it was for the caller to decide on. None: no
        record. ``BadRecord`` when it does not parse."""
        k = self.keys
        keys, args = calls_.claim_call(k, job_id, worker, now)
        (code, raw), replies = self.run_with("claim", keys, args, also)
        if Reply.of(code) is Reply.WRONGTYPE:
            self.repair(text(raw))
            code, raw = script(self.redis, "claim")(keys=keys, args=args)
        if Reply.of(code) is Reply.GONE:
            return None, replies
        return (Reply.of(code) is Reply.PLANNING, read_job(raw, k.job(job_id))), replies

    def run_with(self, name: str, keys: list[str], args: list[Any], also: Also) -> tuple[Any, list[Any]]:
        """Run a script, with what ``also`` reads in the same round trip: its reply, and ``also``'s."""
        run = script(self.redis, name)
        with self.redis.pipeline(transaction=False) as pipe:
            run.queue(pipe, keys, args)
            if also is not None:
                also(pipe)
            replies = pipe.execute(raise_on_error=False)
        reply = replies[0]
        if run.lost(reply):  # the server lost its scripts: it ran nothing
            reply = run(keys=keys, args=args)
        elif isinstance(reply, Exception):
            raise reply
        return reply, replies[1:]

    def jobs(self, job_ids: Sequence[str]) -> list[JobRecord | BadRecord | None]:
        """Several jobs' records in one round trip: each a record, None, or the ``BadRecord`` it is."""
        if not job_ids:
            return []
        keys = [self.keys.job(j) for j in job_ids]
        return [_job_or_bad(key, raw) for key, raw in zip(keys, self.redis.mget(keys), strict=True)]

    def job_ids(self, state: JobState) -> list[str]:
        """The ids in a state's index; a member that is not a job id is reported and skipped."""
        key = self.keys.jobs(state)
        return self.valid_ids(self.redis.zrange(key, 0, -1), key, "a job id", "skipped")

    def transition(
        self,
        old: JobRecord,
        new: JobRecord,
        *,
        reason: str,
        score: float | None = None,
        pending: tuple[str, float] | None = None,
        epoch: str | None = None,
        place: Sequence[HoldSpec] = (),
        clear: Sequence[tuple[str, str, str]] = (),
    ) -> Outcome:
        """Commit ``new`` over ``old`` if the stored record is still ``old``'s version.

        ``place`` holds are written only if every node has the room; ``clear`` lists ``(node, hold id,
        class)`` holds to drop (waking jobs pending on that class). ``pending`` is ``(classes, score)`` for a
        job with a replica not on its best option; ``epoch`` the pool epoch its plan saw.
        """
        keys, args = calls_.transition_call(
            self.keys,
            old,
            new,
            reason=reason,
            score=score if score is not None else now_ms(),
            pending=pending,
            epoch=epoch,
            place=apikeys.keyed(self.redis, self.keys, new.job_id, place),
            clear=clear,
        )
        run = script(self.redis, "transition")
        code, detail, wake = run(keys=keys, args=args)
        if Reply.of(code) is Reply.WRONGTYPE:
            self.repair(text(detail))
            code, detail, wake = run(keys=keys, args=args)
        return Outcome(Reply.of(code), text(detail), int(wake) == 1)

    def repair(self, key: str) -> None:
        """A script found ``key`` holding another type and wrote nothing: a hint is deleted (what comes next
        rebuilds it), anything else raises ``WrongType``."""
        if key not in self.keys.hints:
            raise WrongType(key)
        self.redis.delete(key)
        log.warning("key_repaired", key=key, why="it held another type than modelplan writes there")

    def transitions(self, calls: Sequence[calls_.Call]) -> list[Outcome]:
        """Several ``transition.lua`` calls (each as ``calls.transition_call`` builds it) in one round trip,
        each committed or refused on its own, as ``transition`` would one after another."""
        run = script(self.redis, "transition")
        with self.redis.pipeline(transaction=False) as pipe:
            for keys, args in calls:
                run.queue(pipe, keys, args)
            replies = pipe.execute(raise_on_error=False)
        out = []
        for (keys, args), reply in zip(calls, replies, strict=True):
            if run.lost(reply):  # the server lost its scripts: it ran nothing
                reply = run(keys=keys, args=args)
            elif isinstance(reply, Exception):
                raise reply
            code, detail, wake = reply
            if Reply.of(code) is Reply.WRONGTYPE:
                self.repair(text(detail))
                code, detail, wake = run(keys=keys, args=args)
            out.append(Outcome(Reply.of(code), text(detail), int(wake) == 1))
        return out

    def take_wake_with(self, full: bool, also: Also = None) -> tuple[Woken, list[Any]]:
        """A wake-up pass starts (``take_wake.lua``): the classes freed since the last pass, and the
        pending jobs that capacity freed there could serve (every pending job, ``full``), in priority then
        arrival order, each with its record as ``jobs`` gives it; with what ``also`` reads in the same
        round trip as the script (its replies come second).

        The records come with the script's reply, from ``pending:records``; one it has not (or cannot
        read) is read from the job's own key in a second round trip."""
        k = self.keys
        keys = [k.wake_signal, k.wake_classes, k.pending, k.pending_for, k.pending_records]
        (classes, members, kept), replies = self.run_with("take_wake", keys, [int(full)], also)
        ids = self.valid_ids(members, k.pending, "a job id", "skipped")
        by_id = {member_text(m): raw for m, raw in zip(members, kept, strict=True)}
        records: list[JobRecord | BadRecord | None] = []
        unread: list[int] = []
        for i, job_id in enumerate(ids):
            record = _job_or_bad(k.job(job_id), by_id[job_id]) if by_id[job_id] else None
            if not isinstance(record, JobRecord) or record.job_id != job_id:
                unread.append(i)
            records.append(record)
        for i, record in zip(unread, self.jobs([ids[i] for i in unread]), strict=True):
            records[i] = record
        return ({text(c) for c in classes}, list(zip(ids, records, strict=True))), replies

    def recount_pending(self) -> int:
        """Count ``pending:classes`` anew from ``pending:for``, in one step; the number of pending jobs."""
        k = self.keys
        return int(
            script(self.redis, "recount_pending")(keys=[k.pending_for, k.pending_classes, k.pending_records], args=[])
        )

    def next_seq(self) -> int:
        return int(self.redis.incr(self.keys.seq))
