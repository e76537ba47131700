"""Moves from outside a plan that the worker makes itself: a lapsed lease, a lost or restarted node. Each
reads, re-plans where it must, and commits through ``Store.transition`` like a planning job, tried again
from a fresh read when it loses a race (``operations.with_retries``). What a caller asks (release, cancel,
scale) is ``worker.operations``'."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from worker import logs, observed
from worker.classes import class_of, clear_all, waits_on
from worker.ids import job_of_hold
from worker.mirrored import MirroredStore
from worker.operations import AGAIN, Again, with_retries
from worker.planning import change_for, commit, nominated_cards, plan_for, readable_job, waiting_score
from worker.records import JobRecord, JobState, Replica, utcnow
from worker.replies import Reply

log = logs.get_logger("modelplan.worker")


def requeue(store: MirroredStore, job_id: str, reason: str, when: Callable[[JobRecord], bool]) -> bool:
    """Send a job back through planning (freeing all it holds) if ``when`` holds for its record."""

    def attempt() -> bool | Again:
        rec = readable_job(store, job_id)
        if rec is None or not when(rec):
            return False
        new = rec.advance(
            JobState.QUEUED, at=utcnow(), replicas=(), nomination=None, worker=None, lease_until=None, reason=reason
        )
        out = store.transition(rec, new, reason=reason, clear=clear_all(rec))
        if out.ok:
            store.enqueue_plan(job_id)
            log.info("job_requeued", job_id=job_id, reason=reason)
            return True
        return False if out.code is Reply.GONE else AGAIN

    return with_retries(job_id, attempt)


def lose_node(store: MirroredStore, job_id: str, node_id: str, reason: str, boot_id: str | None = None) -> bool:
    """The replicas of ``job_id`` on ``node_id`` (placed before ``boot_id``, if given) lost their node: they
    are planned again at once, in the same step that frees what they held; its other replicas run on."""

    def on_node(rec: JobRecord) -> set[int]:
        held = store.held_on(node_id)
        return {
            r.index
            for r in rec.replicas
            for p in r.placement
            if p.node_id == node_id
            and (boot_id is None or held.get(p.hold_id) is None or held[p.hold_id].boot_id != boot_id)
        }

    return lose_replicas(store, job_id, reason, on_node, node_id=node_id)


def lose_replicas(
    store: MirroredStore,
    job_id: str,
    reason: str,
    lost_of: Callable[[JobRecord], set[int]],
    touch: Callable[[JobRecord], JobRecord] | None = None,
    **said: str,
) -> bool:
    """The replicas of ``job_id`` that ``lost_of`` names (by index, given its record as read, before it
    reads anything else) are planned again at once, in the same step that frees what they held; its other
    replicas run on. ``touch``: what else changes in the record committed (``worker.ended`` notes a start
    failure on the replica). ``said``: more fields for the log line."""

    def attempt() -> bool | Again:
        rec = readable_job(store, job_id)
        if rec is None or rec.state.final or rec.state in (JobState.QUEUED, JobState.PLANNING):
            return False
        lost = lost_of(rec)
        if not lost:
            return False
        cls = class_of(rec)
        lost_holds = [(p.node_id, p.hold_id, cls) for r in rec.replicas if r.index in lost for p in r.placement]
        bare = rec.model_copy(
            update={
                "replicas": tuple(
                    Replica(index=r.index, state="waiting", start_failures=r.start_failures) if r.index in lost else r
                    for r in rec.replicas
                )
            }
        )
        snap = store.snapshot().copy()
        snap.apply((), lost_holds)  # planned as if already freed, as they are by this very step
        change = change_for(bare, plan_for(bare, snap, seen=observed.seen_for(store, rec.request)), now=utcnow())
        new = change.new.model_copy(update={"reason": f"{reason}; {change.new.reason}"})
        new = touch(new) if touch is not None else new
        code, _ = commit(store, rec, replace(change, new=new, clear=(*lost_holds, *change.clear)), snap)
        if code is Reply.OK:
            log.info(
                "replicas_lost_node", job_id=job_id, replicas=sorted(lost), reason=reason, state=new.state.value, **said
            )
            return True
        return False if code is Reply.GONE else AGAIN

    return with_retries(job_id, attempt)


def node_restarted(store: MirroredStore, node_id: str, boot_id: str) -> int:
    """The replicas placed on ``node_id`` before it booted as ``boot_id`` are gone with that boot. Only
    when the node's stored heartbeat reports that boot: a restart no heartbeat shows changes nothing."""
    if store.node_boot(node_id) != boot_id:
        log.warning("restart_not_seen", node_id=node_id, boot_id=boot_id)
        return 0
    jobs = {job_of_hold(hid) for hid, h in store.held_on(node_id).items() if not h.nominated and not h.unreadable}
    return sum(lose_node(store, j, node_id, f"node {node_id} restarted", boot_id) for j in sorted(jobs))


def node_silent(store: MirroredStore, node_id: str) -> int:
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


def _drop_nomination(store: MirroredStore, job_id: str, node_id: str, why: str) -> None:
    rec = readable_job(store, job_id)
    if rec is None or rec.nomination is None or node_id not in nominated_cards(rec.nomination.holds):
        return
    new = rec.advance(rec.state, at=utcnow(), nomination=None)
    store.transition(
        rec,
        new,
        reason=f"{why}; hold dropped",
        score=waiting_score(rec),
        pending=(waits_on(rec, rec.alternatives), waiting_score(rec)) if rec.pending else None,
        clear=[(h.node_id, h.hold_id, class_of(rec)) for h in rec.nomination.holds],
    )
