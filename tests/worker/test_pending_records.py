"""``pending:records``: each pending job's record kept beside ``pending:for``, so that a wake-up pass takes
the jobs it picks and their records in one round trip; a copy that may be missing or of another type
without harm (the pass reads the job's own key instead, and the commit checks the version)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from producer import Client
from tests.reliability.invariants import Checker
from tests.worker.helpers import drain, hb, request
from worker.records import JobRecord, JobState


def waiting(client: Client, n: int = 1) -> list[str]:
    client.heartbeat(hb("gpu-1", gpus=1, free=0, seq=1))
    ids = [client.submit(request()) for _ in range(n)]
    drain(client)
    assert all(client.get(j).state is JobState.WAITING for j in ids)
    return ids


def no_second_read(monkeypatch: pytest.MonkeyPatch, client: Client) -> list[Sequence[str]]:
    """Record each read of jobs' own keys the store makes."""
    reads: list[Sequence[str]] = []
    jobs = type(client.store).jobs

    def counting(self: Any, job_ids: Sequence[str]) -> Any:
        if job_ids:
            reads.append(list(job_ids))
        return jobs(self, job_ids)

    monkeypatch.setattr(type(client.store), "jobs", counting)
    return reads


def test_a_waiting_job_keeps_its_record_beside_pending_for(client: Client) -> None:
    (job,) = waiting(client)
    k = client.keys
    assert client.redis.hkeys(k.pending_records) == [job.encode()]
    assert client.redis.hget(k.pending_records, job) == client.redis.get(k.job(job))
    assert not Checker(client.redis, k).check(["gpu-1"])


def test_a_pass_takes_the_records_with_the_jobs(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = waiting(client, 2)
    reads = no_second_read(monkeypatch, client)
    _, got = client.store.take_wake(True)
    assert [j for j, _ in got] == ids
    assert all(isinstance(rec, JobRecord) and rec == client.get(j) for j, rec in got)
    assert reads == []  # one round trip: nothing read after the script


@pytest.mark.parametrize("spoil", ["missing", "wrong type", "not a record", "another job's"])
def test_a_pass_reads_the_jobs_own_key_where_the_copy_does_not_serve(
    client: Client, monkeypatch: pytest.MonkeyPatch, spoil: str
) -> None:
    first, second = waiting(client, 2)
    k = client.keys
    if spoil == "missing":
        client.redis.hdel(k.pending_records, first)
    elif spoil == "wrong type":
        client.redis.delete(k.pending_records)
        client.redis.set(k.pending_records, "x")
    elif spoil == "not a record":
        client.redis.hset(k.pending_records, first, "{not json")
    else:
        client.redis.hset(k.pending_records, first, client.redis.get(k.job(second)) or b"")
    reads = no_second_read(monkeypatch, client)
    _, got = client.store.take_wake(True)
    assert [(j, rec) for j, rec in got] == [(first, client.get(first)), (second, client.get(second))]
    assert reads == ([[first, second]] if spoil == "wrong type" else [[first]])


def test_a_job_that_leaves_pending_leaves_pending_records(client: Client) -> None:
    placed, cancelled = waiting(client, 2)
    k = client.keys
    client.cancel(cancelled)
    assert client.redis.hkeys(k.pending_records) == [placed.encode()]
    client.heartbeat(hb("gpu-1", gpus=1, free=1, seq=2))
    drain(client)
    assert client.get(placed).state is JobState.PLACED
    assert not client.redis.exists(k.pending_records)
    assert not Checker(client.redis, k).check(["gpu-1"])


def test_pending_records_of_another_type_is_dropped_by_the_next_commit(client: Client) -> None:
    """Like the other hints, a ``pending:records`` some other writer made another type is deleted, not
    obeyed, and the commit that found it goes through."""
    k = client.keys
    client.redis.set(k.pending_records, "x")
    (job,) = waiting(client)
    assert client.redis.hget(k.pending_records, job) == client.redis.get(k.job(job))


def test_the_sweep_drops_records_of_jobs_no_longer_pending(client: Client) -> None:
    (job,) = waiting(client)
    k = client.keys
    client.redis.hset(k.pending_records, "gone-job", "{}")
    assert client.store.recount_pending() == 1
    assert client.redis.hkeys(k.pending_records) == [job.encode()]
