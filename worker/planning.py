"""Planning jobs: claim, plan with the planner, commit in one step, and the moves around that (wake-up
passes, requeues, release, cancel). Each function reads, calls the planner, and commits through
``Store.transition``; a commit that loses a race is planned again or left to whoever won it."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import structlog

from planner.decide import Decision, Hold, decide
from planner.model import Option
from worker import constants as C
from worker.errors import Contended, JobNotFound, WrongState
from worker.records import JobRecord, JobState, Reservation, utcnow
from worker.scripts import text
from worker.store import Snapshot, Store, clear_list, now_ms

log = structlog.get_logger("modelplan.worker")

FAULT_PAUSE_ENV = "MODELPLAN_FAULT_PAUSE_AFTER_CLAIM_S"
"""Fault injection for tests: a worker pauses this long after claiming a job, so that a test can kill
it mid-plan. Unset in production."""


def waiting_score(rec: JobRecord) -> float:
    """Priority first (higher first), then arrival."""
    return float((C.PRIORITY_MAX - rec.request.priority) * (1 << 40) + rec.seq)


def claim(store: Store, job_id: str, worker: str) -> JobRecord | None:
    """Take a queued job (or one whose planner's lease ran out) into ``planning`` for ``worker``; None
    when there is nothing to do: another worker has it, or it was planned already."""
    for _ in range(C.PLAN_ATTEMPTS):
        rec = store.job(job_id)
        if rec is None:
            log.warning("job_missing", job_id=job_id)
            return None
        now = utcnow()
        expired = rec.state is JobState.PLANNING and rec.lease_until is not None and rec.lease_until < now
        if rec.state is not JobState.QUEUED and not expired:
            log.info("job_already_handled", job_id=job_id, state=rec.state.value)
            return None
        until = now + timedelta(milliseconds=C.LEASE_MS)
        new = rec.advance(JobState.PLANNING, worker=worker, lease_until=until)
        out = store.transition(rec, new, reason=f"planning on {worker}", score=until.timestamp() * 1000)
        if out.ok:
            return new
        if out.code == "gone":
            return None
    return None


def plan_queued(store: Store, job_id: str, worker: str) -> JobRecord | None:
    """The planning job: claim, plan, commit."""
    rec = claim(store, job_id, worker)
    if rec is None:
        return None
    pause = os.environ.get(FAULT_PAUSE_ENV)
    if pause:
        time.sleep(float(pause))
    return settle(store, rec)


def _decide(rec: JobRecord, snap: Snapshot) -> Decision:
    req = rec.request
    return decide(req.planned_artifacts(), req.shape, snap.nodes, req.context, ever_fit=rec.ever_fit)


def _next(rec: JobRecord, d: Decision) -> tuple[JobRecord, float]:
    common: dict[str, Any] = dict(
        option=d.option,
        alternatives=d.alternatives[: C.ALTERNATIVES_KEPT],
        reason=d.reason,
        attempts=rec.attempts + 1,
        worker=None,
        lease_until=None,
        ever_fit=rec.ever_fit or d.option is not None,
    )
    if d.outcome == "placed":
        placement = tuple(Reservation(node_id=h.node_id, gpus=h.gpus, host_gb=h.host_gb) for h in d.holds)
        return rec.advance(JobState.PLACED, placement=placement, **common), now_ms()
    if d.outcome == "waiting":
        return rec.advance(JobState.WAITING, placement=(), **common), waiting_score(rec)
    return rec.advance(JobState.FAILED, placement=(), **common), now_ms()


def commit(store: Store, rec: JobRecord, d: Decision, snap: Snapshot) -> tuple[str, JobRecord | None]:
    """Commit a decision: ``("ok", new)``, or the script's code and None."""
    new, score = _next(rec, d)
    out = store.transition(rec, new, reason=d.reason, score=score, epoch=snap.epoch, place=d.holds)
    if not out.ok:
        return out.code, None
    if out.wake:
        store.enqueue_pass()
    log.info(
        f"job_{new.state.value}",
        job_id=new.job_id,
        option=new.option.label if new.option else None,
        nodes=[r.node_id for r in new.placement],
        reason=new.reason,
    )
    return "ok", new


def settle(store: Store, rec: JobRecord) -> JobRecord | None:
    """Plan a job this worker holds until a commit holds: on a card taken since the snapshot, plan again
    (up to ``PLAN_ATTEMPTS``), then wait for the best option."""
    for attempt in range(1, C.PLAN_ATTEMPTS + 1):
        snap = store.snapshot()
        d = _decide(rec, snap)
        if d.outcome == "placed" and attempt == C.PLAN_ATTEMPTS:
            label = d.option.label if d.option else "its option"
            why = f"its cards were taken each time it was planned; waiting for {label}"
            d = Decision("waiting", d.option, (), d.alternatives, why)
        code, new = commit(store, rec, d, snap)
        if new is not None:
            return new
        if code in ("stale", "gone"):
            log.info("job_moved_meanwhile", job_id=rec.job_id, code=code)
            return None
        log.info("commit_conflict", job_id=rec.job_id, code=code, attempt=attempt)
    return None


def _same_target(a: Option | None, b: Option | None) -> bool:
    if a is None or b is None:
        return a is b
    return (a.artifact, a.cpu, a.gpu_class, a.fabric, a.gpus_per_node, a.nodes) == (
        b.artifact,
        b.cpu,
        b.gpu_class,
        b.fabric,
        b.gpus_per_node,
        b.nodes,
    )


def wake_pass(store: Store, full: bool = False) -> int:
    """Re-plan the waiting jobs that the freed capacity could serve, in priority then arrival order, and
    place those that now fit. Returns how many were placed."""
    classes = store.take_wake()
    full = full or "*" in classes
    ids = store.job_ids(JobState.WAITING)
    if not ids:
        return 0
    waits_for = store.redis.hmget(store.keys.waiting_for, ids)
    wanted = [j for j, c in zip(ids, waits_for, strict=True) if full or c is None or text(c) in classes | {"any"}]
    snap = store.snapshot()
    placed = 0
    for rec in store.jobs(wanted):
        if rec is None or rec.state is not JobState.WAITING:
            continue
        for _ in range(2):
            d = _decide(rec, snap)
            if d.outcome == "waiting" and _same_target(rec.option, d.option):
                break
            code, new = commit(store, rec, d, snap)
            if new is not None:
                if new.state is JobState.PLACED:
                    placed += 1
                    snap.take(new.job_id, [_hold(r) for r in new.placement])
                break
            if code in ("stale", "gone"):
                break
            snap = store.snapshot()
    log.info("wake_pass", classes=sorted(classes), full=full, considered=len(wanted), placed=placed)
    return placed


def _hold(r: Reservation) -> Hold:
    return Hold(r.node_id, r.gpus, r.host_gb)


def requeue(store: Store, job_id: str, reason: str, when: Callable[[JobRecord], bool]) -> bool:
    """Send a job back through planning (freeing what it holds) if ``when`` holds for its record."""
    for _ in range(C.PLAN_ATTEMPTS):
        rec = store.job(job_id)
        if rec is None or not when(rec):
            return False
        new = rec.advance(JobState.QUEUED, placement=(), worker=None, lease_until=None, reason=reason)
        out = store.transition(rec, new, reason=reason, clear=clear_list(rec))
        if out.ok:
            store.enqueue_plan(job_id)
            if out.wake:
                store.enqueue_pass()
            log.info("job_requeued", job_id=job_id, reason=reason)
            return True
        if out.code == "gone":
            return False
    raise Contended(job_id)


def release(store: Store, job_id: str) -> JobRecord:
    """Free a placed job's reservation; waiting jobs that could use it are re-planned at once."""
    for _ in range(C.PLAN_ATTEMPTS):
        rec = store.job(job_id)
        if rec is None:
            raise JobNotFound(job_id)
        if rec.state is not JobState.PLACED:
            raise WrongState(job_id, rec.state.value, "release", "placed")
        new = rec.advance(JobState.RELEASED, reason="released")
        out = store.transition(rec, new, reason="released", clear=clear_list(rec))
        if out.ok:
            if out.wake:
                store.enqueue_pass()
            log.info("job_released", job_id=job_id)
            return new
    raise Contended(job_id)


CANCELLABLE = (JobState.QUEUED, JobState.PLANNING, JobState.WAITING)


def cancel(store: Store, job_id: str) -> JobRecord:
    """Cancel a job that is queued, being planned or waiting. A placed job is released instead."""
    for _ in range(C.PLAN_ATTEMPTS):
        rec = store.job(job_id)
        if rec is None:
            raise JobNotFound(job_id)
        if rec.state not in CANCELLABLE:
            raise WrongState(job_id, rec.state.value, "cancel", "queued, planning or waiting")
        new = rec.advance(JobState.CANCELLED, worker=None, lease_until=None, reason="cancelled")
        if store.transition(rec, new, reason="cancelled").ok:
            log.info("job_cancelled", job_id=job_id)
            return new
    raise Contended(job_id)


def node_restarted(store: Store, node_id: str, boot_id: str) -> int:
    """Requeue the jobs placed on ``node_id`` before it booted as ``boot_id``."""
    count = 0
    for job_id, held in store.held_on(node_id).items():
        if held.boot_id != boot_id and requeue(
            store,
            job_id,
            f"node {node_id} restarted",
            lambda r: r.state is JobState.PLACED and any(p.node_id == node_id for p in r.placement),
        ):
            count += 1
    return count


def node_silent(store: Store, node_id: str) -> int:
    """Requeue the jobs placed on a node whose heartbeat lapsed, then drop it from the pool's index."""
    count = 0
    for job_id in store.held_on(node_id):
        if requeue(
            store,
            job_id,
            f"node {node_id} went silent",
            lambda r: r.state is JobState.PLACED and any(p.node_id == node_id for p in r.placement),
        ):
            count += 1
    store.forget_node_if_silent(node_id)
    log.info("node_silent", node_id=node_id, requeued=count)
    return count
