"""``modelplan worker``: an RQ worker on the planning queue, with the maintenance sweep beside it."""

from __future__ import annotations

import os
import socket
import threading
import uuid

import redis
import structlog
from rq import SimpleWorker
from rq.serializers import JSONSerializer

from worker import constants as C
from worker.config import connect, redact
from worker.errors import RedisUnavailable
from worker.keys import Keys
from worker.maintenance import sweep
from worker.store import Store

log = structlog.get_logger("modelplan.worker")


class InProcessWorker(SimpleWorker):
    """A SimpleWorker for draining the queue in this process (the demo, tests): it listens on no command
    channel, whose thread otherwise costs a second to stop after each drain."""

    def subscribe(self) -> None:
        self.pubsub_thread = None

    def unsubscribe(self) -> None:
        return None


def drain(store: Store) -> None:
    """Run every planning job queued now, in this process, as ``modelplan worker --burst`` does."""
    InProcessWorker([store.queue], connection=store.redis, serializer=JSONSerializer).work(
        burst=True, logging_level="WARNING"
    )


def worker_name() -> str:
    """Unique per process, readable in records: host, pid and a short random tail."""
    return f"{socket.gethostname()}.{os.getpid()}.{uuid.uuid4().hex[:6]}"


def _maintain(url: str, keys: Keys, stop: threading.Event) -> None:
    store = Store(connect(url), keys)
    while not stop.wait(C.MAINTENANCE_INTERVAL_S):
        try:
            sweep(store)
        except Exception:  # a sweep that fails (Redis away) is tried again next interval
            log.exception("maintenance_failed")


def run(url: str, prefix: str, *, burst: bool = False) -> None:
    """Work the queue. ``burst``: sweep once, drain the queue and return, as ``rq worker --burst``."""
    keys = Keys(prefix)
    conn = connect(url)
    store = Store(conn, keys)
    name = worker_name()
    log.info("worker_started", worker=name, redis=redact(url), queue=keys.queue_name, burst=burst)
    stop = threading.Event()
    try:
        conn.ping()
    except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError) as e:
        raise RedisUnavailable(redact(url), e) from e
    if burst:
        sweep(store, force=True)
    else:
        threading.Thread(target=_maintain, args=(url, keys, stop), name="maintenance", daemon=True).start()
    # SimpleWorker runs jobs in this process: a plan takes milliseconds, and forking for each costs ~4x the
    # throughput. A crash mid-job is covered by the planning lease, not by RQ.
    w = SimpleWorker([store.queue], connection=conn, serializer=JSONSerializer, name=name)
    try:
        w.work(burst=burst, logging_level="WARNING")
    finally:
        stop.set()
        log.info("worker_stopped", worker=name)
