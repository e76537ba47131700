"""The worker's safety rules for a job of several replicas, one test each at least, each named in its
docstring (as ``test_rules.py``'s): the holds one commit writes on one node count together, a node lost
takes only its own replicas with it, and a job is never scaled past the replicas a request may ask.
``scripts/mutate`` breaks each rule in a copy of the code and expects these to fail."""

from __future__ import annotations

import pytest

from planner import InvalidInput
from producer import Client
from tests.worker.helpers import drain, empty_queue, hb, request, whole_state
from worker import moves
from worker.pool import HoldSpec
from worker.records import MAX_REPLICAS, JobState, utcnow


def commit_holds(client: Client, job_id: str, *holds: HoldSpec) -> str:
    """The commit script's answer to writing ``holds`` for ``job_id`` over its stored record."""
    rec = client.get(job_id)
    return client.store.transition(rec, rec.advance(rec.state, at=utcnow()), reason="test", place=holds).code


def queued(client: Client, job_id: str) -> None:
    client.submit(request(), job_id=job_id)
    empty_queue(client)


# --- the commit's re-checks (transition.lua) ------------------------------------------------------------


def test_two_holds_on_one_node_in_one_commit_count_together_against_its_cards(client: Client) -> None:
    """Rule: one card never to two replicas. A commit writing several holds on one node checks their sum
    against the node's cards, and against those its heartbeat counts free, not each hold alone: two that
    each fit but together do not are refused, and nothing is written."""
    client.heartbeat(hb("gpu-1", gpus=2))
    client.heartbeat(hb("gpu-2", gpus=4, free=2))  # two cards busy outside modelplan
    queued(client, "a")
    for node in ("gpu-1", "gpu-2"):
        assert commit_holds(client, "a", HoldSpec(node, "a:0:1", gpus=2), HoldSpec(node, "a:1:1", gpus=1)) == "full"
    assert whole_state(client)["held"] == {}
    assert commit_holds(client, "a", HoldSpec("gpu-2", "a:0:1", gpus=1), HoldSpec("gpu-2", "a:1:1", gpus=1)) == "ok"
    assert whole_state(client)["held"] == {"gpu-2": {"a": 2}}


def test_two_cpu_holds_on_one_node_in_one_commit_count_together_against_its_ram(client: Client) -> None:
    """Rule: the same for host memory: two CPU holds on one node in one commit must fit its free RAM
    together."""
    client.heartbeat(hb("cpu-1", "", host=256, host_free=100))
    queued(client, "a")
    assert (
        commit_holds(client, "a", HoldSpec("cpu-1", "a:0:1", host_gb=60.0), HoldSpec("cpu-1", "a:1:1", host_gb=60.0))
        == "full"
    )
    assert client.store.held_on("cpu-1") == {}
    assert (
        commit_holds(client, "a", HoldSpec("cpu-1", "a:0:1", host_gb=50.0), HoldSpec("cpu-1", "a:1:1", host_gb=50.0))
        == "ok"
    )


# --- a node lost (worker/moves.py) ----------------------------------------------------------------------


def two_nodes_one_replica_each(client: Client) -> tuple[str, dict[str, str]]:
    """A job of two replicas, one on each of two one-card nodes: its id and its hold id on each node."""
    client.heartbeat(hb("gpu-1", gpus=1, boot="boot-1"))
    client.heartbeat(hb("gpu-2", gpus=1, boot="boot-1"))
    job = client.submit(request(replicas=2))
    drain(client)
    rec = client.get(job)
    assert rec.state is JobState.PLACED
    holds = {p.node_id: p.hold_id for p in rec.placement}
    assert sorted(holds) == ["gpu-1", "gpu-2"]
    return job, holds


def test_a_silent_node_takes_only_its_own_replicas(client: Client) -> None:
    """Rule: when one node of a job's replicas goes silent, only the replicas on it are planned again: the
    other node's replica keeps its placement and its hold, untouched."""
    job, holds = two_nodes_one_replica_each(client)
    client.redis.delete(client.keys.node("gpu-2"))  # its heartbeat lapsed
    assert moves.node_silent(client.store, "gpu-2") == 1
    rec = client.get(job)
    assert [(p.node_id, p.hold_id) for p in rec.placement] == [("gpu-1", holds["gpu-1"])]
    assert sorted(client.store.held_on("gpu-1")) == [holds["gpu-1"]]
    assert client.store.held_on("gpu-2") == {}
    assert rec.state is JobState.WAITING and rec.reason.startswith("node gpu-2 went silent")


def test_a_restarted_node_takes_only_its_own_replicas(client: Client) -> None:
    """Rule: the same for a node back with a new boot: its replicas are planned again (onto it anew), the
    other node's keeps its hold."""
    job, holds = two_nodes_one_replica_each(client)
    assert client.heartbeat(hb("gpu-2", gpus=1, boot="boot-2"))
    drain(client)
    after = {p.node_id: p.hold_id for p in client.get(job).placement}
    assert after["gpu-1"] == holds["gpu-1"] and after["gpu-2"] != holds["gpu-2"]
    assert sorted(client.store.held_on("gpu-1")) == [holds["gpu-1"]]


# --- scaling (worker/scaling.py) ------------------------------------------------------------------------


def test_a_job_is_never_scaled_past_the_replicas_a_request_may_ask(client: Client) -> None:
    """Rule: scale takes 0 to ``MAX_REPLICAS`` (256) replicas; one more is refused in one line naming the
    field, and changes nothing, whatever state the job is in."""
    client.heartbeat(hb("gpu-1", gpus=1))
    placed = client.submit(request(), job_id="placed")
    drain(client)
    queued(client, "queued")
    for job in (placed, "queued"):
        before = client.get(job)
        with pytest.raises(InvalidInput, match=rf"replicas.*from 0 to {MAX_REPLICAS} \(given {MAX_REPLICAS + 1}\)"):
            client.scale(job, MAX_REPLICAS + 1)
        assert client.get(job) == before
    assert client.get("queued").wanted == 1
