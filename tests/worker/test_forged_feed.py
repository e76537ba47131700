"""Entries on ``pool:changes`` that no modelplan script wrote: a node agent may add to the stream (the
heartbeat script writes it with the caller's rights), so a worker takes an entry as a reason to read the
nodes it names again, never as what they hold. Each forged entry here goes in by a plain ``XADD`` while
the worker's mirror is warm; the job submitted after it is planned on what the nodes' records hold."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from producer import Client
from tests.reliability.mirror_view import pool_view
from tests.worker.helpers import drain, hb, request, whole_state
from tests.worker.test_fallbacks_replicas import big_request
from tests.worker.test_mirror import parsed
from worker import jobs
from worker.keys import Keys
from worker.mirror import LAPSE_HEAP_SLACK, Mirror, Named
from worker.mirrored import MirroredStore
from worker.poolread import PoolReads
from worker.records import JobState, utcnow
from worker.reports import NodeRecord, parse_heartbeat
from worker.store import Store


def record(node_id: str, **kw: Any) -> str:
    """A node's record as ``heartbeat.lua`` stores it, with the figures given."""
    beat = parse_heartbeat(hb(node_id, **kw))
    return NodeRecord.model_validate({**dict(beat), "received_at": utcnow()}).model_dump_json()


def forge(client: Client, *entries: Mapping[str, str | bytes]) -> None:
    for fields in entries:
        client.redis.xadd(client.keys.pool_changes, fields)  # type: ignore[arg-type]


def warm(client: Client) -> None:
    """Two nodes of two h100-80g cards each, and a job placed on one card: the worker's mirror is read."""
    client.heartbeat(hb("gpu-0", gpus=2))
    client.heartbeat(hb("gpu-1", gpus=2))
    client.submit(request(), job_id="first")
    drain(client)
    assert client.get("first").state is JobState.PLACED


def mirror_matches_a_fresh_read(client: Client) -> None:
    """The worker's mirror, brought up to date as its next plan would, holds what a fresh read holds."""
    store = jobs.store_for(client.redis, client.keys.prefix)
    fresh = MirroredStore(client.redis, Keys(client.keys.prefix))
    assert pool_view(store.snapshot()) == pool_view(fresh.snapshot())


def cards_held(client: Client) -> dict[str, int]:
    """Cards held on each node, by every job together; checked against each node's cards."""
    out = {node: sum(by_job.values()) for node, by_job in whole_state(client)["held"].items()}
    for node, held in out.items():
        stored = client.redis.get(client.keys.node(node))
        assert stored is not None and held <= json.loads(stored)["gpus"], f"{node} double-booked"
    return out


def placed_on(client: Client, job_id: str) -> list[str]:
    rec = client.get(job_id)
    assert rec.state is JobState.PLACED, rec.reason
    return [r.node_id for r in rec.placement]


GONE: dict[str, list[dict[str, str | bytes]]] = {
    "gone": [{"n": "gpu-0", "gone": "1"}, {"n": "gpu-1", "gone": "1"}],
    "refreshed_lapsed": [{"ns": "gpu-0 gpu-1", "t": "0"}],
    "refreshed_lapsed_one_by_one": [{"n": "gpu-0", "t": "-60000"}, {"n": "gpu-1", "t": "0"}],
}


@pytest.mark.parametrize("kind", sorted(GONE))
def test_a_forged_gone_leaves_every_live_node_in_the_pool(client: Client, kind: str) -> None:
    """Every node said to be gone (or to lapse now) while its heartbeat lives: a job that fits is placed,
    not failed for a pool with no node."""
    warm(client)
    forge(client, *GONE[kind])
    client.submit(request(), job_id="second")
    drain(client)
    assert placed_on(client, "second")
    assert cards_held(client) in ({"gpu-0": 2}, {"gpu-0": 1, "gpu-1": 1}, {"gpu-1": 2})
    assert whole_state(client)["index"] == {"placed": ["first", "second"]}
    mirror_matches_a_fresh_read(client)


def nomination(gpus: int) -> str:
    return json.dumps({"gpus": gpus, "host_gb": 0, "boot_id": "boot-1", "nominated": True})


def test_a_forged_nomination_keeps_no_job_waiting(client: Client) -> None:
    """Every free card said to be held for a job ahead (no such job, no such hold): the next job is placed
    on them."""
    warm(client)
    (first_node,) = placed_on(client, "first")
    other = "gpu-1" if first_node == "gpu-0" else "gpu-0"
    forge(
        client,
        {"n": first_node, "h": "someone:nominated", "v": nomination(1)},
        {"n": other, "h": "someone:nominated", "v": nomination(2)},
    )
    client.submit(request(), job_id="second")
    drain(client)
    assert placed_on(client, "second")
    assert "ahead of it" not in client.get("second").reason
    state = whole_state(client)
    assert "nominated" not in state and state["index"] == {"placed": ["first", "second"]}
    cards_held(client)
    mirror_matches_a_fresh_read(client)


def test_a_forged_nomination_keeps_no_woken_job_waiting(client: Client) -> None:
    """A job waits for the one card of the pool; a nomination is forged on it for another job, then the
    card frees: the wake-up pass places the job."""
    client.heartbeat(hb("gpu-0", gpus=1))
    client.submit(request(), job_id="first")
    client.submit(request(), job_id="second")
    drain(client)
    assert placed_on(client, "first") == ["gpu-0"]
    assert client.get("second").state is JobState.WAITING
    forge(client, {"n": "gpu-0", "h": "someone:nominated", "v": nomination(1)})
    client.release("first")
    drain(client)
    assert placed_on(client, "second") == ["gpu-0"]
    state = whole_state(client)
    assert state["index"] == {"placed": ["second"], "released": ["first"]}
    assert "nominated" not in state and state["held"] == {"gpu-0": {"second": 1}}
    mirror_matches_a_fresh_read(client)


def test_a_forged_record_never_enters_a_plan(client: Client) -> None:
    """Both nodes said to have no card free, and a node that does not exist said to have eight: the job
    is placed on a real free card, and neither figure reaches the worker's mirror."""
    warm(client)
    forge(
        client,
        {"n": "gpu-0", "r": record("gpu-0", gpus=2, free=0, seq=9), "t": "60000"},
        {"n": "gpu-1", "r": record("gpu-1", gpus=2, free=0, seq=9), "t": "60000"},
        {"n": "ghost", "r": record("ghost", gpus=8, seq=1), "t": "60000"},
    )
    client.submit(request(), job_id="second")
    drain(client)
    assert placed_on(client, "second") != ["ghost"]
    assert "taken each time" not in client.get("second").reason
    assert sum(cards_held(client).values()) == 2
    assert whole_state(client)["index"] == {"placed": ["first", "second"]}
    mirror_matches_a_fresh_read(client)


def test_a_forged_record_of_another_class_fails_no_job(client: Client) -> None:
    """The only node said to hold no card at all: a failure is final and no commit re-checks it, so it
    must come from the node's record, not the entry."""
    client.heartbeat(hb("gpu-0", gpus=2))
    client.submit(request(), job_id="first")
    drain(client)
    forge(client, {"n": "gpu-0", "r": record("gpu-0", gpu_class="", host=1, seq=9), "t": "60000"})
    client.submit(request(), job_id="second")
    drain(client)
    assert placed_on(client, "second") == ["gpu-0"]
    assert whole_state(client)["held"] == {"gpu-0": {"first": 1, "second": 1}}
    mirror_matches_a_fresh_read(client)


def test_a_nomination_whose_commit_was_refused_keeps_no_job_waiting(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wake-up pass plans its jobs one after another, each on what those before it take: a large job
    ahead is nominated the card that freed, and a small job behind it waits for it. The large job's
    commit is refused (cancelled meanwhile), so no nomination is written: the small job is planned again
    on the card, not left waiting for a job ahead that holds nothing."""
    client.heartbeat(hb("gpu-big", gpus=8))
    small = [client.submit(request(), job_id=f"small-{i}") for i in range(8)]
    client.submit(big_request(), job_id="big")
    client.submit(request(), job_id="late")
    drain(client)
    assert [client.get(j).state for j in ("big", "late")] == [JobState.WAITING] * 2
    transitions = Store.transitions

    def cancelled_first(store: Store, calls: Any) -> Any:
        if client.get("big").state is JobState.WAITING:
            client.cancel("big")
        return transitions(store, calls)

    monkeypatch.setattr(Store, "transitions", cancelled_first)
    client.release(small[0])
    drain(client)
    assert placed_on(client, "late") == ["gpu-big"]
    state = whole_state(client)
    assert "nominated" not in state and state["held"] == {"gpu-big": {j: 1 for j in [*small[1:], "late"]}}
    assert state["index"] == {"cancelled": ["big"], "placed": sorted([*small[1:], "late"]), "released": ["small-0"]}
    mirror_matches_a_fresh_read(client)


def test_entries_that_name_no_node_or_change_nothing_cost_no_read(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ids that are no node id, refreshes no modelplan writes, holds the mirror already holds as said: each
    entry is passed over as it is read, and none has a node read again, nor does this worker's own commit
    read back."""
    warm(client)
    asked: list[tuple[list[str], list[str]]] = []
    ask = PoolReads._ask_nodes

    def spied(store: PoolReads, pipe: Any, named: Named) -> tuple[list[str], list[str]]:
        asked.append(ask(store, pipe, named))
        return asked[-1]

    monkeypatch.setattr(PoolReads, "_ask_nodes", spied)
    held = client.get("first").placement[0]
    value = client.redis.hget(client.keys.held(held.node_id), held.hold_id)
    assert value is not None
    forge(
        client,
        *({"n": f"no such node {i}", "gone": "1"} for i in range(100)),
        {"n": "x" * 129, "r": "{}", "t": "60000"},
        {"n": b"\xff\xfe", "r": "{}", "t": "60000"},
        {"n": "gpu-0", "h": "not a hold id", "v": nomination(2)},
        {"n": "gpu-0", "h": "someone:nominated", "v": ""},  # clears what is not there
        {"n": held.node_id, "h": held.hold_id, "v": value},
        {"n": "not-in-the-pool", "gone": "1"},
        {"ns": b"gpu-0 \xff", "t": "60000"},
        {"ns": " ".join(["gpu-1"] * 10_000), "t": "60000"},  # longer than any call's refreshes
        {"n": "gpu-0", "t": "soon"},
    )
    client.submit(request(), job_id="second")
    drain(client)
    assert placed_on(client, "second")
    mirror_matches_a_fresh_read(client)
    assert asked == []


def test_a_node_kept_past_its_lapse_by_a_forged_refresh_is_read_again_when_its_commit_is_refused(
    client: Client,
) -> None:
    """What a refresh's TTL may do, forged: keep a node in the mirror whose heartbeat lapsed. A plan on it
    is refused as ``silent``, the node read again, and the job planned on what is left."""
    client.heartbeat(hb("gpu-0", gpus=1))
    client.heartbeat(hb("gpu-1", gpus=1))
    client.submit(request(), job_id="first")
    drain(client)
    (taken,) = placed_on(client, "first")
    lapsed = "gpu-1" if taken == "gpu-0" else "gpu-0"
    client.redis.delete(client.keys.node(lapsed))
    forge(client, {"ns": lapsed, "t": str(10**12)})
    client.submit(request(), job_id="second")
    drain(client)
    assert client.get("second").state is JobState.WAITING
    assert whole_state(client)["held"] == {taken: {"first": 1}}
    mirror_matches_a_fresh_read(client)


def test_lapses_forged_far_off_keep_a_mirror_small() -> None:
    mirror = Mirror("1-0", 0)
    mirror.pool.put_node("a", parsed("a"))
    mirror.expires("a", 1_000)
    for i in range(3 * LAPSE_HEAP_SLACK):
        mirror.refreshed("a", 10**15 + i)
    assert len(mirror._due) <= 2 + LAPSE_HEAP_SLACK + 1
    assert mirror.due(10**15) == []
    mirror.expire(10**15 + 3 * LAPSE_HEAP_SLACK)
    assert mirror.pool.records == {}
