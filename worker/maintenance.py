"""The periodic sweep: what no event announces. A worker whose lease ran out, a node that went silent, a
job queued but never picked up, and the safety-net re-plan of every waiting job. One worker at a time
sweeps (a short lock), however many run."""

from __future__ import annotations

from datetime import datetime

from worker import conflicts, logs, moves, planning, quarantine
from worker import constants as C
from worker.errors import BadRecord
from worker.keys import planning_job_id
from worker.records import JobRecord, JobState, utcnow
from worker.store import Store, now_ms

log = logs.get_logger("modelplan.maintenance")


def sweep(store: Store, *, force: bool = False) -> dict[str, int]:
    """One sweep, if no other worker is sweeping; ``force`` skips the lock (tests, ``--burst``)."""
    k, r = store.keys, store.redis
    if not force and not r.set(k.lock("maintenance"), "1", nx=True, px=C.MAINTENANCE_LOCK_MS):
        return {}
    now = now_ms()
    done = {"lease_expired": 0, "node_silent": 0, "requeued_lost": 0, "waiting_sweep": 0, "quarantine_cleared": 0}

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
            done["lease_expired"] += 1

    for node_id in store.silent_nodes():
        done["node_silent"] += 1
        if store.held_on(node_id):
            # its jobs are planned again by a worker, on the pool it keeps in memory, rather than on a
            # whole read of the pool made here
            store.hand_off_silent(node_id, now + C.SILENT_HANDOFF_MS)
        else:
            moves.node_silent(store, node_id)

    old_raw = r.zrangebyscore(k.jobs(JobState.QUEUED), "-inf", now - C.QUEUED_LOST_MS)
    old = store.valid_ids(old_raw, k.jobs(JobState.QUEUED), "a job id", "skipped")
    if old:
        # a record that does not parse is marked failed (or, written by a newer modelplan, left to it)
        # rather than queued again every sweep
        old = [j for j, rec in zip(old, store.jobs(old), strict=True) if not _unreadable(store, j, rec)]
        on_queue = set(store.queue.get_job_ids())
        for job_id in old:
            # bump its time first, so that the next sweep does not enqueue it again at once
            if planning_job_id(job_id) not in on_queue and r.zadd(
                k.jobs(JobState.QUEUED), {job_id: now}, xx=True, ch=True
            ):
                store.enqueue_plan(job_id)
                done["requeued_lost"] += 1

    for state in (JobState.FAILED, JobState.CANCELLED, JobState.RELEASED):
        r.zremrangebyscore(k.jobs(state), "-inf", now - C.FINISHED_TTL_S * 1000)
    # a node id's conflict clears as its record's TTL runs out: its entry in the index goes after it
    conflicts.prune(store, now)

    due = force or r.set(k.lock("waiting-sweep"), "1", nx=True, px=int(C.WAITING_SWEEP_INTERVAL_S * 1000))
    if due:
        # what heartbeats read to wake anyone: right again whatever went wrong with it since
        store.recount_pending()
    if due and r.zcard(k.jobs(JobState.WAITING)):
        store.signal_pass(full=True)
        done["waiting_sweep"] = 1

    done["quarantine_cleared"] = quarantine.prune(r, k)

    if any(done.values()):
        log.info("maintenance_sweep", **done)
    return done


def _unreadable(store: Store, job_id: str, rec: JobRecord | BadRecord | None) -> bool:
    if isinstance(rec, BadRecord):
        store.fail_unreadable_job(job_id, rec)
        return True
    return False
