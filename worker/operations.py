"""What a caller asks of a job: submit, release, cancel, scale, retry. ``producer.Client`` (a direct call)
and the request streams' reader (``worker.requests``, an entry) both carry them out here, so that both make
the same record, the same queue entry and the same refusals.

Each operation reads, decides and commits against what it read: a commit through ``transition.lua`` against
the record's version, or a ``WATCH`` transaction. A commit that lost a race to another writer is tried
again from a fresh read by the one helper every such loop uses, ``with_retries`` (``worker.retries``).
Scaling, a job's replicas up, down or to zero, is ``worker.scaling``'s.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import redis

from worker import apikeys, logs, owners
from worker import constants as C
from worker.classes import clear_all
from worker.config import wait_replicas as default_wait_replicas
from worker.config import wait_timeout_ms as default_wait_timeout_ms
from worker.errors import (
    AlreadySubmitted,
    JobExists,
    JobNotFound,
    NotReplicated,
    StillRunning,
    WrongState,
    redis_failure,
    use,
)
from worker.ids import check_id
from worker.jobtext import read_job
from worker.mirrored import MirroredStore
from worker.owners import ANYONE, Acting, Owned
from worker.records import JobRecord, JobState, ServeRequest, utcnow
from worker.replies import Reply
from worker.retries import AGAIN, Again, with_retries
from worker.scaling import check_replicas, reserve, scale
from worker.store import Store, now_ms

# with_retries (worker.retries) and scaling (worker.scaling) are named here too, where callers import them
__all__ = [
    "AGAIN",
    "CANCELLABLE",
    "Again",
    "Operations",
    "cancel",
    "check_replicas",
    "existing",
    "release",
    "reserve",
    "retry",
    "scale",
    "submit",
    "with_retries",
]

log = logs.get_logger("modelplan.worker")

T = TypeVar("T")

CANCELLABLE = (JobState.QUEUED, JobState.PLANNING, JobState.WAITING)


@dataclass
class Operations:
    """Submit, release, cancel, scale and retry on one store. After each, waits until ``wait_replicas`` replicas
    have every write so far (``NotReplicated`` if they do not within ``wait_timeout_ms``); any error Redis
    answers with, or its absence, is raised as one of modelplan's (``redis_failure``), naming ``url``."""

    store: MirroredStore
    url: str = ""
    """Redis's address, redacted, for the errors; "" when not known."""
    wait_replicas: int = field(default_factory=default_wait_replicas)
    wait_timeout_ms: int = field(default_factory=default_wait_timeout_ms)

    def call(self, fn: Callable[[], T]) -> T:
        """``fn``'s answer, a Redis error turned into modelplan's (``worker.errors.redis_failure``)."""
        try:
            return fn()
        except redis.RedisError as e:
            raise redis_failure(self.url, e) from e

    def replicated(self, what: str) -> None:
        """Wait until ``wait_replicas`` replicas have every write made so far, or raise ``NotReplicated``.
        WAIT counts what the connection it runs on wrote, and a pool may have made the writes on another:
        a write on the same connection just before it covers them all, replication being one stream."""
        if not self.wait_replicas:
            return

        def wait() -> int:
            with self.store.redis.pipeline(transaction=False) as pipe:
                pipe.incr(self.store.keys.ack)
                pipe.wait(self.wait_replicas, self.wait_timeout_ms)
                _, acked = pipe.execute()
            return int(acked)

        acked = self.call(wait)
        if acked < self.wait_replicas:
            raise NotReplicated(what, acked, self.wait_replicas, self.wait_timeout_ms)

    def get(self, job_id: str) -> JobRecord:
        rec = self.call(lambda: self.store.job(job_id))
        if rec is None:
            raise JobNotFound(job_id)
        return rec

    def submit(
        self,
        req: ServeRequest,
        job_id: str | None = None,
        *,
        as_client: Acting = ANYONE,
        owned: Owned | None = None,
        exists_ok: bool = True,
    ) -> str:
        """Record a serve job and queue it for planning, in one transaction (``submit``): its id."""
        job_id = check_id(job_id, "job_id") if job_id is not None else uuid.uuid4().hex
        self.call(lambda: submit(self.store, req, job_id, as_client, owned, exists_ok=exists_ok))
        self.replicated(f"submit {job_id}")
        return job_id

    def release(self, job_id: str, *, as_client: Acting = ANYONE) -> JobRecord:
        rec = self.call(lambda: release(self.store, job_id, as_client))
        self.replicated(f"release {job_id}")
        return rec

    def cancel(self, job_id: str, *, as_client: Acting = ANYONE) -> JobRecord:
        rec = self.call(lambda: cancel(self.store, job_id, as_client))
        self.replicated(f"cancel {job_id}")
        return rec

    def retry(self, job_id: str, *, as_client: Acting = ANYONE, owned: Owned | None = None) -> JobRecord:
        """``retry``; with ``owned``, within the client's count of replicas: the job's count is reserved
        before it is queued again (``reserve``), as a scale's is, and settled on what the record says after."""
        if owned is not None:
            reserve(owned, job_id, self.get(job_id).wanted)
        try:
            rec = self.call(lambda: retry(self.store, job_id, as_client))
            self.replicated(f"retry {job_id}")
            return rec
        finally:
            if owned is not None:
                owned.settle(job_id)

    def scale(
        self,
        job_id: str,
        replicas: int,
        *,
        as_client: Acting = ANYONE,
        owned: Owned | None = None,
        bound: Callable[[], None] | None = None,
    ) -> JobRecord:
        """``scale``; with ``owned``, within the client's count of replicas: the new count is reserved
        before the job is planned (``reserve``, with ``bound``), so that two entries carried out at once
        cannot both pass, and settled on what the record says after (``Owned.settle``)."""
        if owned is None:
            rec = self.call(lambda: scale(self.store, job_id, replicas, as_client))
            self.replicated(f"scale {job_id}")
            return rec
        reserve(owned, job_id, replicas, bound)
        try:
            rec = self.call(lambda: scale(self.store, job_id, replicas, as_client))
            self.replicated(f"scale {job_id}")
            return rec
        finally:
            owned.settle(job_id)


# --- the operations, on a store ------------------------------------------------------------------------------


def submit(
    store: MirroredStore,
    req: ServeRequest,
    job_id: str,
    acting: Acting = ANYONE,
    owned: Owned | None = None,
    *,
    exists_ok: bool = True,
) -> str:
    """Record a serve job and queue it for planning, in one transaction: when this returns, the job is
    stored and queued; when it raises, nothing was. The same id with the same request again returns the id
    and queues nothing; with another request it raises ``JobExists``; either, with ``exists_ok`` False,
    raises ``AlreadySubmitted`` saying what the job is (``existing``). ``acting``: whom the submit is for
    (the job's owner; ``JobTaken`` if the id is another's); ``owned``: the client's count of replicas, which
    the submit is admitted to in the same transaction."""
    k = store.keys
    key = k.job(job_id)
    owner = owners.recorded(acting)
    # the owner's copy of its engines' API key, where no other client reads it (``worker.apikeys``)
    api_key = apikeys.job_key(apikeys.secret(store.redis, k), job_id) if owner is not None else ""

    def attempt() -> str:
        with store.redis.pipeline(transaction=True) as pipe:
            pipe.watch(key, *([owned.key] if owned else []))  # type: ignore[no-untyped-call]
            raw = pipe.get(key)
            if raw is not None:
                old = read_job(raw, key)
                owners.check_submit(old, acting)
                if not exists_ok:
                    raise existing(old, req)
                if old.request == req:
                    return job_id
                raise JobExists(job_id)
            admit = owned.admit(pipe, job_id, req.replicas) if owned else None
            now = utcnow()
            rec = JobRecord(
                job_id=job_id,
                state=JobState.QUEUED,
                version=0,
                request=req,
                wanted=req.replicas,
                seq=store.next_seq(),
                created_at=now,
                updated_at=now,
                reason="queued",
                owner=owner,
            )
            event = {"job_id": job_id, "state": "queued", "version": "0", "reason": "submitted"}
            pipe.multi()
            pipe.set(key, rec.to_stored())
            pipe.zadd(k.jobs(JobState.QUEUED), {job_id: now_ms()})
            pipe.xadd(k.job_events(job_id), event, maxlen=C.JOB_EVENTS_MAXLEN, approximate=True)  # type: ignore[arg-type]
            pipe.xadd(k.events, event, maxlen=C.EVENTS_MAXLEN, approximate=True)  # type: ignore[arg-type]
            store.enqueue_plan(job_id, pipeline=pipe)
            if owner is not None:
                pipe.set(k.client_key(owner, job_id), api_key, ex=apikeys.ENGINE_KEY_TTL_S)
            if admit is not None:
                admit(pipe)
            pipe.execute()
            return job_id

    # a WATCH fires only when another writer changed the job's key or the client's count: each time one
    # did, that one made progress, so this tries until it wins
    return with_retries(job_id, attempt, attempts=None)


def existing(old: JobRecord, req: ServeRequest) -> AlreadySubmitted:
    """What a submit of ``req`` under ``old``'s id is told when it may not name a recorded job."""
    return AlreadySubmitted(old.job_id, old.state.value, old.summary, old.reason, same_request=old.request == req)


def release(store: Store, job_id: str, acting: Acting = ANYONE) -> JobRecord:
    """Free everything a job holds (every replica); pending jobs that can use it are planned at once.
    ``acting``: whom the call is for; ``NotOwner`` if the job is not theirs (``worker.owners``)."""

    def attempt() -> JobRecord | Again:
        rec = store.job(job_id)
        if rec is None:
            raise JobNotFound(job_id)
        owners.check(rec, acting)
        if rec.state not in (JobState.PLACED, JobState.WAITING):
            raise WrongState(job_id, rec.state.value, "release", "placed or waiting")
        new = rec.advance(JobState.RELEASED, at=utcnow(), nomination=None, reason="released")
        if not store.transition(rec, new, reason="released", clear=clear_all(rec)).ok:
            return AGAIN
        log.info("job_released", job_id=job_id)
        return new

    return with_retries(job_id, attempt)


def cancel(store: Store, job_id: str, acting: Acting = ANYONE) -> JobRecord:
    """Cancel a job that is queued, being planned or waiting with no replica running, freeing the cards
    held for it; a job with a replica running is ended by ``release``. ``acting``: as for ``release``."""

    def attempt() -> JobRecord | Again:
        rec = store.job(job_id)
        if rec is None:
            raise JobNotFound(job_id)
        owners.check(rec, acting)
        if rec.state not in CANCELLABLE:
            instead = f"{use('release')} to end it and free its cards" if rec.state is JobState.PLACED else ""
            raise WrongState(job_id, rec.state.value, "cancel", "queued, planning or waiting", instead)
        running = sum(1 for r in rec.replicas if r.placement)
        if running:
            raise StillRunning(job_id, rec.state.value, running, rec.wanted)
        new = rec.advance(
            JobState.CANCELLED, at=utcnow(), nomination=None, worker=None, lease_until=None, reason="cancelled"
        )
        if not store.transition(rec, new, reason="cancelled", clear=clear_all(rec)).ok:
            return AGAIN
        log.info("job_cancelled", job_id=job_id)
        return new

    return with_retries(job_id, attempt)


def retry(store: Store, job_id: str, acting: Acting = ANYONE) -> JobRecord:
    """Queue a failed job for planning again under its id, to be planned on the pool as it is then (a
    node that can hold it may have joined since it failed): its record goes back to ``queued``, kept for
    good again, and a planning job onto the queue. Only a failed job: another state raises ``WrongState``.
    ``acting``: as for ``release``. The record is committed first; were the caller to stop before the
    queue entry is written, the sweep queues a job left queued without one (as for a worker that died)."""

    def attempt() -> JobRecord | Again:
        rec = store.job(job_id)
        if rec is None:
            raise JobNotFound(job_id)
        owners.check(rec, acting)
        if rec.state is not JobState.FAILED:
            raise WrongState(job_id, rec.state.value, "retry", "failed")
        new = rec.advance(
            JobState.QUEUED,
            at=utcnow(),
            option=None,
            replicas=(),
            alternatives=(),
            nomination=None,
            worker=None,
            lease_until=None,
            reason="retried",
        )
        out = store.transition(rec, new, reason="retried", score=now_ms(), clear=clear_all(rec))
        if out.code is Reply.GONE:
            raise JobNotFound(job_id)
        if not out.ok:
            return AGAIN
        store.enqueue_plan(job_id)
        log.info("job_retried", job_id=job_id)
        return new

    return with_retries(job_id, attempt)
