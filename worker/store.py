"""modelplan's state in Redis: the pool snapshot, job records and their transitions, heartbeats.

Every change to a job goes through ``transition.lua`` against the version it was made from, so two
workers can never both move one job, and a placement is written only if every node still has the room.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import redis

from worker import calls as calls_
from worker import constants as C
from worker import logs, poolread, quarantine
from worker.beats import Heartbeats
from worker.errors import BadRecord, WrongType
from worker.handoffs import Handoffs
from worker.jobtext import read_job
from worker.keys import HOLD_PATTERN, ID_PATTERN, Keys, job_of_hold
from worker.mirror import Mirror
from worker.pool import UNREADABLE, Held, HoldSpec, Snapshot, parse_cache
from worker.queueing import planning_queue
from worker.records import JobRecord, JobState, utcnow
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
    """What ``transition.lua`` said."""

    code: str
    """``ok``, ``stale``, ``gone``, ``full`` or ``silent``."""
    detail: str
    wake: bool

    @property
    def ok(self) -> bool:
        return self.code == "ok"


class Store(Handoffs, Heartbeats):
    """One Redis connection's view of modelplan's state under one prefix."""

    def __init__(self, client: redis.Redis, keys: Keys | None = None) -> None:
        self.redis = client
        self.keys = keys or Keys()
        self.queue = planning_queue(client, self.keys)
        self._mirror: Mirror | None = None
        self.whole_reads = 0
        """How many times this store has read the pool whole (its first read included)."""
        self.lock = threading.RLock()
        """Held while a job or a wake-up pass plans on this store's mirror: one at a time in a process."""

    # --- nodes ------------------------------------------------------------------------------------------

    def node_ids(self) -> list[str]:
        """The ids in the pool's index; a member that is not a node id is reported and skipped."""
        return self.valid_ids(self.redis.zrange(self.keys.nodes, 0, -1), self.keys.nodes, "a node id", "skipped")

    def node_boot(self, node_id: str) -> str | None:
        """The boot a node's stored heartbeat reports; None when it has none that parses."""
        key = self.keys.node(node_id)
        raw = self.redis.get(key)
        if raw is None:
            return None
        try:
            return parse_cache.node(raw.encode() if isinstance(raw, str) else raw, key).record.boot_id
        except BadRecord as e:
            self.report_bad(e, "left out of the pool")
            return None

    def recent_snapshot(self, max_age_s: float) -> Snapshot:
        """The pool as this store last read it, if that was less than ``max_age_s`` ago (with this
        process's own commits applied since), else as it is now."""
        if self._mirror is None or time.monotonic() - self._mirror.read_at > max_age_s:
            return self.snapshot()
        return self._mirror.pool

    def keep_warm(self, idle_s: float) -> None:
        """Bring the mirror up to date if it was last read more than ``idle_s`` ago, or read it if it was
        never read: a worker between jobs (or starting), so that the next job does not find it behind."""
        if self._mirror is None or time.monotonic() - self._mirror.read_at > idle_s:
            self.snapshot()

    def snapshot(self) -> Snapshot:
        """The pool as it is now: this store's mirror of it, brought up to date from ``pool:changes`` in one
        round trip; the whole pool read afresh the first time, and whenever the mirror cannot catch up
        (the stream trimmed past it, or lost with a Redis restart). A commit re-checks every node's room
        in Lua, so a mirror a moment behind can make a commit fail and re-plan, never double-book."""
        mirror = self._mirror
        if mirror is None or not poolread.catch_up(self, mirror):
            mirror = self._read_whole()
        mirror.read_at = time.monotonic()
        return mirror.pool

    def _read_whole(self) -> Mirror:
        first = self._mirror is None
        started = time.perf_counter()
        mirror = self._mirror = poolread.full_read(self)
        mirror.pool.prepare()
        self.whole_reads += 1
        if first:
            ms = round((time.perf_counter() - started) * 1000, 1)
            log.info("pool_read_whole", reason="start", nodes=len(mirror.pool.records), ms=ms)
        return mirror

    def silent_nodes(self) -> list[str]:
        """Nodes in the index whose heartbeat has lapsed: those whose last heartbeat lapses by now on the
        server's clock (their scores), each checked gone; not a pass over the whole index."""
        secs, micros = self.redis.time()
        raw = self.redis.zrangebyscore(self.keys.nodes, "-inf", secs * 1000 + micros // 1000)
        ids = self.valid_ids(raw, self.keys.nodes, "a node id", "skipped")
        if not ids:
            return []
        with self.redis.pipeline(transaction=False) as pipe:
            for i in ids:
                pipe.exists(self.keys.node(i))
            alive = pipe.execute()
        return [i for i, a in zip(ids, alive, strict=True) if not a]

    def forget_node_if_silent(self, node_id: str) -> bool:
        """Drop a silent node from the index, unless a heartbeat brought it back meanwhile."""
        node_key = self.keys.node(node_id)
        with self.redis.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(node_key)  # type: ignore[no-untyped-call]
                if pipe.exists(node_key):
                    return False
                pipe.multi()
                pipe.zrem(self.keys.nodes, node_id)
                pipe.xadd(self.keys.pool_changes, {"n": node_id, "gone": "1"}, maxlen=C.POOL_CHANGES_MAXLEN)
                pipe.execute()
            except redis.WatchError:
                return False
        return True

    def reread_node(self, node_id: str) -> None:
        """Read one node afresh into the mirror: a commit found the mirror wrong about it."""
        if self._mirror is not None:
            poolread.reread_node(self, self._mirror, node_id)

    def held_on(self, node_id: str) -> dict[str, Held]:
        return self.holds_of(node_id, self.redis.hgetall(self.keys.held(node_id)))

    def holds_of(self, node_id: str, raw: dict[Any, Any]) -> dict[str, Held]:
        """A node's holds by id. One that does not parse, or whose id is not a hold id, is reported and
        kept as ``UNREADABLE``: none of the node's cards count as free while it is there."""
        out: dict[str, Held] = {}
        for field, value in raw.items():
            hid, held = text(field), parse_cache.hold(value)
            if not HOLD_PATTERN.fullmatch(hid):
                held = replace(UNREADABLE, unreadable="not a hold id")
            if held.unreadable:
                bad = BadRecord(self.keys.held(node_id), held.unreadable, bytes(value), member=hid)
                self.report_bad(bad, "its node's cards kept taken")
            out[hid] = held
        return out

    def valid_ids(self, raw: Any, index: str, what: str, action: str) -> list[str]:
        """The members of an index that are ids; each one that is not is reported."""
        out = []
        for member in raw:
            value = member.decode(errors="replace") if isinstance(member, bytes) else str(member)
            if ID_PATTERN.fullmatch(value):
                out.append(value)
            else:
                self.report_bad(BadRecord(index, f"not {what}", value.encode(), member=value), action)
        return out

    # --- records that do not parse --------------------------------------------------------------------

    def report_bad(self, bad: BadRecord, action: str) -> None:
        """Log a record that does not parse, and count it in ``quarantine``, once for its bytes."""
        quarantine.report(self.redis, self.keys, bad, action)

    def fail_unreadable_job(self, job_id: str, bad: BadRecord) -> bool:
        """Mark a job whose record does not parse as failed, keeping the record's bytes and freeing what it
        held, unless the record changed since it was read; a record of a newer schema is only reported (a
        newer worker may own it). True when the job was marked."""
        if bad.newer:
            self.report_bad(bad, "left alone: a newer modelplan owns it")
            return False
        k = self.keys
        holds = [(n, hid) for n, hs in self.snapshot().held.items() for hid in hs if job_of_hold(hid) == job_id]
        states = [s for s in JobState if s is not JobState.FAILED]
        keys = [k.job(job_id), k.job_events(job_id), k.events, k.jobs(JobState.FAILED)]
        keys += [k.jobs(s) for s in states]
        keys += [k.pending, k.pending_for, k.epoch, k.wake_signal, k.wake_classes, k.held_nodes, k.quarantine]
        keys += [k.pool_changes, k.pending_classes]
        keys += [k.held(n) for n, _ in holds]
        reason = f"its record does not parse ({bad.what}); marked failed, the record kept as it was"
        args: list[Any] = [
            job_id,
            bad.raw,
            reason,
            now_ms(),
            C.FINISHED_TTL_S,
            C.EVENTS_MAXLEN,
            C.JOB_EVENTS_MAXLEN,
            quarantine.entry(bad, "marked failed"),
            len(holds),
            C.POOL_CHANGES_MAXLEN,
        ]
        for n, hid in holds:
            args += [n, hid]
        run = script(self.redis, "quarantine_job")
        code, detail = run(keys=keys, args=args)
        if text(code) == "wrongtype":
            self.repair(text(detail))
            code, detail = run(keys=keys, args=args)
        if text(code) != "ok":
            return False
        quarantine.logged(self.keys, bad, "marked failed")
        return True

    # --- jobs -------------------------------------------------------------------------------------------

    def job(self, job_id: str) -> JobRecord | None:
        """A job's record; None when there is none, ``BadRecord`` when it does not parse."""
        key = self.keys.job(job_id)
        raw = self.redis.get(key)
        return read_job(raw, key) if raw is not None else None

    def job_and_pool(self, job_id: str) -> JobRecord | None:
        """``job(job_id)``, with the pool brought up to date (``snapshot()``) in the same round trip: what
        a worker reads before it plans a job."""
        key = self.keys.job(job_id)
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.get(key)
            if self._mirror is not None:
                poolread.ask_changes(pipe, self, self._mirror)
            replies = pipe.execute(raise_on_error=False)
        raw = replies[0]
        if isinstance(raw, Exception):
            raise raw
        mirror = self._mirror
        if mirror is None or not poolread.apply_changes(self, mirror, replies[1:]):
            mirror = self._read_whole()
        mirror.read_at = time.monotonic()
        return read_job(raw, key) if raw is not None else None

    def claim_and_pool(self, job_id: str, worker: str) -> tuple[bool, JobRecord] | None:
        """Take a queued job into ``planning`` for ``worker`` under a lease (``claim.lua``), with the pool
        brought up to date in the same round trip: what a worker does before it plans a job.

        ``(True, record)``: taken, ``record`` as now stored. ``(False, record)``: not a queued record
        (planning, settled, or written otherwise), left as it was for the caller to decide on. None: no
        record. ``BadRecord`` when it does not parse."""
        k = self.keys
        keys, args = calls_.claim_call(k, job_id, worker, utcnow())
        code, raw = self._script_and_pool("claim", keys, args)
        code = text(code)
        if code == "wrongtype":
            self.repair(text(raw))
            code, raw = script(self.redis, "claim")(keys=keys, args=args)
            code = text(code)
        if code == "gone":
            return None
        return code == "planning", read_job(raw, k.job(job_id))

    def _script_and_pool(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """Run a script, with the pool brought up to date (``snapshot()``) in the same round trip: its
        reply."""
        run = script(self.redis, name)
        with self.redis.pipeline(transaction=False) as pipe:
            run.queue(pipe, keys, args)
            if self._mirror is not None:
                poolread.ask_changes(pipe, self, self._mirror)
            replies = pipe.execute(raise_on_error=False)
        reply = replies[0]
        if run.lost(reply):  # the server lost its scripts: it ran nothing
            reply = run(keys=keys, args=args)
        elif isinstance(reply, Exception):
            raise reply
        mirror = self._mirror
        if mirror is None or not poolread.apply_changes(self, mirror, replies[1:]):
            mirror = self._read_whole()
        mirror.read_at = time.monotonic()
        return reply

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
            place=place,
            clear=clear,
        )
        run = script(self.redis, "transition")
        code, detail, wake = run(keys=keys, args=args)
        if text(code) == "wrongtype":
            self.repair(text(detail))
            code, detail, wake = run(keys=keys, args=args)
        return Outcome(text(code), text(detail), int(wake) == 1)

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
            if text(code) == "wrongtype":
                self.repair(text(detail))
                code, detail, wake = run(keys=keys, args=args)
            out.append(Outcome(text(code), text(detail), int(wake) == 1))
        return out

    def take_wake(self, full: bool) -> tuple[set[str], list[tuple[str, JobRecord | BadRecord | None]]]:
        """A wake-up pass starts (``take_wake.lua``): the classes freed since the last pass, and the
        pending jobs that capacity freed there could serve (every pending job, ``full``), in priority then
        arrival order, each with its record as ``jobs`` gives it. The pool is brought up to date in the
        same round trip."""
        k = self.keys
        keys = [k.wake_signal, k.wake_classes, k.pending, k.pending_for]
        classes, ids, raws = self._script_and_pool("take_wake", keys, [k.job_prefix, int(full)])
        picked = [
            (j, _job_or_bad(k.job(j), raw))
            for member, raw in zip(ids, raws, strict=True)
            for j in self.valid_ids([member], k.pending, "a job id", "skipped")
        ]
        return {text(c) for c in classes}, picked

    def recount_pending(self) -> int:
        """Count ``pending:classes`` anew from ``pending:for``, in one step; the number of pending jobs."""
        k = self.keys
        return int(script(self.redis, "recount_pending")(keys=[k.pending_for, k.pending_classes], args=[]))

    def next_seq(self) -> int:
        return int(self.redis.incr(self.keys.seq))
