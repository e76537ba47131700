"""``modelplan worker``: an RQ worker on the planning queue, with the waker and the maintenance sweep
beside it.

The waker runs the wake-up passes: it blocks on ``wake:signal``, where the scripts that free capacity put
a token, and runs the pass in this process as soon as it takes one. A pass is not an RQ job: it waits
neither behind planning jobs on the queue nor on RQ's own bookkeeping, only for the job this process is
planning to finish (they share the pool mirror, one at a time)."""

from __future__ import annotations

import contextlib
import gc
import math
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import redis
from rq import Queue, SimpleWorker
from rq.defaults import RQ_KEY_PREFIX
from rq.intermediate_queue import IntermediateQueue
from rq.job import Job
from rq.serializers import JSONSerializer
from rq.utils import now as rq_now

from worker import alive, commands, intake, jobs, logs, metrics, observed, requests, retry
from worker import constants as C
from worker.config import client_replicas, connect, estimate, max_replicas, redact
from worker.errors import RedisUnavailable, Refused
from worker.keys import Keys
from worker.maintenance import SweepState, sweep
from worker.mirrored import MirroredStore
from worker.queueing import PlanningJob, planning_queue, vet
from worker.requests import Consumer

log = logs.get_logger("modelplan.worker")


# the RQ internals this module overrides are checked against the installed RQ: tests/worker/test_rq_internals.py
class PlanningWorker(SimpleWorker):
    """A SimpleWorker on one prefix's planning queue that runs only modelplan's job functions.

    A job that ``vet`` refuses is logged once (its id and the function it named) and dropped from RQ's
    keys without being started: nothing is imported or called, and nothing of modelplan's is touched.
    """

    prefix = ""
    """The key prefix of the planning queue it works (set by ``planning_worker``)."""
    keys: Keys | None = None
    """Its prefix's keys, where it registers itself as running (``worker.alive``; set by ``planning_worker``)."""
    _started = ""
    """When it was made (ISO 8601), the value of its registration."""

    @property
    def dequeue_timeout(self) -> int:
        # its wait for the next job times out every so often, so that an idle worker's mirror keeps up
        return C.MIRROR_IDLE_READ_S

    _beat_at = -math.inf
    """When this worker last renewed its registration with RQ (``time.monotonic``)."""
    _unlist: tuple[str, str] | None = None
    """The intermediate list and id of the job being started, until it is taken off the list."""
    _state_stored: str | None = None
    """The state this worker last wrote to its hash on its own (not in one of RQ's pipelines)."""
    listener: commands.CommandListener | None = None
    """The reader of its command channel, from ``subscribe`` until it is stopped."""

    def heartbeat(self, timeout: int | None = None, pipeline: Any = None) -> None:
        # RQ renews a worker's registration before and after each dequeue and after each job, three commands
        # one round trip each; here one pipeline at most each RQ_HEARTBEAT_EVERY_S, and always when RQ asks
        # for another TTL or sends it in a pipeline of its own
        if pipeline is not None:
            super().heartbeat(timeout, pipeline)
            if self._unlist is not None:  # RQ's pipeline that starts a job: take it off the list there
                key, job_id = self._unlist
                pipeline.lrem(key, 1, job_id)
                self._unlist = None
            return
        now = time.monotonic()
        if timeout is not None or now - self._beat_at >= C.RQ_HEARTBEAT_EVERY_S:
            with self.connection.pipeline(transaction=False) as pipe:
                super().heartbeat(timeout, pipe)
                if self.keys is not None:  # running, for ``modelplan status`` (worker.alive)
                    alive.beat(pipe, self.keys, self.name, self._started)
                pipe.execute()
            self._beat_at = now
        if self.prefix:
            jobs.keep_warm(self.connection, self.prefix)

    def set_state(self, state: str, pipeline: Any = None) -> None:
        # RQ writes "idle" after each job and again as it starts to wait for the next: the second is
        # the same write, and is left out
        if pipeline is None and state == self._state_stored:
            self._state = state
            return
        super().set_state(state, pipeline)
        self._state_stored = state if pipeline is None else None

    def execute_job(self, job: Job, queue: Queue) -> None:
        prefix = job.prefix if isinstance(job, PlanningJob) else ""
        try:
            vet(job, prefix)
        except Refused as e:
            log.warning("job_refused", rq_job_id=job.id, func=e.func, reason=str(e))
            with self.connection.pipeline(transaction=True) as pipe:
                pipe.delete(job.key)
                pipe.lrem(IntermediateQueue.get_intermediate_queue_key(queue.key), 1, job.id)
                pipe.execute()
            return
        super().execute_job(job, queue)

    def subscribe(self) -> None:
        # RQ's reader of the command channel can take a minute to stop (worker.commands); this one stops at once
        self.listener = commands.listen(self.connection, self.pubsub_channel_name, self.handle_payload, self.name)
        self.pubsub = self.listener.pubsub

    def unsubscribe(self) -> None:
        # RQ's teardown calls this once its registration is gone
        self.stop_listening(wake=True)

    def stop_listening(self, *, wake: bool) -> None:
        """Stop reading the command channel, if it is read (``commands.CommandListener.stop``)."""
        listener, self.listener = self.listener, None
        if listener is not None:
            listener.stop(wake=wake)

    def teardown(self) -> None:
        try:
            if self.keys is not None:  # no longer running: said at once, not when the registration lapses
                with contextlib.suppress(redis.RedisError):
                    alive.gone(self.connection, self.keys, self.name)
            super().teardown()  # type: ignore[no-untyped-call]
        finally:
            # where RQ's teardown failed before its unsubscribe (Redis away), the reader ends by itself
            self.stop_listening(wake=False)
            self.connection.close()  # its loop's own connection (``jobs.loop_client``), back to the pool

    def prepare_job_execution(self, job: Job, remove_from_intermediate_queue: bool = False) -> None:
        # RQ removes the job from the intermediate list of a queue it rebuilds by name with its own key
        # prefix; the planning queue's key carries modelplan's, so its list is named here, and the job taken
        # off it in the pipeline RQ starts the job with (its heartbeat goes there), or after it
        if remove_from_intermediate_queue:
            self._unlist = (IntermediateQueue.get_intermediate_queue_key(self.queues[0].key), job.id)
        try:
            super().prepare_job_execution(job, remove_from_intermediate_queue=False)
        finally:
            unlist, self._unlist = self._unlist, None
        if unlist is not None:
            self.connection.lrem(unlist[0], 1, unlist[1])

    def handle_execution_ended(self, job: Job, queue: Queue, heartbeat_ttl: int) -> None:
        # RQ writes the job's last heartbeat here, a round trip of its own, just before the job's end is
        # recorded (a planning job's hash is then deleted; a failed one's is saved whole, with this time)
        job.ended_at = job.last_heartbeat = rq_now()


def planning_worker(store: MirroredStore, cls: type[PlanningWorker] = PlanningWorker, **kw: Any) -> PlanningWorker:
    """A worker on ``store``'s planning queue, with its queue and job classes (and so its keys)."""
    client = jobs.loop_client(store.redis, store.keys.prefix)
    queue = planning_queue(client, store.keys, jobs)
    classes: dict[str, Any] = {"queue_class": type(queue), "job_class": queue.job_class}
    try:
        worker = cls([queue], connection=client, serializer=JSONSerializer, **classes, **kw)
    except BaseException:  # RQ's worker names itself to Redis as it is made: Redis may be away by then
        client.close()
        raise
    worker.prefix, worker.keys = store.keys.prefix, store.keys
    worker._started = datetime.now(UTC).isoformat(timespec="seconds")
    return worker


class InProcessWorker(PlanningWorker):
    """A PlanningWorker for draining the queue in this process (the demo, tests): it listens on no command
    channel (a subscription and a thread for each drain, for commands nothing sends it), and runs each
    wake-up pass signalled before it takes the next job, as a waker would."""

    def subscribe(self) -> None:
        self.pubsub_thread = None

    def unsubscribe(self) -> None:
        return None

    def dequeue_job_and_maintain_ttl(self, timeout: int | None, max_idle_time: int | None = None) -> Any:
        run_passes(jobs.store_for(self.connection, self.prefix), self.name)
        return super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)


def drain(store: MirroredStore) -> None:
    """Run every planning job queued now and every wake-up pass signalled, in this process, as
    ``modelplan worker --burst`` does."""
    while True:
        planning_worker(store, InProcessWorker).work(burst=True, logging_level="WARNING")
        if not run_passes(jobs.store_for(store.redis, store.keys.prefix), "drain") and not store.queue.count:
            return


def run_passes(store: MirroredStore, name: str) -> bool:
    """Run the wake-up pass signalled now, if any (and any signalled while it ran): whether one ran."""
    ran = False
    while store.wait_for_pass(0):
        jobs.run_pass(store, name)
        ran = True
    return ran


def _wake(store: MirroredStore, name: str, stop: threading.Event) -> None:
    """The waker: take each signal on ``wake:signal`` as it comes and run the pass, until ``stop``. While
    none comes it keeps the pool mirror up to date (every ``WAKE_KEEP_UP_S``), and between passes keeps
    the collector off it (``freeze``). A try that fails is tried again after a pause that grows while
    they keep failing (``retry.Backoff``), never at once: the signal waits in Redis, or the sweep's pass
    comes, meanwhile."""
    outage = retry.Outage("waker", failed_event="wake_pass_failed")
    backoff = retry.Backoff(C.RETRY_FIRST_S)
    frozen = Frozen()
    while not stop.is_set():
        try:
            if store.wait_for_pass(C.WAKE_KEEP_UP_S):
                jobs.run_pass(store, name)
            else:  # no pass due: the mirror brought up to date now, so that the next pass has little to read
                with store.lock:
                    store.keep_warm(C.WAKE_KEEP_UP_S)
            frozen.keep(store.whole_reads)
            outage.over()
            backoff.succeeded()
        except Exception as e:  # Redis away or busy, or a pass that failed: tried again after the pause
            outage.failed(e)
            stop.wait(backoff.failed())


class Frozen:
    """Keeps what a worker holds long (its pool mirror, above all) out of the cyclic garbage collector's
    reach: after each whole read of the pool and every ``GC_FREEZE_S``, young garbage is collected and
    everything else frozen (``gc.freeze``). A full collection walks every object the collector tracks, and
    a mirror of 100,000 nodes is over half a million of them: such a walk stalled a worker for up to
    275 ms, wake-up passes and all; with a freeze every 5 s the longest seen was 6 ms. Frozen objects are
    still freed when nothing refers to them; only a reference cycle among them would outlive its use, and
    the mirror's records make none."""

    def __init__(self) -> None:
        self._reads = 0
        self._at = 0.0

    def keep(self, whole_reads: int) -> None:
        now = time.monotonic()
        if whole_reads != self._reads or (whole_reads and now - self._at > C.GC_FREEZE_S):
            gc.collect(1)
            gc.freeze()
            self._reads, self._at = whole_reads, now


def worker_name() -> str:
    """Unique per process, readable in records: host, pid and a short random tail; an id (``worker:{name}``
    holds it), the host name's other characters as ``-``."""
    host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname()).lstrip("._-")[:100] or "host"
    return f"{host}.{os.getpid()}.{uuid.uuid4().hex[:6]}"


def _maintain(url: str, keys: Keys, stop: threading.Event) -> None:
    store = MirroredStore(connect(url), keys)
    outage = retry.Outage("maintenance")
    backoff = retry.Backoff(C.MAINTENANCE_INTERVAL_S)
    state = SweepState()
    pause = C.MAINTENANCE_INTERVAL_S
    while not stop.wait(pause):
        try:
            sweep(store, state=state)
            metrics.flush(store.redis, keys)
            outage.over()
            backoff.succeeded()
            pause = C.MAINTENANCE_INTERVAL_S
        except Exception as e:  # Redis away or busy, or a sweep that failed whole: tried again after a pause
            outage.failed(e)
            pause = max(C.MAINTENANCE_INTERVAL_S, backoff.failed())


def run(url: str, prefix: str, *, burst: bool = False) -> None:
    """Work the queue. ``burst``: sweep once, drain the queue and return, as ``rq worker --burst``."""
    keys = Keys(prefix)
    logs.route_to_structlog("rq")  # RQ's own lines are JSON lines too
    conn = connect(url)
    store = jobs.store_for(conn, keys.prefix)  # the one its jobs and its waker share
    name = worker_name()
    stop = threading.Event()
    try:
        conn.ping()
    except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError) as e:
        raise RedisUnavailable(redact(url), e) from e
    from worker import rqprefix

    rqprefix.check(conn, keys, redact(url))  # a login refused RQ's keys: one line naming RQ_KEY_PREFIX
    alive.prune(conn, keys)  # the workers killed since the last one started
    log.info(
        "worker_started",
        worker=name,
        redis=redact(url),
        estimate=estimate(),  # a bad MODELPLAN_ESTIMATE stops the worker here, not at its first plan
        max_replicas=max_replicas(),  # and so do bad quotas
        client_replicas=client_replicas(),
        observed_quorum=observed.quorum(),  # and a bad MODELPLAN_OBSERVED_QUORUM
        queue=store.queue.key,
        requests=keys.requests,
        rq_bookkeeping=f"{RQ_KEY_PREFIX}:*",
        burst=burst,
    )
    if burst:
        intake.reconcile(store)  # what node agents stored since the last worker took it in
        sweep(store, force=True)
        Consumer(store, name).drain()
    else:
        threading.Thread(target=intake.serve, args=(url, keys, name, stop), name="intake", daemon=True).start()
        threading.Thread(target=_maintain, args=(url, keys, stop), name="maintenance", daemon=True).start()
        threading.Thread(target=requests.serve, args=(url, keys, name, stop), name="requests", daemon=True).start()
    waker = threading.Thread(target=_wake, args=(store, name, stop), name="waker", daemon=True)
    waker.start()
    # SimpleWorker runs jobs in this process: a plan takes milliseconds, and forking for each costs ~4x the
    # throughput. A crash mid-job is covered by the planning lease, not by RQ.
    try:
        _work(store, name, burst)
        while burst:  # what the last jobs signalled, and what those passes queued
            stop.set()
            waker.join()
            if not run_passes(store, name) and not store.queue.count:
                break
            _work(store, name, burst)
    finally:
        stop.set()
        # stopping while Redis is away: the last interval's figures go with the process
        with contextlib.suppress(redis.RedisError):
            metrics.flush(store.redis, keys)
        log.info("worker_stopped", worker=name)


def _work(store: MirroredStore, name: str, burst: bool, sleep: Callable[[float], None] = time.sleep) -> None:
    """RQ's loop, started again when it gives up on its own: RQ quits on an error it does not handle, such
    as the master going away while it records a job's end in a failover, and a worker is to carry on by
    itself once Redis is back. It stops for good on a signal, or in burst mode. A loop that keeps giving
    up at once is started again after a pause that grows each time (``retry.Backoff``)."""
    backoff = retry.Backoff(C.RQ_RESTART_S)
    while True:
        w: PlanningWorker | None = None
        started = time.monotonic()
        try:
            # RQ's worker names itself to Redis as it is made: Redis may be away by then too
            w = planning_worker(store, name=name)
            w.work(burst=burst, logging_level="WARNING")
        except redis.exceptions.NoPermissionError:
            raise  # the login lacks a right: no retry mends that
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError) as e:
            # a reply error too: mid-failover, a transaction RQ sends as it records a job's end or its own
            # comes back aborted (the old master now a replica, a write refused); Redis busy with a script
            if burst:
                raise
            log.warning("rq_loop_failed", worker=name, error=str(e)[:200])
        finally:
            if isinstance(w, PlanningWorker):  # RQ's loop can fail after it subscribed and before its teardown
                w.stop_listening(wake=False)
        if burst or getattr(w, "_shutdown_requested_date", None) is not None:
            return
        if time.monotonic() - started > C.RETRY_MAX_S:
            backoff.succeeded()  # it ran a while before it gave up: not a loop that fails at once
        # RQ may not have recorded its own end: its registration would refuse the same name again
        name = worker_name()
        pause = backoff.failed()
        log.warning("rq_loop_restarting", worker=name, after_s=pause)
        sleep(pause)
