"""The periodic sweep: what no event announces. A worker whose lease ran out, a node that went silent, a
job queued but never picked up, finished jobs past their time, wake-up keys of the wrong type, the
safety-net re-plan of every waiting job, holds no job owns (``orphans``), replicas whose holds are gone
(``unheld``), quarantine entries whose record is fixed, and the engines' footprints the node records carry
(``observations``). One worker at a time sweeps (a short lock), however many run.

Each step stands alone: one that fails (a command the login may not run, a key of the wrong type, a bug)
is logged once for as long as it keeps failing the same way, and the steps after it run all the same.
Only Redis away or busy ends a sweep: every step would fail alike, and the loop says so once."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import redis

from worker import conflicts, ended, logs, moves, observations, orphans, planning, quarantine, retry, unheld
from worker import constants as C
from worker.errors import BadRecord
from worker.ids import planning_job_id
from worker.mirrored import MirroredStore
from worker.records import JobRecord, JobState, utcnow
from worker.reports import FOOTPRINTS
from worker.scripts import text
from worker.store import now_ms

log = logs.get_logger("modelplan.maintenance")


class SweepState:
    """What one worker's sweeps carry from one to the next: the steps failing now (each said once until it
    succeeds again), and the holds seen with no owner, not yet past their grace (``orphans``)."""

    def __init__(self) -> None:
        self.failing: dict[str, str] = {}
        self.orphans = orphans.Seen()
        self.unheld = unheld.Round()
        self.footprints = observations.Taken()
        self.ended: set[tuple[str, str, str]] = set()


Step = Callable[[MirroredStore, int, bool, SweepState], int]


def sweep(store: MirroredStore, *, force: bool = False, state: SweepState | None = None) -> dict[str, int]:
    """One sweep, if no other worker is sweeping; ``force`` skips the lock (tests, ``--burst``). ``state``:
    what the sweeps of one worker carry between them (a fresh one when not given). What each step did, by
    its name."""
    k, r = store.keys, store.redis
    if not force and not r.set(k.lock("maintenance"), "1", nx=True, px=C.MAINTENANCE_LOCK_MS):
        return {}
    state = state if state is not None else SweepState()
    now = now_ms()
    done = {name: 0 for name in STEPS}
    for name, step in STEPS.items():
        try:
            done[name] = step(store, now, force, state)
        except Exception as e:
            if retry.unavailable(e):
                raise
            _failed(state, name, e)
            continue
        if state.failing.pop(name, None) is not None:
            log.info("maintenance_step_resumed", step=name)
    if any(done.values()):
        log.info("maintenance_sweep", **done)
    return done


def _failed(state: SweepState, step: str, error: Exception) -> None:
    kind = f"{type(error).__name__}:{str(error)[:80]}"
    if state.failing.get(step) == kind:
        return
    state.failing[step] = kind
    fields = {"step": step, "error": str(error)[:200], "error_type": type(error).__name__}
    if isinstance(error, redis.RedisError | BadRecord):
        log.warning("maintenance_step_failed", **fields)  # Redis refused it: its answer says why
    else:
        log.exception("maintenance_step_failed", **fields)


def _leases(store: MirroredStore, now: int, force: bool, state: SweepState) -> int:
    k, r = store.keys, store.redis
    n = 0
    planning_ids = r.zrangebyscore(k.jobs(JobState.PLANNING), "-inf", now)
    for job_id in store.valid_ids(planning_ids, k.jobs(JobState.PLANNING), "a job id", "skipped"):
        lapsed = utcnow()

        def expired(rec: JobRecord, at: datetime = lapsed) -> bool:
            return rec.state is JobState.PLANNING and rec.lease_until is not None and rec.lease_until < at

        rec = planning.readable_job(store, job_id)
        if rec is None:
            continue
        who = rec.worker
        if moves.requeue(store, job_id, f"worker {who} stopped mid-plan (its lease expired)", expired):
            n += 1
    return n


def _silent(store: MirroredStore, now: int, force: bool, state: SweepState) -> int:
    n = 0
    for node_id in store.silent_nodes():
        n += 1
        if store.held_on(node_id):
            # its jobs are planned again by a worker, on the pool it keeps in memory, rather than on a
            # whole read of the pool made here
            store.hand_off_silent(node_id, now + C.SILENT_HANDOFF_MS)
        else:
            moves.node_silent(store, node_id)
    return n


def _lost(store: MirroredStore, now: int, force: bool, state: SweepState) -> int:
    k, r = store.keys, store.redis
    old_raw = r.zrangebyscore(k.jobs(JobState.QUEUED), "-inf", now - C.QUEUED_LOST_MS)
    old = store.valid_ids(old_raw, k.jobs(JobState.QUEUED), "a job id", "skipped")
    if not old:
        return 0
    # a record that does not parse is marked failed (or, written by a newer modelplan, left to it) rather
    # than queued again every sweep
    old = [j for j, rec in zip(old, store.jobs(old), strict=True) if not _unreadable(store, j, rec)]
    on_queue = set(store.queue.get_job_ids())
    n = 0
    for job_id in old:
        # bump its time first, so that the next sweep does not enqueue it again at once
        if planning_job_id(job_id) not in on_queue and r.zadd(k.jobs(JobState.QUEUED), {job_id: now}, xx=True, ch=True):
            store.enqueue_plan(job_id)
            n += 1
    return n


def _finished(store: MirroredStore, now: int, force: bool, state: SweepState) -> int:
    k, r = store.keys, store.redis
    return sum(
        int(r.zremrangebyscore(k.jobs(s), "-inf", now - C.FINISHED_TTL_S * 1000))
        for s in (JobState.FAILED, JobState.CANCELLED, JobState.RELEASED)
    )


def _waiting(store: MirroredStore, now: int, force: bool, state: SweepState) -> int:
    k, r = store.keys, store.redis
    if not (force or r.set(k.lock("waiting-sweep"), "1", nx=True, px=int(C.WAITING_SWEEP_INTERVAL_S * 1000))):
        return 0
    try:
        # what heartbeats read to wake anyone: right again whatever went wrong with it since
        store.recount_pending()
        if not r.zcard(k.jobs(JobState.WAITING)):
            return 0
        store.signal_pass(full=True)
    except Exception:
        if not force:  # not done: the next sweep tries again, rather than the one after the interval
            r.delete(k.lock("waiting-sweep"))
        raise
    return 1


def _wake_keys(store: MirroredStore, now: int, force: bool, state: SweepState) -> int:
    """Put ``wake:signal`` and ``wake:classes`` right if either is of another type: every script that
    frees capacity writes them (a heartbeat's would fail on them), so they are looked at every sweep, one
    round trip; a full pass is signalled in their place."""
    k = store.keys
    with store.redis.pipeline(transaction=False) as pipe:
        pipe.type(k.wake_signal)
        pipe.type(k.wake_classes)
        signal, classes = (text(t) for t in pipe.execute())
    if signal in ("list", "none") and classes in ("set", "none"):
        return 0
    repaired = store.signal_pass(full=True)
    if repaired:
        log.warning("wake_keys_repaired", wake_signal=signal, wake_classes=classes)
    return repaired


def _conflicts(store: MirroredStore, now: int, force: bool, state: SweepState) -> int:
    """A node id's conflict clears as its record's TTL runs out: its entry in the index goes after it."""
    return conflicts.prune(store, now)


def _holds(store: MirroredStore, now: int, force: bool, state: SweepState) -> int:
    return orphans.reclaim(store, state.orphans)


def _unheld(store: MirroredStore, now: int, force: bool, state: SweepState) -> int:
    return unheld.repair(store, state.unheld)


def _footprints(store: MirroredStore, now: int, force: bool, state: SweepState) -> int:
    """What the engines were measured to hold, from the node records' footprints (``worker.observations``),
    and the engines that ended, into their jobs' records (``worker.ended``)."""
    records = FOOTPRINTS.take()
    try:
        return observations.ingest(store, records, state.footprints) + ended.note(store, records, state.ended)
    except BaseException:
        FOOTPRINTS.give_back(records)  # taken again next sweep
        raise


def _quarantine(store: MirroredStore, now: int, force: bool, state: SweepState) -> int:
    return quarantine.prune(store.redis, store.keys)


STEPS: dict[str, Step] = {
    "lease_expired": _leases,
    "node_silent": _silent,
    "requeued_lost": _lost,
    "finished_trimmed": _finished,
    "conflicts_cleared": _conflicts,
    "wake_keys_repaired": _wake_keys,
    "waiting_sweep": _waiting,
    "holds_reclaimed": _holds,
    "replicas_unheld": _unheld,
    "quarantine_cleared": _quarantine,
    "footprints_observed": _footprints,
}
"""The sweep's steps in the order they run, by the name each is counted and logged under."""


def _unreadable(store: MirroredStore, job_id: str, rec: JobRecord | BadRecord | None) -> bool:
    if isinstance(rec, BadRecord):
        store.fail_unreadable_job(job_id, rec)
        return True
    return False
