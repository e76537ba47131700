"""Ids never reach a fixed key: a node, a job and a card class named after every fixed key name run the
whole flow, and a key a script would write that holds another type makes it write nothing."""

from __future__ import annotations

import json

import pytest

from planner import InvalidInput
from producer import Client
from tests.worker.helpers import drain, hb, request, whole_state
from worker.errors import WrongType
from worker.ids import ID_PATTERN
from worker.keys import Keys
from worker.records import JobState
from worker.scripts import text

ID_FAMILIES = ("node", "held", "job", "reply", "lock", "hub", "client", "owned", "boots", "conflict")
"""The key families that carry an id after their name (``node:{node_id}``, ...)."""


def fixed_keys(k: Keys) -> list[str]:
    """Every key ``Keys`` names without an id: its properties that give a key under the prefix."""
    out = []
    for name in dir(Keys):
        if isinstance(getattr(Keys, name), property):
            value = getattr(k, name)
            if (
                isinstance(value, str)
                and value.startswith(k.prefix + ":")
                and not value.endswith(":")
                and "*" not in value
            ):
                out.append(value)
    return sorted(out)


def fixed_names() -> list[str]:
    """The fixed keys' names after the prefix, each cut at every ``:``, that an id could spell."""
    k = Keys("mp")
    names = set()
    for key in fixed_keys(k):
        for part in key.removeprefix("mp:").split(":"):
            if ID_PATTERN.fullmatch(part):
                names.add(part)
    return sorted(names | {"mp", "rq", "queue", "events", "nominated"})


def test_no_fixed_key_shares_a_shape_with_an_id_family() -> None:
    k = Keys("mp")
    keys = fixed_keys(k)
    assert k.held_nodes in keys and k.wake_signal in keys and len(keys) > 15
    for key in keys:
        first = key.removeprefix("mp:").split(":", 1)[0]
        assert first not in ID_FAMILIES, f"{key} could be an id's key in the {first}: family"


def test_ids_and_classes_named_after_every_fixed_key_run_the_whole_flow(client: Client) -> None:
    names = fixed_names()
    assert {"nodes", "holding", "pending", "epoch", "signal", "classes"} <= set(names)
    for name in names:
        client.heartbeat(hb(name, f"{name}-80g", gpus=2))
    jobs = [client.submit(request(), job_id=name) for name in names]
    drain(client)
    state = whole_state(client)
    assert state["index"] == {"placed": sorted(jobs)}
    assert state["records"] == dict.fromkeys(jobs, "placed")
    assert sum(sum(h.values()) for h in state["held"].values()) == len(jobs)
    assert state["held_nodes"] == sorted(state["held"])
    # every node's record is still the heartbeat it sent, and every hold key is a hash
    for name in names:
        assert json.loads(text(client.redis.get(client.keys.node(name))))["node_id"] == name
        assert text(client.redis.type(client.keys.held(name))) in ("hash", "none")
    for job in jobs:
        client.release(job)
    state = whole_state(client)
    assert state["index"] == {"released": sorted(jobs)} and state["held"] == {} and state["held_nodes"] == []


@pytest.mark.parametrize("reserved", ["cpu", "any"])
def test_a_card_class_named_like_a_reserved_class_is_refused(client: Client, reserved: str) -> None:
    with pytest.raises(InvalidInput, match=f"gpu_class '{reserved}' is reserved"):
        client.heartbeat({**hb("n1"), "gpu_class": reserved, "gpu_mem_gb": 80})
    assert client.redis.keys("*") == []


def test_a_mistyped_hint_is_repaired_and_the_commit_goes_through(client: Client) -> None:
    client.heartbeat(hb("gpu-1", gpus=2))
    client.redis.set(client.keys.wake_classes, "x")
    client.redis.set(client.keys.pool_changes, "x")
    job = client.submit(request())
    drain(client)
    assert client.get(job).state is JobState.PLACED
    assert whole_state(client)["held"] == {"gpu-1": {job: 1}}
    assert text(client.redis.type(client.keys.wake_classes)) in ("set", "none")
    assert text(client.redis.type(client.keys.pool_changes)) == "stream"


def test_a_mistyped_index_makes_the_commit_write_nothing(client: Client) -> None:
    client.heartbeat(hb("gpu-1", gpus=2))
    client.redis.set(client.keys.held_nodes, "x")
    job = client.submit(request())
    rec = client.get(job)
    with pytest.raises(WrongType, match="holding holds another type"):
        client.store.transition(
            rec, rec.model_copy(update={"version": rec.version + 1}), reason="test", clear=[("gpu-1", "h:1:1", "c")]
        )
    # not a hint: left as it is, and nothing of the move was written
    assert client.redis.get(client.keys.held_nodes) == b"x"
    assert client.get(job) == rec
    assert client.redis.xlen(client.keys.job_events(job)) == 1


def test_a_claim_that_meets_a_mistyped_index_writes_nothing(client: Client) -> None:
    job = client.submit(request())
    before = client.get(job)
    client.redis.set(client.keys.jobs(JobState.PLANNING), "x")
    with pytest.raises(WrongType, match="jobs:planning holds another type"):
        client.store.claim_and_pool(job, "w1")
    assert client.get(job) == before
    assert client.redis.zrange(client.keys.jobs(JobState.QUEUED), 0, -1) == [job.encode()]
    assert client.redis.xlen(client.keys.job_events(job)) == 1
