"""Moves from outside a plan: a lapsed lease, a lost or restarted node, release, cancel and scale. Each
reads, re-plans where it must, and commits through ``Store.transition`` like a planning job."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from planner import InvalidInput
from worker import constants as C
from worker import logs, owners
from worker.classes import class_of, clear_all, waits_on
from worker.errors import Contended, JobNotFound, StillRunning, WrongState
from worker.keys import job_of_hold
from worker.owners import ANYONE, Acting
from worker.planning import change_for, commit, nominated_cards, plan_for, readable_job, waiting_score
from worker.records import MAX_REPLICAS, JobRecord, JobState, Replica
from worker.store import Store, now_ms

log = logs.get_logger("modelplan.worker")


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
        snap = store.snapshot().copy()
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
    """The replicas on a node whose heartbeat lapsed wait again; the node leaves the pool's index. Nothing
    if its heartbeat is back. A node id two agents publish under has no heartbeat stored either (the
    heartbeat script keeps it out of the pool): its jobs go the same way, the reason saying why."""
    with store.redis.pipeline(transaction=False) as pipe:
        pipe.exists(store.keys.node(node_id))
        pipe.exists(store.keys.conflict(node_id))
        alive, conflict = pipe.execute()
    if alive:
        return 0
    why = f"node {node_id} is claimed by two agents" if conflict else f"node {node_id} went silent"
    held = store.held_on(node_id)
    jobs = sorted({job_of_hold(hid) for hid, h in held.items() if not h.unreadable})
    count = sum(lose_node(store, j, node_id, why) for j in jobs)
    for j in jobs:  # nominations on it go too
        _drop_nomination(store, j, node_id, why)
    store.forget_node_if_silent(node_id)
    log.info("node_silent", node_id=node_id, jobs=count, conflict=bool(conflict))
    return count


def _drop_nomination(store: Store, job_id: str, node_id: str, why: str) -> None:
    rec = readable_job(store, job_id)
    if rec is None or rec.nomination is None or node_id not in nominated_cards(rec.nomination.holds):
        return
    new = rec.advance(rec.state, nomination=None)
    store.transition(
        rec,
        new,
        reason=f"{why}; hold dropped",
        score=waiting_score(rec),
        pending=(waits_on(rec, rec.alternatives), waiting_score(rec)) if rec.pending else None,
        clear=[(h.node_id, h.hold_id, class_of(rec)) for h in rec.nomination.holds],
    )


def release(store: Store, job_id: str, acting: Acting = ANYONE) -> JobRecord:
    """Free everything a job holds (every replica); pending jobs that can use it are planned at once.
    ``acting``: whom the call is for; ``NotOwner`` if the job is not theirs (``worker.owners``)."""
    for _ in range(C.PLAN_ATTEMPTS):
        rec = store.job(job_id)
        if rec is None:
            raise JobNotFound(job_id)
        owners.check(rec, acting)
        if rec.state not in (JobState.PLACED, JobState.WAITING):
            raise WrongState(job_id, rec.state.value, "release", "placed or waiting")
        new = rec.advance(JobState.RELEASED, nomination=None, reason="released")
        out = store.transition(rec, new, reason="released", clear=clear_all(rec))
        if out.ok:
            log.info("job_released", job_id=job_id)
            return new
    raise Contended(job_id)


CANCELLABLE = (JobState.QUEUED, JobState.PLANNING, JobState.WAITING)


def cancel(store: Store, job_id: str, acting: Acting = ANYONE) -> JobRecord:
    """Cancel a job that is queued, being planned or waiting with no replica running, freeing the cards
    held for it; a job with a replica running is ended by ``release``. ``acting``: as for ``release``."""
    for _ in range(C.PLAN_ATTEMPTS):
        rec = store.job(job_id)
        if rec is None:
            raise JobNotFound(job_id)
        owners.check(rec, acting)
        if rec.state not in CANCELLABLE:
            raise WrongState(job_id, rec.state.value, "cancel", "queued, planning or waiting")
        running = sum(1 for r in rec.replicas if r.placement)
        if running:
            raise StillRunning(job_id, rec.state.value, running, rec.wanted)
        new = rec.advance(JobState.CANCELLED, nomination=None, worker=None, lease_until=None, reason="cancelled")
        out = store.transition(rec, new, reason="cancelled", clear=clear_all(rec))
        if out.ok:
            log.info("job_cancelled", job_id=job_id)
            return new
    raise Contended(job_id)


def check_replicas(replicas: int) -> None:
    """``InvalidInput`` unless ``replicas`` is a count a job may be scaled to (as a request may ask)."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 1 <= replicas <= MAX_REPLICAS:
        raise InvalidInput("scale", "replicas", f"must be a whole number from 1 to {MAX_REPLICAS} (given {replicas!r})")


def scale(store: Store, job_id: str, replicas: int, acting: Acting = ANYONE) -> JobRecord:
    """Ask for ``replicas`` replicas: new ones are planned now, surplus ones freed; the rest stay as they
    are. A job still queued or being planned takes the new count when it is planned. ``acting``: as for
    ``release``."""
    check_replicas(replicas)
    for _ in range(C.PLAN_ATTEMPTS):
        rec = store.job(job_id)
        if rec is None:
            raise JobNotFound(job_id)
        owners.check(rec, acting)
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
