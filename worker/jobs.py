"""The RQ job functions. Each is thin: find the connection, bind the ids to the log, call planning.

Arguments are plain JSON (the queue runs with RQ's JSON serializer): the key prefix and ids.
"""

from __future__ import annotations

import time

import redis
import redis.sentinel
import structlog
from rq import get_current_job

from worker import constants as C
from worker import metrics, moves, planning, waking
from worker.keys import Keys
from worker.mirrored import MirroredStore

_stores: dict[tuple[int, str], tuple[redis.Redis, MirroredStore]] = {}
"""One MirroredStore per connection and prefix in a worker process, kept across jobs so that its pool mirror and
parsed records carry from one job to the next; its lock keeps the job thread and the waker apart. Each
entry keeps the client it was found by."""


def store_for(connection: redis.Redis, prefix: str) -> MirroredStore:
    """This process's MirroredStore for ``connection`` and ``prefix``: the one its jobs and its waker share."""
    key = (id(connection), prefix)
    got = _stores.get(key)
    if got is None or got[0] is not connection:
        got = _stores[key] = (connection, MirroredStore(connection, Keys(prefix)))
    return got[1]


def loop_client(connection: redis.Redis, prefix: str) -> redis.Redis:
    """A client for RQ's own loop on the queue of ``prefix``: one connection of ``connection``'s pool,
    kept for the loop (RQ sends most of its bookkeeping one command at a time, and a command sent through
    the pool first checks its connection out and polls it for stray data). The jobs it runs find
    ``store_for(connection, prefix)`` by it. Closing it gives the connection back.

    Under Sentinel the loop sends through the pool as RQ would: a connection kept out of a Sentinel pool
    reconnects to the address it had, the old master after a failover, where one from the pool asks the
    sentinels again."""
    shared = store_for(connection, prefix)
    pool = connection.connection_pool
    single = not isinstance(pool, redis.sentinel.SentinelConnectionPool)
    client = redis.Redis(connection_pool=pool, single_connection_client=single)
    _stores[(id(client), prefix)] = (client, shared)
    return client


def _store(prefix: str) -> tuple[MirroredStore, str]:
    job = get_current_job()
    if job is None:
        raise RuntimeError("worker.jobs functions run inside an RQ job")
    return store_for(job.connection, prefix), job.worker_name or "worker"


def keep_warm(connection: redis.Redis, prefix: str) -> None:
    """Between jobs: bring this process's pool mirror for ``prefix`` up to date if it has sat a while, or
    read it whole if this worker has none yet (it just started)."""
    store = store_for(connection, prefix)
    with store.lock:
        store.keep_warm(C.MIRROR_IDLE_READ_S)


def run_pass(store: MirroredStore, worker: str, full: bool = False) -> int:
    """A wake-up pass on ``store``, with its lock held: from an RQ job, or from the waker."""
    with store.lock, structlog.contextvars.bound_contextvars(worker=worker):
        # a node restarted signals a pass: its notice is taken first, so that its jobs are checked whoever
        # sent the heartbeat
        store.take_restarts()
        return waking.wake_pass(store, full)


def plan_job(prefix: str, job_id: str) -> str | None:
    """Plan one queued serve job."""
    store, worker = _store(prefix)
    with store.lock, structlog.contextvars.bound_contextvars(job_id=job_id, worker=worker):
        started = time.perf_counter()
        rec = planning.plan_queued(store, job_id, worker)
        metrics.observe("plan_seconds", time.perf_counter() - started)
    return rec.state.value if rec else None


def wake_pass(prefix: str, full: bool = False) -> int:
    """Re-plan waiting jobs after capacity freed (or all of them, ``full``): a pass queued on RQ by an
    earlier modelplan. Passes are signalled on ``wake:signal`` now, and each worker's waker runs them."""
    store, worker = _store(prefix)
    return run_pass(store, worker, full)


def node_silent(prefix: str, node_id: str) -> int:
    """A node's heartbeat lapsed while it held jobs: plan them again, and drop the node."""
    store, worker = _store(prefix)
    with store.lock, structlog.contextvars.bound_contextvars(node_id=node_id, worker=worker):
        return moves.node_silent(store, node_id)


def node_restarted(prefix: str, node_id: str, boot_id: str) -> int:
    """A node came back with a new boot: what was placed on it before is gone; plan those jobs again."""
    store, worker = _store(prefix)
    with store.lock, structlog.contextvars.bound_contextvars(node_id=node_id, worker=worker):
        return moves.node_restarted(store, node_id, boot_id)
