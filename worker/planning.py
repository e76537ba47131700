"""Planning a job: claim it, plan it with the planner on the worker's mirror of the pool, turn the plan into
the next record (``change_for``) and commit it in one step (``commit``, ``commit_all``); a commit that
loses a race is planned again or left to whoever won it. The wake-up pass is ``worker.waking``'s; moves
the worker makes from outside a plan (lost nodes, lapsed leases) are ``worker.moves``'; what a caller
asks (release, cancel, scale, retry) is ``worker.operations``'."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from planner.decide import Hold, JobPlan, ReplicaPlan, Running, Wait, plan_job
from planner.decide import Outcome as PlanOutcome
from planner.observed import Seen
from planner.settings import NO_SETTINGS, merged
from worker import apikeys, logs, metrics, observed
from worker import calls as calls_
from worker import constants as C
from worker.classes import class_of, waits_on
from worker.config import estimate, settings
from worker.errors import BadRecord
from worker.ids import hold_id, nomination_id
from worker.mirrored import MirroredStore
from worker.pool import HoldSpec, Snapshot, Staged
from worker.records import (
    JobRecord,
    JobState,
    Nomination,
    Replica,
    Reservation,
    WaitRecord,
    utcnow,
)
from worker.replies import Reply
from worker.store import Outcome

log = logs.get_logger("modelplan.worker")

FAULT_PAUSE_ENV = "MODELPLAN_FAULT_PAUSE_AFTER_CLAIM_S"
"""Fault injection for tests: a worker pauses this long after claiming a job, so that a test can kill
it mid-plan. Unset in production."""


def waiting_score(rec: JobRecord) -> float:
    """Priority first (higher first), then arrival."""
    return float((C.PRIORITY_MAX - rec.request.priority) * (1 << 40) + rec.seq)


def claim(store: MirroredStore, job_id: str, worker: str) -> JobRecord | None:
    """Take a queued job (or one whose planner's lease ran out) into ``planning`` for ``worker``; None
    when there is nothing to do: another worker has it, or it was planned already. The pool is brought up
    to date in the same round trip."""
    try:
        got = store.claim_and_pool(job_id, worker)
    except BadRecord as e:
        store.fail_unreadable_job(job_id, e)
        return None
    for attempt in range(C.PLAN_ATTEMPTS):
        if attempt:
            got = None if (rec := readable_job(store, job_id, with_pool=True)) is None else (False, rec)
        if got is None:
            log.warning("job_missing", job_id=job_id)
            return None
        claimed, rec = got
        if claimed:
            return rec
        # not a queued record as the script takes one: decided here, in full
        now = utcnow()
        expired = rec.state is JobState.PLANNING and rec.lease_until is not None and rec.lease_until < now
        if rec.state is not JobState.QUEUED and not expired:
            log.info("job_already_handled", job_id=job_id, state=rec.state.value)
            return None
        until = now + timedelta(milliseconds=C.LEASE_MS)
        new = rec.advance(JobState.PLANNING, at=now, worker=worker, lease_until=until)
        out = store.transition(rec, new, reason=f"planning on {worker}", score=until.timestamp() * 1000)
        if out.ok:
            return new
        if out.code is Reply.GONE:
            return None
    return None


def readable_job(store: MirroredStore, job_id: str, *, with_pool: bool = False) -> JobRecord | None:
    """A job's record for a worker to act on; None when there is none or it does not parse (then it is
    marked failed, or left alone and reported when a newer modelplan wrote it). ``with_pool``: the pool
    is brought up to date in the same round trip, for a plan about to be made."""
    try:
        return store.job_and_pool(job_id) if with_pool else store.job(job_id)
    except BadRecord as e:
        store.fail_unreadable_job(job_id, e)
        return None


def plan_queued(store: MirroredStore, job_id: str, worker: str) -> JobRecord | None:
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


def plan_for(rec: JobRecord, snap: Snapshot, wanted: int | None = None, seen: Sequence[Seen] = ()) -> JobPlan:
    """A plan for ``rec`` on ``snap``, counted with what its model's engines were seen to hold
    (``seen``: ``worker.observed.seen_for``)."""
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
        estimate=req.estimate or estimate(),
        settings=merged(req.settings or NO_SETTINGS, settings()),
        seen=seen,
        quorum=observed.quorum(),
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
    rec: JobRecord,
    plan: JobPlan,
    nomination: tuple[Hold, ...] | None = None,
    *,
    now: datetime,
    lapsed: bool = False,
) -> Change:
    """The record and holds that ``plan`` makes of ``rec``, at ``now`` (the caller's clock: the record's
    time, its nomination's end, its score when it is not waiting). ``nomination``: the holds to keep for it
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
        # what its engine does stays with the hold it was reported of; what start failures taught stays too
        kept = old.engine if old is not None and old.engine is not None and not rp.moved else None
        replicas.append(
            Replica(
                index=rp.index,
                state=rp.state,
                option=rp.option,
                placement=placement,
                wait=_wait_record(rp.wait),
                engine=kept,
                start_failures=old.start_failures if old is not None else 0,
            )
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
        grew = old_nom is None or nominated_cards(old_nom.holds) != nominated_cards(holds)
        until = now + timedelta(seconds=C.NOMINATION_S) if grew or old_nom is None else old_nom.until
        new_nomination = Nomination(holds=holds, wanted=plan.target.gpus_per_node, until=until)
        place += [HoldSpec(h.node_id, h.hold_id, h.gpus, 0.0, nominated=True) for h in holds]

    state = {"placed": JobState.PLACED, "waiting": JobState.WAITING, "failed": JobState.FAILED}[plan.outcome]
    reason = plan.reason
    if lapsed and old_nom is not None:
        idle = ", ".join(sorted(nominated_cards(old_nom.holds)))
        reason += f"; its hold on {idle} lapsed with no card freeing for {C.NOMINATION_S} s"
    if new_nomination is not None:
        nodes = ", ".join(f"{h.node_id} ({h.gpus} of {new_nomination.wanted})" for h in new_nomination.holds)
        reason += f"; holding cards on {nodes} for it until {new_nomination.until.isoformat(timespec='seconds')}"
    new = rec.advance(
        state,
        at=now,
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
        hold_lapsed_at=now if lapsed else rec.hold_lapsed_at,
    )
    pending = (waits_on(new, plan.alternatives), waiting_score(new)) if new.pending else None
    score = waiting_score(new) if state is JobState.WAITING else int(now.timestamp() * 1000)
    return Change(new, tuple(place), tuple(clear), score, pending)


def nominated_cards(holds: Sequence[Reservation]) -> dict[str, int]:
    return {h.node_id: h.gpus for h in holds}


def commit(store: MirroredStore, rec: JobRecord, change: Change, snap: Snapshot) -> tuple[Reply, JobRecord | None]:
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
    return _committed(store, change, out, snap)


def commit_all(
    store: MirroredStore, changes: Sequence[tuple[JobRecord, Change, Staged]], snap: Snapshot
) -> list[tuple[Reply, JobRecord | None]]:
    """``commit`` for several jobs' changes in one round trip, each committed or refused on its own. Each
    was staged in ``snap`` as it was planned (``Snapshot.stage``), so that the plans after it counted it;
    each refused is taken back (and all of them if the round trip fails)."""
    started = time.perf_counter()
    calls = [
        calls_.transition_call(
            store.keys,
            rec,
            change.new,
            reason=change.new.reason,
            score=change.score,
            pending=change.pending,
            epoch=snap.epoch,
            place=apikeys.keyed(store.redis, store.keys, change.new.job_id, change.place),
            clear=change.clear,
        )
        for rec, change, _ in changes
    ]
    try:
        outs = store.transitions(calls)
    except BaseException:
        for _, _, staged in reversed(changes):
            snap.unstage(staged)  # what did commit comes back with the pool's changes
        raise
    metrics.observe("commit_seconds", time.perf_counter() - started)
    done = []
    for (_, change, staged), out in zip(changes, outs, strict=True):
        if not out.ok:
            snap.unstage(staged)
        done.append(_committed(store, change, out, snap))
    return done


def _committed(store: MirroredStore, change: Change, out: Outcome, snap: Snapshot) -> tuple[Reply, JobRecord | None]:
    """What a commit's answer means: ``("ok", new)``, counted in ``snap`` and logged; or the script's code
    and None."""
    new = change.new
    if not out.ok:
        if out.code not in (Reply.STALE, Reply.GONE):
            metrics.count("commit_conflicts")
        if out.code in (Reply.FULL, Reply.SILENT):  # the pool this plan saw was wrong about that node: read it anew
            store.reread_node(out.detail)
        return out.code, None
    snap.apply(change.place, change.clear)
    log.info(
        f"job_{new.state.value}",
        job_id=new.job_id,
        summary=new.summary,
        option=new.option.label if new.option else None,
        nodes=[r.node_id for r in new.placement],
        reason=new.reason,
    )
    return Reply.OK, new


def settle(store: MirroredStore, rec: JobRecord) -> JobRecord | None:
    """Plan a job this worker holds until a commit holds: on a card taken since the snapshot, plan again
    (up to ``PLAN_ATTEMPTS``); the last time, what could not be placed waits."""
    for attempt in range(1, C.PLAN_ATTEMPTS + 1):
        # the first try plans on the read made with the job's record (``claim``), or one a moment old: its
        # commit re-checks what it relies on
        snap = store.recent_snapshot(C.SNAPSHOT_REUSE_S if attempt == 1 else 0.0)
        seen = observed.seen_for(store, rec.request)
        plan = plan_for(rec, snap, seen=seen)
        if plan.outcome == "failed" and attempt == 1:
            # a failure is final and its commit re-checks nothing: decided on the pool as it is now (a node
            # that can hold the job may have joined since the reused read)
            snap = store.snapshot()
            plan = plan_for(rec, snap, seen=seen)
        if attempt == C.PLAN_ATTEMPTS:
            plan = _without_new_holds(plan)
        code, new = commit(store, rec, change_for(rec, plan, now=utcnow()), snap)
        if new is not None:
            return new
        if code in (Reply.STALE, Reply.GONE):
            log.info("job_moved_meanwhile", job_id=rec.job_id, code=code)
            return None
        log.info("commit_conflict", job_id=rec.job_id, code=code, attempt=attempt)
    return None


def _taken(r: ReplicaPlan) -> Wait | None:
    """Why a replica that was to be placed waits when its cards were taken each time: for its option, on
    the nodes it was to take, each lacking (as far as this worker knows) what it was to take there."""
    o = r.option
    if o is None:
        return None
    lacks = tuple((h.node_id, math.ceil(h.host_gb) if o.cpu else h.gpus) for h in r.holds)
    why = "its cards were taken each time it was planned"
    return Wait("resources", o, tuple(n for n, _ in lacks), lacks, f"waiting for {o.label} for {o.artifact}: {why}")


def _without_new_holds(plan: JobPlan) -> JobPlan:
    """``plan`` with every replica that was to take new cards left waiting instead: one that was to be
    placed waits for the cards it was to take, which other jobs took each time it was planned."""
    replicas = tuple(
        replace(r, state="waiting", option=None, holds=(), moved=False, wait=r.wait or _taken(r))
        if r.moved and r.holds
        else r
        for r in plan.replicas
    )
    outcome: PlanOutcome = "placed" if replicas and all(r.holds for r in replicas) else "waiting"
    return replace(
        plan,
        replicas=replicas,
        outcome=outcome if plan.outcome != "failed" else "failed",
        reason=plan.reason + "; its cards were taken each time it was planned",
    )
