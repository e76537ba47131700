"""RQ's loop as a planning worker runs it: the same keys and fields RQ keeps, with fewer round trips."""

from __future__ import annotations

import pytest
import redis
from rq.executions import ExecutionRegistry

from producer import Client
from tests.worker.helpers import hb, request
from worker import jobs
from worker.records import JobState
from worker.runner import InProcessWorker, PlanningWorker, planning_worker


def calls(r: redis.Redis, command: str) -> int:
    """How many times the server ran ``command`` since its statistics were last reset."""
    stats = r.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


def registered(client: Client) -> PlanningWorker:
    worker = planning_worker(client.store)
    worker.register_birth()  # type: ignore[no-untyped-call]
    return worker


def test_a_worker_renews_its_registration_once_a_second_at_most(client: Client, r: redis.Redis) -> None:
    worker = registered(client)
    r.config_resetstat()
    for _ in range(5):  # RQ asks before and after each dequeue and after each job
        worker.heartbeat()
    assert calls(r, "hset") == 1 and calls(r, "expire") == 2
    assert r.hget(worker.key, "last_heartbeat") is not None
    worker._beat_at -= 2  # a second and more later
    worker.heartbeat()
    assert calls(r, "hset") == 2
    worker.heartbeat(timeout=90)  # another TTL is always sent
    assert calls(r, "hset") == 3
    assert 0 < r.ttl(worker.key) <= 90


def test_a_repeated_idle_state_is_written_once(client: Client, r: redis.Redis) -> None:
    worker = registered(client)
    r.config_resetstat()
    worker.set_state("idle")
    worker.set_state("idle")  # RQ's wait for the next job, straight after the job's end
    assert calls(r, "hset") == 1
    with r.pipeline() as pipe:  # RQ starts a job: busy, in its own pipeline
        worker.set_state("busy", pipe)
        pipe.execute()
    assert r.hget(worker.key, "state") == b"busy"
    worker.set_state("idle")
    assert r.hget(worker.key, "state") == b"idle"
    assert worker.get_state() == "idle"


def test_a_drain_leaves_rqs_keys_as_rq_would(client: Client, r: redis.Redis) -> None:
    """Each job taken off the intermediate list (in the pipeline that starts it), its hash deleted, the
    worker's count right; and the loop's connection given back to the pool."""
    client.heartbeat(hb("gpu-0", gpus=8))
    for i in range(3):
        client.submit(request(), job_id=f"job-{i}")
    pool = client.redis.connection_pool
    before = len(pool._in_use_connections)
    worker = planning_worker(client.store, InProcessWorker)
    worker.work(burst=True, logging_level="WARNING")
    assert [client.get(f"job-{i}").state for i in range(3)] == [JobState.PLACED] * 3
    queue = client.store.queue
    assert r.llen(queue.intermediate_queue_key) == 0
    assert not r.keys(f"{client.keys.rq_job_namespace}*")
    assert r.hget(worker.key, "successful_job_count") == b"3"
    assert len(pool._in_use_connections) == before


def test_the_loops_own_client_finds_the_shared_store(client: Client) -> None:
    """Jobs run from a loop client's connection plan on the store (and mirror) its process shares."""
    shared = jobs.store_for(client.redis, client.keys.prefix)
    loop = jobs.loop_client(client.redis, client.keys.prefix)
    try:
        assert jobs.store_for(loop, client.keys.prefix) is shared
        assert loop.connection is not None  # one connection, kept for the loop
    finally:
        loop.close()


def test_a_worker_that_cannot_be_made_gives_its_connection_back(client: Client) -> None:
    class Away(PlanningWorker):
        def __init__(self, *args: object, **kwargs: object) -> None:
            raise redis.ConnectionError("Redis away as the worker names itself")

    pool = client.redis.connection_pool
    client.redis.ping()
    before = len(pool._in_use_connections)
    with pytest.raises(redis.ConnectionError):
        planning_worker(client.store, Away)
    assert len(pool._in_use_connections) == before


def test_a_finished_job_reads_its_executions_once_and_leaves_none(
    client: Client, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RQ reads a job's executions twice as it deletes it; a planning job's are read once, and what RQ
    deletes of them is all deleted: no execution, no registry of them, nothing left started."""
    client.heartbeat(hb("gpu-0", gpus=8))
    for i in range(3):
        client.submit(request(), job_id=f"job-{i}")
    reads: list[str] = []
    read = ExecutionRegistry.get_execution_ids

    def counted(self: ExecutionRegistry, start: int = 0, end: int = -1) -> list[str]:
        reads.append(self.job_id)
        return read(self, start, end)

    monkeypatch.setattr(ExecutionRegistry, "get_execution_ids", counted)
    worker = planning_worker(client.store, InProcessWorker)
    worker.work(burst=True, logging_level="WARNING")
    assert [client.get(f"job-{i}").state for i in range(3)] == [JobState.PLACED] * 3
    assert len(reads) == 3 and len(set(reads)) == 3  # once a job
    assert not r.keys("rq:execution:*") and not r.keys("rq:executions:*")
    assert r.zcard(client.store.queue.started_job_registry.key) == 0
