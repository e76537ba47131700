"""Scaling a job: how many replicas it may be asked for (``check_replicas``), new ones planned and surplus
ones freed (``scale``), and a job kept with none (``to_zero``); a client's count of replicas reserved before
(``reserve``). ``worker.operations.Operations.scale`` carries it out for a direct call and a stream entry
alike."""

from __future__ import annotations

from collections.abc import Callable

from planner import InvalidInput
from worker import logs, observed, owners
from worker.classes import clear_all
from worker.errors import JobNotFound, WrongState
from worker.mirrored import MirroredStore
from worker.owners import ANYONE, Acting, Owned
from worker.planning import change_for, commit, plan_for
from worker.records import MAX_REPLICAS, JobRecord, JobState, utcnow
from worker.replies import Reply
from worker.retries import AGAIN, Again, with_retries
from worker.store import Store, now_ms

log = logs.get_logger("modelplan.worker")


def check_replicas(replicas: int) -> None:
    """``InvalidInput`` unless ``replicas`` is a count a job may be scaled to: as a request may ask, or 0
    (``SCALED_TO_ZERO``)."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 0 <= replicas <= MAX_REPLICAS:
        raise InvalidInput("scale", "replicas", f"must be a whole number from 0 to {MAX_REPLICAS} (given {replicas!r})")


SCALED_TO_ZERO = "scaled to 0: its replicas were freed; scaling it up plans it again"
"""The reason of a job scaled to zero replicas. It is kept: ``placed`` with no replica (every one of the
none it wants is placed), holding nothing and pending on nothing, so that no plan, wake-up or sweep takes
it up until it is scaled up again, which plans it as a placed job's new replicas are planned."""


def scale(store: MirroredStore, job_id: str, replicas: int, acting: Acting = ANYONE) -> JobRecord:
    """Ask for ``replicas`` replicas: new ones are planned now, surplus ones freed; the rest stay as they
    are. A job still queued or being planned takes the new count when it is planned. 0 frees every replica
    and whatever is held for the job, in one step, whatever its state, and keeps the job (``to_zero``).
    ``acting``: whom the call is for; ``NotOwner`` if the job is not theirs (``worker.owners``)."""
    check_replicas(replicas)

    def attempt() -> JobRecord | Again:
        rec = store.job(job_id)
        if rec is None:
            raise JobNotFound(job_id)
        owners.check(rec, acting)
        if rec.state.final:
            raise WrongState(job_id, rec.state.value, "scale", "queued, planning, placed or waiting")
        if replicas == 0:
            return to_zero(store, rec)
        if rec.state in (JobState.QUEUED, JobState.PLANNING):
            new = rec.advance(rec.state, at=utcnow(), wanted=replicas, reason=f"scaled to {replicas}")
            return new if store.transition(rec, new, reason=new.reason, score=now_ms()).ok else AGAIN
        snap = store.snapshot()
        seen = observed.seen_for(store, rec.request)
        change = change_for(rec, plan_for(rec, snap, wanted=replicas, seen=seen), now=utcnow())
        code, new_rec = commit(store, rec, change, snap)
        if new_rec is not None:
            return new_rec
        if code is Reply.GONE:
            raise JobNotFound(job_id)
        return AGAIN

    return with_retries(job_id, attempt)


def to_zero(store: Store, rec: JobRecord) -> JobRecord | Again:
    """``rec`` scaled to zero replicas (``SCALED_TO_ZERO``), committed against its version: its replicas'
    reservations and its nomination cleared in the same step as the record (a worker planning it finds its
    commit stale; its queue entry finds it no longer queued), its classes woken for what that frees. A job
    at zero already is left as it is."""
    if rec.state is JobState.PLACED and rec.wanted == 0 and not rec.holds:
        return rec
    new = rec.advance(
        JobState.PLACED,
        at=utcnow(),
        wanted=0,
        replicas=(),
        nomination=None,
        worker=None,
        lease_until=None,
        reason=SCALED_TO_ZERO,
    )
    out = store.transition(rec, new, reason=SCALED_TO_ZERO, score=now_ms(), clear=clear_all(rec))
    if out.code is Reply.GONE:
        raise JobNotFound(rec.job_id)
    if not out.ok:
        return AGAIN
    log.info("job_scaled_to_zero", job_id=rec.job_id, freed=len(rec.holds))
    return new


def reserve(owned: Owned, job_id: str, replicas: int, bound: Callable[[], None] | None = None) -> None:
    """Count ``replicas`` for ``job_id`` in its client's count before it is scaled: ``NotOwner`` if the job
    is not that client's, then whatever ``bound`` raises (a bound on one job), then ``OverQuota`` if past
    the client's limit; nothing is counted when it raises. A job's owner never changes, so its record is
    read unwatched."""
    store = owned.store
    rec = store.job(job_id)
    if rec is None:
        raise JobNotFound(job_id)
    owners.check(rec, owned.client_id)
    if bound is not None:
        bound()

    def attempt() -> None:
        with store.redis.pipeline(transaction=True) as pipe:
            pipe.watch(owned.key)  # type: ignore[no-untyped-call]
            write = owned.admit(pipe, job_id, replicas)
            pipe.multi()
            write(pipe)
            pipe.execute()

    with_retries(job_id, attempt)
