"""A replica whose hold is gone from ``held:{node}`` (deleted by hand, or a write Redis lost) runs on cards
nothing reserves: the sweep finds it and plans it again, as a node's loss does, in one commit that never
books a card twice; its job's other replicas keep theirs. (Holds no record names are the other half of the
check: ``tests/worker/test_orphans.py``.)"""

from __future__ import annotations

import pytest

from producer import Client
from tests.worker.helpers import drain, hb, request, whole_state
from worker import maintenance, unheld
from worker.records import JobState


def gone(client: Client, node: str, hold_id: str) -> None:
    """The hold deleted as no modelplan script deletes one: nothing on the pool's change stream."""
    assert client.redis.hdel(client.keys.held(node), hold_id) == 1


def test_a_placed_replica_whose_hold_is_gone_is_placed_again(client: Client) -> None:
    client.heartbeat(hb("g1", gpus=1))
    job = client.submit(request())
    drain(client)
    [hold] = client.get(job).placement
    gone(client, "g1", hold.hold_id)
    assert maintenance.sweep(client.store, force=True)["replicas_unheld"] == 1
    rec = client.get(job)
    assert rec.state is JobState.PLACED and [p.node_id for p in rec.placement] == ["g1"]
    assert rec.placement[0].hold_id != hold.hold_id
    assert sorted(client.store.held_on("g1")) == [rec.placement[0].hold_id]
    assert rec.reason.startswith("the hold of replica 0 on g1 is gone; placed original on 1 × h100-80g: g1")
    assert maintenance.sweep(client.store, force=True)["replicas_unheld"] == 0


def test_its_card_taken_meanwhile_is_not_booked_twice(client: Client, redis_url: str) -> None:
    client.heartbeat(hb("g1", gpus=1))
    client.submit(request(), job_id="a")
    drain(client)
    gone(client, "g1", client.get("a").placement[0].hold_id)
    other = Client.from_url(redis_url)  # a worker that read the pool since: to it the card is free
    try:
        other.submit(request(), job_id="b")
        drain(other)
        assert other.get("b").state is JobState.PLACED
    finally:
        other.redis.close()
    assert maintenance.sweep(client.store, force=True)["replicas_unheld"] == 1
    drain(client)
    a = client.get("a")
    assert (a.state, a.placement) == (JobState.WAITING, ())
    assert whole_state(client)["held"] == {"g1": {"b": 1}}


def test_only_the_replica_whose_hold_is_gone_is_planned_again(client: Client) -> None:
    client.heartbeat(hb("g1", gpus=1))
    client.heartbeat(hb("g2", gpus=1))
    job = client.submit(request(replicas=2))
    drain(client)
    by_node = {p.node_id: p for p in client.get(job).placement}
    assert sorted(by_node) == ["g1", "g2"]
    gone(client, "g1", by_node["g1"].hold_id)
    maintenance.sweep(client.store, force=True)
    after = {p.node_id: p for p in client.get(job).placement}
    assert after["g2"] == by_node["g2"] and by_node["g2"].hold_id in client.store.held_on("g2")
    assert after["g1"].hold_id != by_node["g1"].hold_id
    assert sorted(client.store.held_on("g1")) == [after["g1"].hold_id]


def test_the_card_a_gone_hold_took_is_free_again_to_the_worker_that_found_it(client: Client) -> None:
    """The sweep tells the workers' mirrors the hold is gone, as a commit clearing it would: the mirror of
    the worker that planned the job still counted it."""
    client.heartbeat(hb("g1", gpus=2))
    client.submit(request(), job_id="a")
    drain(client)
    gone(client, "g1", client.get("a").placement[0].hold_id)
    maintenance.sweep(client.store, force=True)
    client.submit(request(), job_id="b")
    drain(client)
    assert [client.get(j).state for j in ("a", "b")] == [JobState.PLACED, JobState.PLACED]
    assert whole_state(client)["held"] == {"g1": {"a": 1, "b": 1}}


def test_a_released_job_is_not_planned_again(client: Client) -> None:
    client.heartbeat(hb("g1", gpus=1))
    job = client.submit(request())
    drain(client)
    gone(client, "g1", client.get(job).placement[0].hold_id)
    client.release(job)
    assert maintenance.sweep(client.store, force=True)["replicas_unheld"] == 0
    assert client.get(job).state is JobState.RELEASED


def test_each_sweep_looks_at_the_next_batch_of_jobs(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(unheld, "JOBS_A_SWEEP", 1)
    client.heartbeat(hb("g1", gpus=2))
    for job in ("a", "b"):
        client.submit(request(), job_id=job)
    drain(client)
    for job in ("a", "b"):
        gone(client, "g1", client.get(job).placement[0].hold_id)
    state = maintenance.SweepState()
    assert [maintenance.sweep(client.store, force=True, state=state)["replicas_unheld"] for _ in range(3)] == [1, 1, 0]
    assert whole_state(client)["held"] == {"g1": {"a": 1, "b": 1}}
