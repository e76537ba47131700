"""Fallbacks, replicas and fair waiting, against a real Redis."""

from __future__ import annotations

import time
from typing import Any

import pytest

from producer import Client
from tests.worker.helpers import drain, hb, request, whole_state
from worker import constants as C
from worker import maintenance
from worker.records import JobRecord, JobState, ServeRequest, parse_request
from worker.scripts import text


def states_seen(client: Client, job_id: str) -> list[str]:
    entries: Any = client.redis.xrange(client.keys.job_events(job_id))
    return [text(fields[b"state"]) for _, fields in entries]


def big_request(gib: int = 400, **kw: Any) -> ServeRequest:
    """An original-weights model of ``gib`` GiB: 400 GiB takes all eight of an h100-80g node's cards."""
    data = {
        "model": "big",
        "artifacts": [{"name": "original", "format": "safetensors", "bytes": gib << 30, "quant": "bf16"}],
        "shape": {"kv_bytes_per_token": 0, "kv_heads": 8},
        "context": 4096,
        **kw,
    }
    return parse_request(data)


# --- fallbacks ------------------------------------------------------------------------------------------


def test_a_fallback_runs_on_the_cpu_then_moves_onto_its_card(client: Client) -> None:
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=1, free=0, host=4, seq=1))
    client.heartbeat(hb("cpu-1", "", host=256, seq=1))
    job = client.submit(request("llama-3-8b-gguf", fallback=True))
    drain(client)
    rec = client.get(job)
    [replica] = rec.replicas
    assert rec.state is JobState.PLACED and rec.summary == "placed 1 of 1, 1 on a fallback"
    assert rec.option is not None and rec.option.gpu_class == "h100-80g"  # the target
    assert replica.state == "fallback" and replica.option is not None and replica.option.cpu  # where it runs
    assert [p.node_id for p in replica.placement] == ["cpu-1"]
    assert replica.wait is not None and replica.wait.kind == "resources" and replica.wait.nodes == ("gpu-1",)
    assert rec.pending and client.redis.zscore(client.keys.pending, job) is not None
    fallback_hold = replica.placement[0].hold_id
    # the card frees: the replica moves onto it, and the CPU reservation goes, in one step
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=1, free=1, host=4, seq=2))
    drain(client)
    moved = client.get(job)
    [replica] = moved.replicas
    assert moved.state is JobState.PLACED and moved.summary == "placed 1 of 1"
    assert replica.state == "placed" and replica.option == moved.option and replica.wait is None
    assert [p.node_id for p in replica.placement] == ["gpu-1"] and replica.placement[0].hold_id != fallback_hold
    assert not moved.pending and client.redis.zscore(client.keys.pending, job) is None
    assert whole_state(client) == {
        "index": {"placed": [job]},
        "records": {job: "placed"},
        "held": {"gpu-1": {job: 1}},
        "held_nodes": ["gpu-1"],
    }
    # never neither placed nor waiting once planned: every change after planning is one of the two
    seen = states_seen(client, job)
    assert seen[:2] == ["queued", "planning"] and set(seen[2:]) <= {"placed", "waiting"} and len(seen) >= 4


def test_a_fallback_on_another_class(client: Client) -> None:
    # a 70B model: four h100 cards (busy) rank before two a100 nodes' eight cards (free)
    client.heartbeat(hb("h100", "h100-80g", gpus=4, free=0, seq=1))
    for n in ("a100-a", "a100-b"):
        client.heartbeat(hb(n, "a100-40g", gpus=4, fabric="ib", seq=1))
    job = client.submit(request("llama-3.1-70b-instruct", fallback=True))
    drain(client)
    rec = client.get(job)
    [replica] = rec.replicas
    assert rec.option is not None and (rec.option.gpu_class, rec.option.gpus) == ("h100-80g", 4)
    assert replica.state == "fallback" and replica.option is not None
    assert (replica.option.gpu_class, replica.option.nodes, replica.option.gpus_per_node) == ("a100-40g", 2, 4)
    assert whole_state(client)["held"] == {"a100-a": {job: 4}, "a100-b": {job: 4}}


def test_without_the_flag_it_waits(client: Client) -> None:
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=1, free=0, seq=1))
    client.heartbeat(hb("cpu-1", "", host=256, seq=1))
    job = client.submit(request("llama-3-8b-gguf"))
    drain(client)
    assert client.get(job).state is JobState.WAITING and whole_state(client)["held"] == {}


def test_with_nothing_free_a_fallback_job_waits(client: Client) -> None:
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=1, free=0, seq=1))
    job = client.submit(request(fallback=True))
    drain(client)
    rec = client.get(job)
    assert rec.state is JobState.WAITING and rec.replicas[0].state == "waiting"


# --- replicas -------------------------------------------------------------------------------------------


def test_replicas_are_placed_and_wait_each_on_their_own(client: Client) -> None:
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=2, seq=1))
    job = client.submit(request(replicas=3))
    drain(client)
    rec = client.get(job)
    assert rec.state is JobState.WAITING and rec.summary == "placed 2 of 3"
    assert [r.state for r in rec.replicas] == ["placed", "placed", "waiting"]
    assert rec.reason.startswith("placed 2 of 3 on 1 × h100-80g; waiting for 1 × h100-80g")
    client.heartbeat(hb("gpu-2", "h100-80g", gpus=1, seq=1))
    drain(client)
    rec = client.get(job)
    assert rec.state is JobState.PLACED and rec.summary == "placed 3 of 3"
    assert sorted(p.node_id for p in rec.placement) == ["gpu-1", "gpu-1", "gpu-2"]
    assert whole_state(client)["held"] == {"gpu-1": {job: 2}, "gpu-2": {job: 1}}
    client.release(job)
    assert whole_state(client)["held"] == {} and client.get(job).state is JobState.RELEASED


def test_scaling_changes_only_the_difference(client: Client) -> None:
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=4, seq=1))
    job = client.submit(request(replicas=2))
    drain(client)
    before = {r.index: r.placement for r in client.get(job).replicas}
    up = client.scale(job, 6)
    assert up.summary == "placed 4 of 6" and up.state is JobState.WAITING
    assert {r.index: r.placement for r in up.replicas if r.index in before} == before
    assert [r.index for r in up.replicas] == [0, 1, 2, 3, 4, 5]
    down = client.scale(job, 3)
    assert [r.index for r in down.replicas] == [0, 1, 2]  # the waiting ones went first, then the newest
    assert {r.index: r.placement for r in down.replicas if r.index in before} == before
    assert down.state is JobState.PLACED and whole_state(client)["held"] == {"gpu-1": {job: 3}}
    drain(client)  # the pass woken by the freed cards changes nothing more
    assert client.get(job).version == down.version


def test_scaling_a_queued_job_takes_effect_when_planned(client: Client) -> None:
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=4, seq=1))
    job = client.submit(request())
    assert client.scale(job, 3).wanted == 3
    drain(client)
    assert client.get(job).summary == "placed 3 of 3"


# --- fair waiting ---------------------------------------------------------------------------------------


def place_small_jobs(client: Client, count: int) -> list[str]:
    jobs = [client.submit(request()) for _ in range(count)]
    drain(client)
    assert all(client.get(j).state is JobState.PLACED for j in jobs)
    return jobs


def test_a_large_job_is_not_starved_by_a_stream_of_small_ones(client: Client) -> None:
    client.heartbeat(hb("gpu-big", "h100-80g", gpus=8, seq=1))
    small = place_small_jobs(client, 8)  # every card of the node in use
    big = client.submit(big_request())
    drain(client)
    rec = client.get(big)
    assert rec.state is JobState.WAITING and rec.option is not None and rec.option.gpus_per_node == 8
    frees = 0
    newcomers: list[str] = []
    while client.get(big).state is not JobState.PLACED:
        assert frees < 8, "the large job was not placed within eight frees"
        client.release(small[frees])  # a card frees ...
        newcomers.append(client.submit(request()))  # ... and a small job arrives to take it
        frees += 1
        drain(client)
        rec = client.get(big)
        if rec.state is JobState.WAITING:
            assert rec.nomination is not None and rec.nomination.wanted == 8
            assert [(h.node_id, h.gpus) for h in rec.nomination.holds] == [("gpu-big", frees)]
            assert f"holding cards on gpu-big ({frees} of 8) for it until" in rec.reason
            late = client.get(newcomers[-1])
            assert late.state is JobState.WAITING and late.replicas[0].wait is not None
            assert late.replicas[0].wait.kind == "priority"
            assert "its cards are held for a job ahead of it" in late.reason
    assert frees == 8
    placed = client.get(big)
    assert placed.nomination is None and [p.gpus for p in placed.placement] == [8]
    assert whole_state(client)["held"] == {"gpu-big": {big: 8}} and "nominated" not in whole_state(client)


def test_small_jobs_use_cards_that_do_not_delay_the_large_one(client: Client) -> None:
    client.heartbeat(hb("gpu-big", "h100-80g", gpus=8, seq=1))
    small = place_small_jobs(client, 8)
    big = client.submit(big_request())
    drain(client)
    client.release(small[0])
    drain(client)
    assert client.get(big).nomination is not None
    client.heartbeat(hb("gpu-other", "h100-80g", gpus=2, seq=1))  # cards the large job cannot use
    newcomer = client.submit(request())
    drain(client)
    rec = client.get(newcomer)
    assert rec.state is JobState.PLACED and [p.node_id for p in rec.placement] == ["gpu-other"]


def test_a_hold_that_sees_no_card_free_lapses(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    client.heartbeat(hb("gpu-big", "h100-80g", gpus=8, seq=1))
    small = place_small_jobs(client, 8)
    big = client.submit(big_request())
    drain(client)
    client.release(small[0])
    monkeypatch.setattr(C, "NOMINATION_S", 1)
    drain(client)
    assert client.get(big).nomination is not None
    time.sleep(1.1)
    maintenance.sweep(client.store, force=True)  # the safety-net pass sees the hold past its time
    drain(client)
    rec: JobRecord = client.get(big)
    assert rec.nomination is None and rec.state is JobState.WAITING and rec.hold_lapsed_at is not None
    assert "its hold on gpu-big lapsed with no card freeing for 1 s" in rec.reason
    assert "nominated" not in whole_state(client)
    # the card it held is free for others again
    newcomer = client.submit(request())
    drain(client)
    assert client.get(newcomer).state is JobState.PLACED


def test_every_waiting_record_gives_its_reason(client: Client) -> None:
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=2, free=0, seq=1))
    client.heartbeat(hb("cpu-1", "", host=16, seq=1))
    jobs = [
        client.submit(request()),
        client.submit(request("llama-3-8b-gguf", replicas=2)),
        client.submit(big_request(gib=100)),
    ]
    drain(client)
    for job in jobs:
        rec = client.get(job)
        assert rec.state is JobState.WAITING and rec.reason.startswith(("waiting for", "placed 0 of"))
        for replica in rec.replicas:
            assert replica.state == "waiting" and replica.wait is not None
            assert replica.wait.kind in ("resources", "priority") and replica.wait.option == rec.option
            assert replica.wait.nodes == ("gpu-1",) and replica.wait.missing["gpu-1"] >= 1
            assert replica.wait.text in rec.reason
