"""Waking pending jobs: one pass re-plans those that freed capacity could serve, in priority then arrival
order, and holds cards for the job at the head of each class."""

from __future__ import annotations

from datetime import datetime, timedelta

from planner.decide import Hold, JobPlan, nominate, same_layout, take
from worker import constants as C
from worker import logs, metrics, observed
from worker.errors import BadRecord
from worker.mirrored import MirroredStore
from worker.planning import Change, change_for, commit, commit_all, nominated_cards, plan_for, readable_job
from worker.pool import Snapshot, Staged
from worker.records import JobRecord, utcnow
from worker.replies import Reply

log = logs.get_logger("modelplan.worker")


def _unchanged(rec: JobRecord, change: Change) -> bool:
    """Whether a change only restates the record (same target, replicas, nomination): not worth a write."""
    new = change.new
    if change.holds_change and not _only_same_nomination(rec, change):
        return False
    return (
        new.state is rec.state
        and same_layout(new.option, rec.option)
        and [(r.index, r.state) for r in new.replicas] == [(r.index, r.state) for r in rec.replicas]
        and [r.wait.kind if r.wait else None for r in new.replicas]
        == [r.wait.kind if r.wait else None for r in rec.replicas]
    )


def _only_same_nomination(rec: JobRecord, change: Change) -> bool:
    old, new = rec.nomination, change.new.nomination
    if old is None or new is None or nominated_cards(old.holds) != nominated_cards(new.holds):
        return False
    return all(h.nominated for h in change.place) and {c[1] for c in change.clear} == {old.holds[0].hold_id}


def wake_pass(store: MirroredStore, full: bool = False) -> int:
    """Re-plan the pending jobs that freed capacity could serve, in priority then arrival order; place
    those that now fit, move fallbacks onto their best, and hold cards for the job at the head of each
    class. Returns how many replicas were placed or moved."""
    classes, wanted = store.take_wake(full)  # the pool is brought up to date in the same round trip
    full = full or "*" in classes
    if not wanted:  # nobody waits, or only for capacity freed elsewhere
        if classes:
            log.info("wake_pass", classes=sorted(classes), full=full, considered=0, moved=0)
        return 0
    snap = store.recent_snapshot(C.SNAPSHOT_REUSE_S)
    now = utcnow()  # the pass's time: each record it makes, each hold it sees lapse
    heads: set[str] = set()
    # each job planned in turn on what the ones before it take, and all committed in one round trip
    batch: list[tuple[JobRecord, Change, Staged]] = []
    observed.prefetch(store, (rec.request for _, rec in wanted if isinstance(rec, JobRecord)))
    for job_id, rec in wanted:
        if isinstance(rec, BadRecord):
            store.fail_unreadable_job(job_id, rec)
            continue
        if rec is None or not rec.pending:
            continue
        change = _change(store, rec, snap, heads, now)
        if change is not None:
            batch.append((rec, change, snap.stage(change.place, change.clear)))
    moved = 0
    again = []
    unwritten = False  # a change before this one took cards (a placement, a nomination) its commit did not
    for (rec, change, _), (code, new) in zip(batch, commit_all(store, batch, snap) if batch else [], strict=True):
        if new is not None:
            moved += _placed(rec, change, new, snap)
            if unwritten and new.pending:
                # planned on cards taken by a change that was refused: it may wait for a job ahead that holds
                # nothing, and no wake-up would come for it (nothing was freed)
                again.append(new)
        else:
            if code not in (Reply.STALE, Reply.GONE):
                again.append(rec)
            unwritten = unwritten or bool(change.place)
    for rec in again:  # refused, or planned on what a refused change took: once more, alone, on the pool now
        snap = store.snapshot()
        fresh = readable_job(store, rec.job_id)
        change = _change(store, fresh, snap, heads, utcnow()) if fresh is not None and fresh.pending else None
        if fresh is not None and change is not None:
            _, new = commit(store, fresh, change, snap)
            moved += _placed(fresh, change, new, snap) if new is not None else 0
    log.info("wake_pass", classes=sorted(classes), full=full, considered=len(wanted), moved=moved)
    return moved


def _change(store: MirroredStore, rec: JobRecord, snap: Snapshot, heads: set[str], now: datetime) -> Change | None:
    """What a pass makes of a pending job on ``snap`` at ``now``: None when it only restates the record."""
    plan = plan_for(rec, snap, seen=observed.seen_for(store, rec.request))
    nomination, lapsed = _nomination(rec, plan, snap, heads, now)
    change = change_for(rec, plan, nomination, now=now, lapsed=lapsed)
    return None if _unchanged(rec, change) else change


def _placed(rec: JobRecord, change: Change, new: JobRecord, snap: Snapshot) -> int:
    """The replicas a committed change placed or moved (its nomination aside), with their wake-up latency:
    timed from a node's heartbeat only when it came after the job last changed (a heartbeat before it
    freed nothing the job waited for: a release did, or a move)."""
    nodes = {h.node_id for h in change.place if not h.nominated} & snap.records.keys()
    beats = (snap.records[n].received_at for n in nodes)
    metrics.wake_latencies((at for at in beats if at > rec.updated_at), new.updated_at)
    return sum(1 for h in change.place if not h.nominated)


def _nomination(
    rec: JobRecord, plan: JobPlan, snap: Snapshot, heads: set[str], now: datetime
) -> tuple[tuple[Hold, ...] | None, bool]:
    """The cards to hold for ``rec`` if it is the first job of its class in this pass still waiting for
    its best option (None otherwise), and whether its hold lapses now: held past its time with no card
    freeing into it. A job whose hold lapsed is not held for again until as long has passed, so that the
    cards it sat on serve others meanwhile."""
    target = plan.target
    if target is None or target.cpu or plan.outcome == "failed":
        return None, False
    if not any(r.state != "placed" for r in plan.replicas) or target.gpu_class in heads:
        return None, False
    if rec.hold_lapsed_at is not None and now < rec.hold_lapsed_at + timedelta(seconds=C.NOMINATION_S):
        return None, False
    heads.add(target.gpu_class)
    view = take(snap.nodes_for(rec.job_id), [h for r in plan.replicas if r.moved for h in r.holds])
    holds = nominate(target, view)
    old = rec.nomination
    if old is not None and old.until <= now and nominated_cards(old.holds) == {h.node_id: h.gpus for h in holds}:
        log.info("nomination_lapsed", job_id=rec.job_id, nodes=sorted(nominated_cards(old.holds)))
        return None, True
    # nothing free to hold yet: the first card that frees wakes this pass again, and is held then
    return (holds if sum(h.gpus for h in holds) else None), False
