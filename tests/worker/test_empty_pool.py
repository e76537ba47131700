"""A job planned before any node has reported waits for one, rather than failing for good: an empty pool
says nothing about what the pool will hold once its nodes report."""

from __future__ import annotations

from producer import Client
from tests.worker.helpers import drain, hb, request, signalled, whole_state
from worker.records import JobState
from worker.scripts import text


def pending_on(client: Client, job_id: str) -> str | None:
    raw = client.redis.hget(client.keys.pending_for, job_id)
    return None if raw is None else text(raw)


def test_a_job_planned_on_an_empty_pool_waits_and_the_first_node_places_it(client: Client) -> None:
    job = client.submit(request(), "early1")
    drain(client)
    rec = client.get(job)
    assert rec.state is JobState.WAITING and rec.option is None and not rec.ever_fit
    assert rec.reason == "no node has reported to the pool yet (or every node has gone silent); waiting for one"
    [replica] = rec.replicas
    assert replica.state == "waiting" and replica.wait is not None and replica.wait.kind == "gone"
    # it cannot name the card class it waits for: it waits on any, and a node joining wakes it
    assert pending_on(client, job) == "any"
    assert client.redis.ttl(client.keys.job(job)) == -1  # live: it does not expire as a final record would

    assert client.heartbeat(hb("gpu-1", "h100-80g", gpus=1))
    assert signalled(client)
    drain(client)
    rec = client.get(job)
    assert rec.state is JobState.PLACED and [p.node_id for p in rec.placement] == ["gpu-1"]
    assert pending_on(client, job) is None
    assert whole_state(client)["held"] == {"gpu-1": {job: 1}}


def test_the_first_node_that_cannot_hold_it_fails_it_with_what_was_too_large(client: Client) -> None:
    job = client.submit(request("llama-3.1-70b-instruct"))
    drain(client)
    assert client.get(job).state is JobState.WAITING
    client.heartbeat(hb("small", "rtx4090-24g", gpus=1, host=32))
    drain(client)
    rec = client.get(job)
    # planned on the pool as it is now, as a job submitted after that node would be
    assert rec.state is JobState.FAILED
    assert rec.reason.startswith("nothing in the pool can hold it: original (131.4 GiB")


def test_a_pool_that_cannot_hold_it_still_fails_it_at_once(client: Client) -> None:
    client.heartbeat(hb("cpu-1", "", host=8, seq=1))
    job = client.submit(request())
    drain(client)
    rec = client.get(job)
    assert rec.state is JobState.FAILED and rec.reason.startswith("nothing in the pool can hold it")
