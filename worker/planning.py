"""Planning jobs: claim, plan with the planner, commit in one step, and the moves around that (wake-up
passes, nominations, lost nodes, release, cancel, scale). Each function reads, calls the planner, and
commits through ``Store.transition``; a commit that loses a race is planned again or left to whoever won
it."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta

from planner import InvalidInput, Option
from planner.decide import Hold, JobPlan, Outcome, Running, Wait, class_key, nominate, plan_job, same_layout, take
from planner.options import rank_key
from worker import constants as C
from worker import logs, metrics
from worker.errors import BadRecord, Contended, JobNotFound, StillRunning, WrongState
from worker.keys import hold_id, job_of_hold, nomination_id
from worker.records import (
    MAX_REPLICAS,
    JobRecord,
    JobState,
    Nomination,
    Replica,
    Reservation,
    WaitRecord,
    utcnow,
)
from worker.scripts import text
from worker.store import HoldSpec, Snapshot, Store, class_of, clear_all, now_ms

log = logs.get_logger("modelplan.worker")

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
        rec = readable_job(store, job_id)
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


def readable_job(store: Store, job_id: str) -> JobRecord | None:
    """A job's record for a worker to act on; None when there is none or it does not parse (then it is
    marked failed, or left alone and reported when a newer modelplan wrote it)."""
    try:
        return store.job(job_id)
    except BadRecord as e:
        store.fail_unreadable_job(job_id, e)
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


# --- from a plan to the next record ------------------------------------------------------------------------


def _running(rec: JobRecord) -> list[Running]:
    return [
        Running(r.index, r.option, tuple(Hold(p.node_id, p.gpus, p.host_gb) for p in r.placement), r.state == "placed")
        for r in rec.replicas
    ]


def plan_for(rec: JobRecord, snap: Snapshot, wanted: int | None = None) -> JobPlan:
    req = rec.request
    return plan_job(
        req.planned_artifacts(),
        req.shape,
        snap.nodes_for(rec.job_id),
        req.context,
        replicas=wanted if wanted is not None else rec.wanted,
        fallback=req.fallback,
        running=_running(rec),
        ever_fit=rec.ever_fit,
        held_for_others=snap.held_for_others(rec.job_id),
    )


def _wait_record(w: Wait | None) -> WaitRecord | None:
    if w is None:
        return None
    return WaitRecord(kind=w.kind, option=w.option, nodes=w.nodes, missing=dict(w.missing), text=w.text)


@dataclass(frozen=True, slots=True)
class Change:
    """A plan turned into the next record and the holds to write and clear."""

    new: JobRecord
    place: tuple[HoldSpec, ...]
    clear: tuple[tuple[str, str, str], ...]
    score: float
    pending: tuple[str, float] | None

    @property
    def holds_change(self) -> bool:
        return bool(self.place or self.clear)


def change_for(
    rec: JobRecord, plan: JobPlan, nomination: tuple[Hold, ...] | None = None, *, lapsed: bool = False
) -> Change:
    """The record and holds that ``plan`` makes of ``rec``. ``nomination``: the holds to keep for it
    (None keeps none); ``lapsed``: its hold is let go for sitting idle past its time."""
    version = rec.version + 1
    old_class = class_of(rec)
    by_index = {r.index: r for r in rec.replicas}
    replicas: list[Replica] = []
    place: list[HoldSpec] = []
    clear: list[tuple[str, str, str]] = []
    for rp in plan.replicas:
        old = by_index.get(rp.index)
        if rp.moved:
            placement = tuple(
                Reservation(
                    node_id=h.node_id, hold_id=hold_id(rec.job_id, rp.index, version), gpus=h.gpus, host_gb=h.host_gb
                )
                for h in rp.holds
            )
            place += [HoldSpec(r.node_id, r.hold_id, r.gpus, r.host_gb) for r in placement]
            if old is not None:
                clear += [(r.node_id, r.hold_id, old_class) for r in old.placement]
        else:
            placement = old.placement if old is not None else ()
        replicas.append(
            Replica(index=rp.index, state=rp.state, option=rp.option, placement=placement, wait=_wait_record(rp.wait))
        )
    for d in plan.dropped:
        clear += [(r.node_id, r.hold_id, old_class) for r in by_index[d.index].placement]

    new_nomination = None
    old_nom = rec.nomination
    if old_nom is not None:
        clear += [(r.node_id, r.hold_id, old_class) for r in old_nom.holds]
    if nomination and plan.target is not None:
        holds = tuple(
            Reservation(node_id=h.node_id, hold_id=nomination_id(rec.job_id), gpus=h.gpus, host_gb=0.0)
            for h in nomination
        )
        grew = old_nom is None or _nominated(old_nom.holds) != _nominated(holds)
        until = utcnow() + timedelta(seconds=C.NOMINATION_S) if grew or old_nom is None else old_nom.until
        new_nomination = Nomination(holds=holds, wanted=plan.target.gpus_per_node, until=until)
        place += [HoldSpec(h.node_id, h.hold_id, h.gpus, 0.0, nominated=True) for h in holds]

    state = {"placed": JobState.PLACED, "waiting": JobState.WAITING, "failed": JobState.FAILED}[plan.outcome]
    reason = plan.reason
    if lapsed and old_nom is not None:
        idle = ", ".join(sorted(_nominated(old_nom.holds)))
        reason += f"; its hold on {idle} lapsed with no card freeing for {C.NOMINATION_S} s"
    if new_nomination is not None:
        nodes = ", ".join(f"{h.node_id} ({h.gpus} of {new_nomination.wanted})" for h in new_nomination.holds)
        reason += f"; holding cards on {nodes} for it until {new_nomination.until.isoformat(timespec='seconds')}"
    new = rec.advance(
        state,
        option=plan.target,
        replicas=tuple(replicas),
        wanted=len(replicas) or rec.wanted,
        alternatives=plan.alternatives[: C.ALTERNATIVES_KEPT],
        nomination=new_nomination,
        reason=reason,
        attempts=rec.attempts + 1,
        worker=None,
        lease_until=None,
        ever_fit=rec.ever_fit or plan.target is not None,
        hold_lapsed_at=utcnow() if lapsed else rec.hold_lapsed_at,
    )
    pending = (waits_on(new, plan.alternatives), waiting_score(new)) if new.pending else None
    score = waiting_score(new) if state is JobState.WAITING else now_ms()
    return Change(new, tuple(place), tuple(clear), score, pending)


def _nominated(holds: Sequence[Reservation]) -> dict[str, int]:
    return {h.node_id: h.gpus for h in holds}


def hardware_rank(o: Option) -> tuple[object, ...]:
    """What the ranking puts first, the hardware: CPU or card, cards, nodes, precision. Whether it is free
    now, and the room left, only break ties within it."""
    return rank_key(o)[:4]


def waits_on(rec: JobRecord, alternatives: Sequence[Option]) -> str:
    """The classes whose freed capacity a pending job is woken by, comma-joined as ``pending:for`` holds
    them: every class of an option ranked equal to its best on the hardware, since freed capacity there
    makes that option the best (free now breaks the tie); with a fallback, every class it can run on;
    ``any`` when it has no option."""
    best = rec.option
    if best is None:
        return "any"
    same = [o for o in alternatives if rec.request.fallback or hardware_rank(o) == hardware_rank(best)]
    return ",".join(sorted({class_key(o) for o in (best, *same)}))


def woken(pending_for: str | None, freed: set[str]) -> bool:
    """Whether a job pending on ``pending_for`` is woken by capacity freed in the ``freed`` classes."""
    if pending_for is None:
        return True
    wants = set(pending_for.split(","))
    return "any" in wants or bool(wants & {c for f in freed for c in f.split(",")})


def commit(store: Store, rec: JobRecord, change: Change, snap: Snapshot) -> tuple[str, JobRecord | None]:
    """Commit a change: ``("ok", new)``, or the script's code and None."""
    new = change.new
    started = time.perf_counter()
    out = store.transition(
        rec,
        new,
        reason=new.reason,
        score=change.score,
        pending=change.pending,
        epoch=snap.epoch,
        place=change.place,
        clear=change.clear,
    )
    metrics.observe("commit_seconds", time.perf_counter() - started)
    if not out.ok:
        if out.code not in ("stale", "gone"):
            metrics.count("commit_conflicts")
        return out.code, None
    snap.apply(change.place, change.clear)
    if out.wake:
        store.enqueue_pass()
    log.info(
        f"job_{new.state.value}",
        job_id=new.job_id,
        summary=new.summary,
        option=new.option.label if new.option else None,
        nodes=[r.node_id for r in new.placement],
        reason=new.reason,
    )
    return "ok", new


def settle(store: Store, rec: JobRecord) -> JobRecord | None:
    """Plan a job this worker holds until a commit holds: on a card taken since the snapshot, plan again
    (up to ``PLAN_ATTEMPTS``); the last time, what could not be placed waits."""
    for attempt in range(1, C.PLAN_ATTEMPTS + 1):
        # the first try may plan on a read a few jobs old: its commit re-checks what it relies on
        snap = store.recent_snapshot(C.SNAPSHOT_REUSE_S if attempt == 1 else 0.0)
        plan = plan_for(rec, snap)
        if attempt == C.PLAN_ATTEMPTS:
            plan = _without_new_holds(plan)
        code, new = commit(store, rec, change_for(rec, plan), snap)
        if new is not None:
            return new
        if code in ("stale", "gone"):
            log.info("job_moved_meanwhile", job_id=rec.job_id, code=code)
            return None
        log.info("commit_conflict", job_id=rec.job_id, code=code, attempt=attempt)
    return None


def _without_new_holds(plan: JobPlan) -> JobPlan:
    """``plan`` with every replica that was to take new cards left waiting instead."""
    replicas = tuple(
        replace(r, state="waiting", option=None, holds=(), moved=False) if r.moved and r.holds else r
        for r in plan.replicas
    )
    outcome: Outcome = "placed" if replicas and all(r.holds for r in replicas) else "waiting"
    return replace(
        plan,
        replicas=replicas,
        outcome=outcome if plan.outcome != "failed" else "failed",
        reason=plan.reason + "; its cards were taken each time it was planned",
    )


# --- waking pending jobs -------------------------------------------------------------------------------


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
    if old is None or new is None or _nominated(old.holds) != _nominated(new.holds):
        return False
    return all(h.nominated for h in change.place) and {c[1] for c in change.clear} == {old.holds[0].hold_id}


def wake_pass(store: Store, full: bool = False) -> int:
    """Re-plan the pending jobs that freed capacity could serve, in priority then arrival order; place
    those that now fit, move fallbacks onto their best, and hold cards for the job at the head of each
    class. Returns how many replicas were placed or moved."""
    classes = store.take_wake()
    full = full or "*" in classes
    ids = store.pending_ids()
    if not ids:
        return 0
    pending_for = store.redis.hmget(store.keys.pending_for, ids)
    wanted = [
        j for j, c in zip(ids, pending_for, strict=True) if full or woken(None if c is None else text(c), classes)
    ]
    snap = store.snapshot()
    moved = 0
    heads: set[str] = set()
    for job_id, rec in zip(wanted, store.jobs(wanted), strict=True):
        if isinstance(rec, BadRecord):
            store.fail_unreadable_job(job_id, rec)
            continue
        if rec is None or not rec.pending:
            continue
        for _ in range(2):
            plan = plan_for(rec, snap)
            nomination, lapsed = _nomination(rec, plan, snap, heads)
            change = change_for(rec, plan, nomination, lapsed=lapsed)
            if _unchanged(rec, change):
                break
            code, new = commit(store, rec, change, snap)
            if new is not None:
                moved += len(change.place) - len(nomination or ())
                nodes = {h.node_id for h in change.place if not h.nominated} & snap.records.keys()
                metrics.wake_latencies((snap.records[n].received_at for n in nodes), new.updated_at)
                break
            if code in ("stale", "gone"):
                break
            snap = store.snapshot()
            fresh = readable_job(store, rec.job_id)
            if fresh is None or not fresh.pending:
                break
            rec = fresh
    log.info("wake_pass", classes=sorted(classes), full=full, considered=len(wanted), moved=moved)
    return moved


def _nomination(rec: JobRecord, plan: JobPlan, snap: Snapshot, heads: set[str]) -> tuple[tuple[Hold, ...] | None, bool]:
    """The cards to hold for ``rec`` if it is the first job of its class in this pass still waiting for
    its best option (None otherwise), and whether its hold lapses now: held past its time with no card
    freeing into it. A job whose hold lapsed is not held for again until as long has passed, so that the
    cards it sat on serve others meanwhile."""
    target = plan.target
    if target is None or target.cpu or plan.outcome == "failed":
        return None, False
    if not any(r.state != "placed" for r in plan.replicas) or target.gpu_class in heads:
        return None, False
    now = utcnow()
    if rec.hold_lapsed_at is not None and now < rec.hold_lapsed_at + timedelta(seconds=C.NOMINATION_S):
        return None, False
    heads.add(target.gpu_class)
    view = take(snap.nodes_for(rec.job_id), [h for r in plan.replicas if r.moved for h in r.holds])
    holds = nominate(target, view)
    old = rec.nomination
    if old is not None and old.until <= now and _nominated(old.holds) == {h.node_id: h.gpus for h in holds}:
        log.info("nomination_lapsed", job_id=rec.job_id, nodes=sorted(_nominated(old.holds)))
        return None, True
    # nothing free to hold yet: the first card that frees wakes this pass again, and is held then
    return (holds if sum(h.gpus for h in holds) else None), False


# --- moves from outside a plan -----------------------------------------------------------------------------


def requeue(store: Store, job_id: str, reason: str, when: Callable[[JobRecord], bool]) -> bool:
    """Send a job back through planning (freeing all it holds) if ``when`` holds for its record."""
    for _ in range(C.PLAN_ATTEMPTS):
        rec = readable_job(store, job_id)
        if rec is None or not when(rec):
            return False
        new = rec.advance(JobState.QUEUED, replicas=(), nomination=None, worker=None, lease_until=None, reason=reason)
        out = store.transition(rec, new, reason=reason, clear=clear_all(rec))
        if out.ok:
            store.enqueue_plan(job_id)
            if out.wake:
                store.enqueue_pass()
            log.info("job_requeued", job_id=job_id, reason=reason)
            return True
        if out.code == "gone":
            return False
    raise Contended(job_id)


def lose_node(store: Store, job_id: str, node_id: str, reason: str, boot_id: str | None = None) -> bool:
    """The replicas of ``job_id`` on ``node_id`` (placed before ``boot_id``, if given) lost their node: they
    are planned again at once, in the same step that frees what they held; its other replicas run on."""
    for _ in range(C.PLAN_ATTEMPTS):
        rec = readable_job(store, job_id)
        if rec is None or rec.state.final or rec.state in (JobState.QUEUED, JobState.PLANNING):
            return False
        held = store.held_on(node_id)
        lost = {
            r.index
            for r in rec.replicas
            for p in r.placement
            if p.node_id == node_id
            and (boot_id is None or held.get(p.hold_id) is None or held[p.hold_id].boot_id != boot_id)
        }
        if not lost:
            return False
        cls = class_of(rec)
        lost_holds = [(p.node_id, p.hold_id, cls) for r in rec.replicas if r.index in lost for p in r.placement]
        bare = rec.model_copy(
            update={
                "replicas": tuple(
                    Replica(index=r.index, state="waiting") if r.index in lost else r for r in rec.replicas
                )
            }
        )
        snap = store.snapshot()
        snap.apply((), lost_holds)  # planned as if already freed, as they are by this very step
        change = change_for(bare, plan_for(bare, snap))
        new = change.new.model_copy(update={"reason": f"{reason}; {change.new.reason}"})
        code, _ = commit(store, rec, replace(change, new=new, clear=(*lost_holds, *change.clear)), snap)
        if code == "ok":
            log.info(
                "replicas_lost_node",
                job_id=job_id,
                node_id=node_id,
                replicas=sorted(lost),
                reason=reason,
                state=new.state.value,
            )
            return True
        if code == "gone":
            return False
    raise Contended(job_id)


def node_restarted(store: Store, node_id: str, boot_id: str) -> int:
    """The replicas placed on ``node_id`` before it booted as ``boot_id`` are gone with that boot. Only
    when the node's stored heartbeat reports that boot: a restart no heartbeat shows changes nothing."""
    if store.node_boot(node_id) != boot_id:
        log.warning("restart_not_seen", node_id=node_id, boot_id=boot_id)
        return 0
    jobs = {job_of_hold(hid) for hid, h in store.held_on(node_id).items() if not h.nominated and not h.unreadable}
    return sum(lose_node(store, j, node_id, f"node {node_id} restarted", boot_id) for j in sorted(jobs))


def node_silent(store: Store, node_id: str) -> int:
    """The replicas on a node whose heartbeat lapsed wait again; the node leaves the pool's index."""
    held = store.held_on(node_id)
    jobs = sorted({job_of_hold(hid) for hid, h in held.items() if not h.unreadable})
    count = sum(lose_node(store, j, node_id, f"node {node_id} went silent") for j in jobs)
    for j in jobs:  # nominations on it go too
        _drop_nomination(store, j, node_id)
    store.forget_node_if_silent(node_id)
    log.info("node_silent", node_id=node_id, jobs=count)
    return count


def _drop_nomination(store: Store, job_id: str, node_id: str) -> None:
    rec = readable_job(store, job_id)
    if rec is None or rec.nomination is None or node_id not in _nominated(rec.nomination.holds):
        return
    new = rec.advance(rec.state, nomination=None)
    store.transition(
        rec,
        new,
        reason=f"node {node_id} went silent; hold dropped",
        score=waiting_score(rec),
        pending=(waits_on(rec, rec.alternatives), waiting_score(rec)) if rec.pending else None,
        clear=[(h.node_id, h.hold_id, class_of(rec)) for h in rec.nomination.holds],
    )


def release(store: Store, job_id: str) -> JobRecord:
    """Free everything a job holds (every replica); pending jobs that can use it are planned at once."""
    for _ in range(C.PLAN_ATTEMPTS):
        rec = store.job(job_id)
        if rec is None:
            raise JobNotFound(job_id)
        if rec.state not in (JobState.PLACED, JobState.WAITING):
            raise WrongState(job_id, rec.state.value, "release", "placed or waiting")
        new = rec.advance(JobState.RELEASED, nomination=None, reason="released")
        out = store.transition(rec, new, reason="released", clear=clear_all(rec))
        if out.ok:
            if out.wake:
                store.enqueue_pass()
            log.info("job_released", job_id=job_id)
            return new
    raise Contended(job_id)


CANCELLABLE = (JobState.QUEUED, JobState.PLANNING, JobState.WAITING)


def cancel(store: Store, job_id: str) -> JobRecord:
    """Cancel a job that is queued, being planned or waiting with no replica running, freeing the cards
    held for it; a job with a replica running is ended by ``release``."""
    for _ in range(C.PLAN_ATTEMPTS):
        rec = store.job(job_id)
        if rec is None:
            raise JobNotFound(job_id)
        if rec.state not in CANCELLABLE:
            raise WrongState(job_id, rec.state.value, "cancel", "queued, planning or waiting")
        running = sum(1 for r in rec.replicas if r.placement)
        if running:
            raise StillRunning(job_id, rec.state.value, running, rec.wanted)
        new = rec.advance(JobState.CANCELLED, nomination=None, worker=None, lease_until=None, reason="cancelled")
        out = store.transition(rec, new, reason="cancelled", clear=clear_all(rec))
        if out.ok:
            if out.wake:
                store.enqueue_pass()
            log.info("job_cancelled", job_id=job_id)
            return new
    raise Contended(job_id)


def scale(store: Store, job_id: str, replicas: int) -> JobRecord:
    """Ask for ``replicas`` replicas: new ones are planned now, surplus ones freed; the rest stay as they
    are. A job still queued or being planned takes the new count when it is planned."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 1 <= replicas <= MAX_REPLICAS:
        raise InvalidInput("scale", "replicas", f"must be a whole number from 1 to {MAX_REPLICAS} (given {replicas!r})")
    for _ in range(C.PLAN_ATTEMPTS):
        rec = store.job(job_id)
        if rec is None:
            raise JobNotFound(job_id)
        if rec.state.final:
            raise WrongState(job_id, rec.state.value, "scale", "queued, planning, placed or waiting")
        if rec.state in (JobState.QUEUED, JobState.PLANNING):
            new = rec.advance(rec.state, wanted=replicas, reason=f"scaled to {replicas}")
            if store.transition(rec, new, reason=new.reason, score=now_ms()).ok:
                return new
            continue
        snap = store.snapshot()
        change = change_for(rec, plan_for(rec, snap, wanted=replicas))
        code, new_rec = commit(store, rec, change, snap)
        if new_rec is not None:
            return new_rec
        if code == "gone":
            raise JobNotFound(job_id)
    raise Contended(job_id)
