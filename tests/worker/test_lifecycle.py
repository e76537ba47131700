"""Serve jobs against a real Redis: placed, failed, waiting and woken, released, silent and restarted
nodes, cancel, watch. RQ jobs run in this process with a burst SimpleWorker."""

from __future__ import annotations

import hashlib
import json
import random
import time
from typing import Any

import pytest

from planner import InvalidInput
from producer import Client
from tests.worker.helpers import (
    drain,
    empty_queue,
    event_reasons,
    hb,
    queued_functions,
    request,
    signalled,
    whole_state,
)
from worker import constants as C
from worker import maintenance, planning
from worker.errors import JobExists, JobNotFound, WrongState
from worker.ids import planning_job_id
from worker.records import JobState, utcnow
from worker.reports import NodeRecord, parse_heartbeat
from worker.scripts import text


def test_placed_on_a_free_card(client: Client) -> None:
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=2))
    job = client.submit(request())
    assert client.get(job).state is JobState.QUEUED
    drain(client)
    rec = client.get(job)
    assert rec.state is JobState.PLACED and rec.option is not None
    assert (rec.option.label, [(p.node_id, p.gpus) for p in rec.placement]) == ("1 × h100-80g", [("gpu-1", 1)])
    assert rec.alternatives[0] == rec.option and rec.attempts == 1 and rec.worker is None
    assert whole_state(client) == {
        "index": {"placed": [job]},
        "records": {job: "placed"},
        "held": {"gpu-1": {job: 1}},
        "held_nodes": ["gpu-1"],
    }
    # the agent does not show the job yet: its card is not free for another plan
    [node] = client.pool().nodes
    assert (node.free_gpus, node.gpus) == (1, 2)


def test_failed_says_what_was_too_large_for_what(client: Client) -> None:
    client.heartbeat(hb("small", "rtx4090-24g", gpus=1, host=32))
    job = client.submit(request("llama-3.1-70b-instruct"))
    drain(client)
    rec = client.get(job)
    assert rec.state is JobState.FAILED and rec.option is None and rec.placement == ()
    assert rec.reason.startswith("nothing in the pool can hold it: original (131.4 GiB")
    assert "a card on 1 × rtx4090-24g of 21.6" in rec.reason
    assert whole_state(client) == {"index": {"failed": [job]}, "records": {job: "failed"}, "held": {}, "held_nodes": []}


def test_waiting_is_placed_by_the_heartbeat_that_frees_its_card_and_nothing_else(client: Client) -> None:
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=1, free=0, seq=1))
    client.heartbeat(hb("cpu-1", "", host=512, seq=1))
    job = client.submit(request("llama-3-8b-gguf"))
    drain(client)
    rec = client.get(job)
    # busy is not unfit: it waits for the card rather than running on the free CPU node
    assert rec.state is JobState.WAITING and rec.option is not None and not rec.option.cpu
    assert rec.reason == (
        "waiting for 1 × h100-80g for Meta-Llama-3-8B-Instruct-BF16.gguf: 1 node(s) could hold it; "
        "gpu-1 lacks 1 card(s)"
    )
    [replica] = rec.replicas
    assert replica.state == "waiting" and replica.wait is not None
    assert (replica.wait.kind, replica.wait.nodes, replica.wait.missing) == ("resources", ("gpu-1",), {"gpu-1": 1})
    assert replica.wait.option == rec.option
    # heartbeats that free nothing (the CPU node, the same busy card) queue no pass and place nothing
    client.heartbeat(hb("cpu-1", "", host=512, seq=2))
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=1, free=0, seq=2))
    assert queued_functions(client) == [] and not signalled(client)
    drain(client)
    assert client.get(job).state is JobState.WAITING
    # the card frees: one pass is queued and places the job
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=1, free=1, seq=3))
    assert queued_functions(client) == [] and signalled(client)
    drain(client)
    rec = client.get(job)
    assert rec.state is JobState.PLACED and [p.node_id for p in rec.placement] == ["gpu-1"]
    assert whole_state(client) == {
        "index": {"placed": [job]},
        "records": {job: "placed"},
        "held": {"gpu-1": {job: 1}},
        "held_nodes": ["gpu-1"],
    }


def test_release_places_a_waiting_job(client: Client) -> None:
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=1))
    first = client.submit(request())
    drain(client)
    second = client.submit(request("qwen2.5-7b-instruct"))
    drain(client)
    assert (client.get(first).state, client.get(second).state) == (JobState.PLACED, JobState.WAITING)
    released = client.release(first)
    assert released.state is JobState.RELEASED
    drain(client)
    assert client.get(second).state is JobState.PLACED
    assert whole_state(client) == {
        "index": {"placed": [second], "released": [first]},
        "records": {first: "released", second: "placed"},
        "held": {"gpu-1": {second: 1}},
        "held_nodes": ["gpu-1"],
    }
    with pytest.raises(WrongState, match="is released: release applies only to placed or waiting jobs"):
        client.release(first)


def test_waiting_jobs_are_placed_by_priority_then_arrival(client: Client) -> None:
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=2, free=0, seq=1))
    low = client.submit(request(priority=1))
    high = client.submit(request(priority=9))
    later_high = client.submit(request(priority=9, context=4096))
    drain(client)
    assert {client.get(j).state for j in (low, high, later_high)} == {JobState.WAITING}
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=2, free=2, seq=2))
    drain(client)
    assert [client.get(j).state for j in (high, later_high, low)] == [
        JobState.PLACED,
        JobState.PLACED,
        JobState.WAITING,
    ]


def test_a_silent_node_sends_its_jobs_back_through_planning(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(C, "NODE_TTL_MS", 300)
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=1))
    job = client.submit(request())
    drain(client)
    assert client.get(job).state is JobState.PLACED
    monkeypatch.setattr(C, "NODE_TTL_MS", 60_000)
    client.heartbeat(hb("gpu-2", "h100-80g", gpus=1))
    time.sleep(0.4)
    assert [n.id for n in client.pool().nodes] == ["gpu-2"]
    empty_queue(client)
    done = maintenance.sweep(client.store, force=True)
    # handed to a worker, which plans its jobs on the pool it keeps in memory; not handed twice
    assert done["node_silent"] == 1 and queued_functions(client) == ["worker.jobs.node_silent"]
    assert maintenance.sweep(client.store, force=True).get("node_silent", 0) == 0
    assert client.get(job).state is JobState.PLACED and client.store.node_ids() == ["gpu-1", "gpu-2"]
    drain(client)
    rec = client.get(job)
    assert rec.reason == "node gpu-1 went silent; placed original on 1 × h100-80g: gpu-2"
    assert rec.state is JobState.PLACED and [p.node_id for p in rec.placement] == ["gpu-2"]
    assert client.store.node_ids() == ["gpu-2"]
    assert whole_state(client) == {
        "index": {"placed": [job]},
        "records": {job: "placed"},
        "held": {"gpu-2": {job: 1}},
        "held_nodes": ["gpu-2"],
    }


def test_a_silent_node_is_handed_on_only_while_silent(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """A node that held nothing is dropped by the sweep itself; a ``node_silent`` job for a node whose
    heartbeat is back (late, or forged) changes nothing."""
    monkeypatch.setattr(C, "NODE_TTL_MS", 300)
    client.heartbeat(hb("idle", "h100-80g", gpus=1, seq=1))
    client.heartbeat(hb("busy", "h100-80g", gpus=1, seq=1))
    job = client.submit(request())
    drain(client)
    [hold] = client.get(job).placement
    assert hold.node_id == "busy"
    time.sleep(0.4)
    empty_queue(client)
    assert maintenance.sweep(client.store, force=True)["node_silent"] == 2
    assert client.store.node_ids() == ["busy"] and queued_functions(client) == ["worker.jobs.node_silent"]
    monkeypatch.setattr(C, "NODE_TTL_MS", 60_000)
    client.heartbeat(hb("busy", "h100-80g", gpus=1, free=0, seq=2, started=(hold.hold_id,)))
    drain(client)
    rec = client.get(job)
    assert rec.state is JobState.PLACED and [p.node_id for p in rec.placement] == ["busy"]
    assert client.store.node_ids() == ["busy"]


def test_a_restarted_node_sends_its_old_jobs_back_through_planning(client: Client) -> None:
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=1, seq=7, boot="boot-1"))
    job = client.submit(request())
    drain(client)
    assert client.get(job).state is JobState.PLACED
    # same node id, new boot: its seq starts again, and the old placement is gone with the old boot
    assert client.heartbeat(hb("gpu-1", "h100-80g", gpus=1, seq=1, boot="boot-2"))
    drain(client)
    rec = client.get(job)
    assert rec.state is JobState.PLACED and rec.attempts == 2
    assert event_reasons(client, job)[-1] == "node gpu-1 restarted; placed original on 1 × h100-80g: gpu-1"
    assert whole_state(client)["held"] == {"gpu-1": {job: 1}}
    assert [h.boot_id for h in client.store.held_on("gpu-1").values()] == ["boot-2"]


def test_an_older_heartbeat_changes_nothing(client: Client) -> None:
    assert client.heartbeat(hb("gpu-1", gpus=2, free=1, seq=5))
    before = client.redis.get(client.keys.node("gpu-1"))
    assert not client.heartbeat(hb("gpu-1", gpus=2, free=2, seq=4))
    assert not client.heartbeat(hb("gpu-1", gpus=2, free=2, seq=5))
    assert client.redis.get(client.keys.node("gpu-1")) == before
    assert queued_functions(client) == [] and signalled(client)  # from the node joining, not the stale ones


def test_a_burst_of_freeing_heartbeats_makes_one_pass(client: Client) -> None:
    for i in range(30):
        client.heartbeat(hb(f"gpu-{i}", gpus=1, free=0, seq=1))
    client.submit(request())
    drain(client)
    for i in range(30):
        client.heartbeat(hb(f"gpu-{i}", gpus=1, free=1, seq=2))
    assert queued_functions(client) == [] and signalled(client)


def test_cards_freed_where_no_job_waits_queue_no_pass(client: Client) -> None:
    """Freed capacity bumps the epoch (a plan made before it must not commit a wait), but queues a wake-up
    pass only for a class some pending job waits on: a busy pool whose cards come and go costs no pass."""
    client.heartbeat(hb("h100", gpus=1, free=0, seq=1))
    client.heartbeat(hb("cpu", gpu_class="", host_free=10, seq=1))
    drain(client)
    epoch = int(client.redis.get(client.keys.epoch) or 0)
    client.heartbeat(hb("h100", gpus=1, free=1, seq=2))
    assert queued_functions(client) == [] and not signalled(client)
    assert int(client.redis.get(client.keys.epoch) or 0) == epoch + 1
    client.heartbeat(hb("h100", gpus=1, free=0, seq=3))
    job = client.submit(request())
    drain(client)
    assert client.get(job).state is JobState.WAITING
    assert client.redis.hget(client.keys.pending_for, job) == b"h100-80g"
    assert client.redis.hgetall(client.keys.pending_classes) == {b"h100-80g": b"1"}
    client.heartbeat(hb("cpu", gpu_class="", host_free=200, seq=2))
    assert queued_functions(client) == [] and not signalled(client)  # RAM freed on a CPU node: nobody waits on it
    client.heartbeat(hb("h100", gpus=1, free=1, seq=4))
    assert queued_functions(client) == [] and signalled(client)
    drain(client)
    assert client.get(job).state is JobState.PLACED
    assert client.redis.hgetall(client.keys.pending_classes) == {}


def test_the_sweep_counts_the_pending_classes_anew(client: Client) -> None:
    """A count that went wrong (or that an older modelplan never kept) holds back no wake-up for longer
    than the sweep's interval: the waiting sweep counts ``pending:classes`` anew from ``pending:for``."""
    client.heartbeat(hb("h100", gpus=1, free=0, seq=1))
    job = client.submit(request())
    drain(client)
    assert client.get(job).state is JobState.WAITING
    client.redis.delete(client.keys.pending_classes)
    client.redis.hset(client.keys.pending_classes, "l40s-48g", 3)
    client.heartbeat(hb("h100", gpus=1, free=1, seq=2))
    assert queued_functions(client) == [] and not signalled(client)  # the count is wrong: nobody seems to wait
    maintenance.sweep(client.store, force=True)
    assert client.redis.hgetall(client.keys.pending_classes) == {b"h100-80g": b"1"}
    drain(client)  # the sweep's full pass
    assert client.get(job).state is JobState.PLACED
    assert client.redis.hgetall(client.keys.pending_classes) == {}


def test_cards_freed_while_a_job_is_planned_into_waiting_still_wake_it(client: Client) -> None:
    client.heartbeat(hb("gpu-1", gpus=1, free=0, seq=1))
    drain(client)
    job = client.submit(request())
    empty_queue(client)
    rec = planning.claim(client.store, job, "w1")
    assert rec is not None
    snap = client.store.snapshot()  # the card is busy in this snapshot
    client.heartbeat(hb("gpu-1", gpus=1, free=1, seq=2))
    drain(client)  # the wake-up pass runs before the job is waiting: it finds nothing
    plan = planning.plan_for(rec, snap)
    assert plan.outcome == "waiting"
    code, new = planning.commit(client.store, rec, planning.change_for(rec, plan, now=utcnow()), snap)
    assert code == "ok" and new is not None and new.state is JobState.WAITING
    assert queued_functions(client) == [] and signalled(client)
    drain(client)
    assert client.get(job).state is JobState.PLACED


def test_a_card_taken_outside_modelplan_stays_taken(client: Client) -> None:
    client.heartbeat(hb("gpu-1", gpus=2, free=1, seq=1))  # one card used by something else
    first = client.submit(request())
    second = client.submit(request())
    drain(client)
    assert (client.get(first).state, client.get(second).state) == (JobState.PLACED, JobState.WAITING)
    # the agent now shows the first job on its card and lists it as started: still nothing free
    started = tuple(r.hold_id for r in client.get(first).placement)
    client.heartbeat(hb("gpu-1", gpus=2, free=0, seq=2, started=started))
    drain(client)
    assert client.get(second).state is JobState.WAITING
    assert [n.free_gpus for n in client.pool().nodes] == [0]
    # the outside process ends: its card is free for the second job
    client.heartbeat(hb("gpu-1", gpus=2, free=1, seq=3, started=started))
    drain(client)
    assert client.get(second).state is JobState.PLACED
    assert whole_state(client)["held"] == {"gpu-1": {first: 1, second: 1}}


def test_cpu_placement_holds_host_memory(client: Client) -> None:
    client.heartbeat(hb("cpu-1", "", host=64, seq=1))
    first = client.submit(request("llama-3-8b-gguf", artifact="Meta-Llama-3-8B-Instruct-Q4_K_M.gguf"))
    second = client.submit(request("llama-3-8b-gguf", artifact="Meta-Llama-3-8B-Instruct-BF16.gguf"))
    drain(client)
    a, b = client.get(first), client.get(second)
    assert a.state is JobState.PLACED and a.option is not None and a.option.cpu
    assert a.placement[0].host_gb == pytest.approx(a.option.need_gb)
    # 64 GiB: 6.1 GiB held by the first leaves 57 free; the BF16 needs 18.4 and fits too
    assert b.state is JobState.PLACED
    [node] = client.pool().nodes
    assert node.host_free_gb == int(64 - a.placement[0].host_gb - b.placement[0].host_gb)


def test_cancel_and_its_limits(client: Client) -> None:
    client.heartbeat(hb("gpu-1", gpus=1, free=0))
    job = client.submit(request())
    drain(client)
    assert client.cancel(job).state is JobState.CANCELLED
    assert client.redis.hget(client.keys.pending_for, job) is None
    assert client.redis.ttl(client.keys.job(job)) > 0
    with pytest.raises(WrongState, match="is cancelled: cancel applies only to queued, planning or waiting jobs"):
        client.cancel(job)
    with pytest.raises(JobNotFound, match="job 'nope': no such job"):
        client.get("nope")
    queued = client.submit(request())
    assert client.cancel(queued).state is JobState.CANCELLED
    drain(client)  # its planning job finds nothing to do
    assert client.get(queued).state is JobState.CANCELLED


def test_submit_is_idempotent_per_job_id(client: Client) -> None:
    client.heartbeat(hb("gpu-1", gpus=4))
    assert client.submit(request(), job_id="svc-a-1") == "svc-a-1"
    assert client.submit(request(), job_id="svc-a-1") == "svc-a-1"
    assert queued_functions(client).count("worker.jobs.plan_job") == 1
    with pytest.raises(JobExists, match="job 'svc-a-1': already submitted with a different request"):
        client.submit(request(context=4096), job_id="svc-a-1")
    drain(client)
    # running its planning job again (RQ delivering it twice) changes nothing
    client.store.enqueue_plan("svc-a-1")
    drain(client)
    rec = client.get("svc-a-1")
    assert (rec.state, rec.version, rec.attempts) == (JobState.PLACED, 2, 1)
    assert whole_state(client)["held"] == {"gpu-1": {"svc-a-1": 1}}


def stream_reads(client: Client, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The ``block`` (ms) of each blocking read ``client`` makes from now on: ``watch``'s waits on a stream."""
    reads: list[int] = []
    xread = client.redis.xread

    def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append(kwargs["block"])
        return xread(*args, **kwargs)

    monkeypatch.setattr(client.redis, "xread", counted)
    return reads


def test_watch_yields_each_change_until_settled(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    client.heartbeat(hb("gpu-1", gpus=1, free=0, seq=1))
    job = client.submit(request())
    seen = client.watch(job, timeout=5, through_waiting=True)
    assert next(seen).state is JobState.QUEUED
    drain(client)
    assert next(seen).state in (JobState.PLANNING, JobState.WAITING)
    client.heartbeat(hb("gpu-1", gpus=1, free=1, seq=2))
    drain(client)
    states = [r.state for r in seen]
    assert states[-1] is JobState.PLACED
    # a settled job: its record, and no wait on its stream for a change that will not come
    reads = stream_reads(client, monkeypatch)
    assert [r.state for r in client.watch(job, timeout=5)] == [JobState.PLACED]
    assert reads == []


def test_watch_gives_up_at_its_timeout(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    client.heartbeat(hb("gpu-1", gpus=1, free=0))
    job = client.submit(request())
    drain(client)
    reads = stream_reads(client, monkeypatch)
    assert [r.state for r in client.watch(job, timeout=0.3, through_waiting=True)] == [JobState.WAITING]
    # it ended with the job unsettled, having waited on the stream no longer than its timeout each time
    assert client.get(job).state is JobState.WAITING
    assert reads and all(0 < block <= 300 for block in reads), reads


def test_watch_stops_at_waiting_unless_told_to_wait_on(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """A waiting job may wait for hours: a watch returns once it is waiting, with the record that says
    what for, rather than sitting silent on the stream until its timeout."""
    client.heartbeat(hb("gpu-1", gpus=1, free=0, seq=1))
    job = client.submit(request())
    seen = client.watch(job, timeout=60)
    assert next(seen).state is JobState.QUEUED
    drain(client)
    reads = stream_reads(client, monkeypatch)
    assert [r.state for r in seen][-1] is JobState.WAITING
    # the changes it had not read yet were there at once: no read waited past them for a change to come
    assert len(reads) == 1, reads
    reads.clear()
    waiting = list(client.watch(job, timeout=60))
    assert [r.state for r in waiting] == [JobState.WAITING] and waiting[0].option is not None
    assert reads == []


def test_a_lapsed_lease_sends_the_job_back(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(C, "LEASE_MS", 50)
    client.heartbeat(hb("gpu-1", gpus=1))
    job = client.submit(request())
    empty_queue(client)
    assert planning.claim(client.store, job, "lost-worker") is not None
    time.sleep(0.1)
    assert maintenance.sweep(client.store, force=True)["lease_expired"] == 1
    rec = client.get(job)
    assert (rec.state, rec.reason) == (JobState.QUEUED, "worker lost-worker stopped mid-plan (its lease expired)")
    drain(client)
    assert client.get(job).state is JobState.PLACED


def test_a_claim_rewrites_only_the_head_of_a_queued_record(client: Client) -> None:
    """``claim.lua`` takes a queued job without decoding its record: what it stores is, byte for byte, the
    record a worker would have written, and the job's stream and indexes say planning."""
    job = client.submit(request())
    empty_queue(client)
    before = client.get(job)
    claimed = planning.claim(client.store, job, "w-1")
    assert claimed is not None
    raw = client.redis.get(client.keys.job(job))
    assert raw == claimed.to_stored().encode()
    assert claimed == before.model_copy(
        update={
            "state": JobState.PLANNING,
            "version": before.version + 1,
            "worker": "w-1",
            "lease_until": claimed.lease_until,
            "updated_at": claimed.updated_at,
        }
    )
    assert claimed.lease_until is not None and claimed.lease_until > claimed.updated_at > before.updated_at
    assert client.redis.zscore(client.keys.jobs(JobState.PLANNING), job) == claimed.lease_until.timestamp() * 1000
    assert client.redis.zscore(client.keys.jobs(JobState.QUEUED), job) is None
    assert event_reasons(client, job)[-1] == "planning on w-1"
    assert planning.claim(client.store, job, "w-2") is None  # held, under its lease


def test_a_queued_record_in_another_form_is_claimed_in_full(client: Client) -> None:
    """A record the script does not take (fields in another order, as another writer may store them) is
    claimed the long way, with the same result."""
    job = client.submit(request())
    empty_queue(client)
    key = client.keys.job(job)
    raw = client.redis.get(key)
    assert raw is not None
    data = json.loads(raw)
    client.redis.set(key, json.dumps(dict(reversed(data.items()))))
    claimed = planning.claim(client.store, job, "w-1")
    assert claimed is not None and (claimed.state, claimed.worker) == (JobState.PLANNING, "w-1")
    assert client.get(job) == claimed


def test_two_plans_from_one_snapshot_cannot_both_take_the_card(client: Client) -> None:
    client.heartbeat(hb("gpu-1", gpus=2, free=1, seq=1))  # the other card is in use outside modelplan
    drain(client)
    jobs = [client.submit(request()) for _ in range(2)]
    empty_queue(client)
    claimed = [planning.claim(client.store, j, f"w{i}") for i, j in enumerate(jobs)]
    snaps = [client.store.snapshot().copy() for _ in claimed]  # two workers' pools, one moment
    results = []
    for rec, snap in zip(claimed, snaps, strict=True):
        assert rec is not None
        plan = planning.plan_for(rec, snap)
        assert plan.outcome == "placed"
        results.append(planning.commit(client.store, rec, planning.change_for(rec, plan, now=utcnow()), snap)[0])
    assert results == ["ok", "full"]
    # the loser plans again from a fresh snapshot and waits
    loser = client.get(jobs[1])
    assert loser.state is JobState.PLANNING
    assert planning.settle(client.store, loser) is not None
    assert [client.get(j).state for j in jobs] == [JobState.PLACED, JobState.WAITING]
    assert whole_state(client)["held"] == {"gpu-1": {jobs[0]: 1}}


def test_a_node_back_with_a_new_boot_after_its_heartbeat_lapsed(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(C, "NODE_TTL_MS", 200)
    client.heartbeat(hb("gpu-1", gpus=1, seq=9, boot="boot-1"))
    job = client.submit(request())
    drain(client)
    time.sleep(0.3)  # lapsed, and back with a new boot before any sweep noticed
    client.heartbeat(hb("gpu-1", gpus=1, seq=1, boot="boot-2"))
    assert client.redis.smembers(client.keys.restarts) == {b"gpu-1"}  # for a worker to have it checked
    drain(client)
    assert event_reasons(client, job)[-1].startswith("node gpu-1 restarted; placed")
    assert [h.boot_id for h in client.store.held_on("gpu-1").values()] == ["boot-2"]


def test_a_batch_of_heartbeats_is_stored_as_one_at_a_time_would_be(client: Client, redis_url: str) -> None:
    beats = [
        hb("gpu-1", gpus=2, free=0, seq=1),
        hb("gpu-2", gpus=1, seq=4),
        hb("gpu-2", gpus=1, seq=3),
        hb("cpu-1", "", host=64, seq=1),
    ]
    assert client.heartbeats(beats) == [True, True, False, True]
    batched = {n: client.redis.get(client.keys.node(n)) for n in ("gpu-1", "gpu-2", "cpu-1")}
    client.redis.flushall()
    assert [client.heartbeat(b) for b in beats] == [True, True, False, True]
    one_by_one = {n: client.redis.get(client.keys.node(n)) for n in ("gpu-1", "gpu-2", "cpu-1")}

    def without_time(raw: object) -> dict[str, object]:
        assert isinstance(raw, bytes)
        record = json.loads(raw)
        record.pop("received_at")
        return dict(record)

    assert {n: without_time(v) for n, v in batched.items()} == {n: without_time(v) for n, v in one_by_one.items()}
    with pytest.raises(InvalidInput, match="free_gpus 3 is more than gpus 1"):
        client.heartbeats([hb("gpu-3", gpus=1, seq=1), hb("gpu-4", gpus=1, free=3, seq=1)])
    assert client.redis.get(client.keys.node("gpu-3")) is None  # one bad heartbeat: none stored


@pytest.mark.parametrize("seed", range(4))
def test_heartbeats_in_batches_change_what_one_at_a_time_change(
    client: Client, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """A relay's batch goes to ``heartbeat.lua`` in calls of several nodes, each node checked against its
    own last heartbeat in order: replies, stored records and the index come out as heartbeats sent one at
    a time give them, whatever the batch holds (the same node twice, an older seq, a new boot, a stored
    record that does not decode). The intake takes each call's outcome (a node that went into conflict
    within one call was never in the pool): the feed's last entry of each node stored names its record,
    it is indexed, and a batch wakes for no class one at a time would not."""
    monkeypatch.setattr(C, "HEARTBEAT_BATCH", 7)  # a batch of 40 is six calls
    rnd = random.Random(seed)
    beats = []
    for _ in range(40):
        node = rnd.choice(["g1", "g2", "g3", "c1"])
        gpus = 4 if node != "c1" else 0
        beats.append(
            hb(
                node,
                "h100-80g" if gpus else "",
                gpus=gpus,
                free=rnd.randint(0, gpus),
                seq=rnd.randint(1, 8),
                boot=rnd.choice(["b1", "b1", "b1", "b2"]),
                host=64,
                host_free=rnd.choice([10, 10, 20]),
            )
        )

    def run(send: Any) -> dict[str, Any]:
        client.redis.flushall()
        client.redis.set(client.keys.node("g3"), "{not json")  # as good as none
        replies = send()
        k = client.keys
        changes: Any = client.redis.xrange(k.pool_changes)
        return {
            "replies": replies,
            "wake": client.redis.llen(k.wake_signal),
            "classes": client.redis.smembers(k.wake_classes),
            "epoch": client.redis.get(k.epoch) is not None,
            "nodes": {
                n: json.loads(v) | {"received_at": ""}
                for n in ("g1", "g2", "g3", "c1")
                if (v := client.redis.get(k.node(n)))
            },
            # the feed's last entry of each node stored names its record (by its SHA-1), and it is indexed
            "fed": all(
                last.get(b"r") == sha1(client.redis.get(k.node(n)))
                for n in ("g1", "g2", "g3", "c1")
                if client.redis.exists(k.node(n))
                for last in [{f[b"n"]: f for _, f in changes}.get(n.encode(), {})]
            ),
            "indexed": {n for n in ("g1", "g2", "g3", "c1") if client.redis.exists(k.node(n))}
            <= {text(i) for i in client.redis.zrange(k.nodes, 0, -1)},
        }

    def sha1(raw: Any) -> bytes:
        return hashlib.sha1(raw or b"").hexdigest().encode()

    def without_time(raw: bytes | None) -> dict[str, Any] | None:
        return None if raw is None else {**json.loads(raw), "received_at": ""}

    records = [NodeRecord.model_validate({**dict(parse_heartbeat(b)), "received_at": utcnow()}) for b in beats]
    at_once = run(lambda: client.store.put_heartbeats(records))
    one_by_one = run(lambda: [client.store.put_heartbeat(r) for r in records])
    # a batch's wake-up covers the batch: one at a time, each reply says whether its own call woke
    at_once["replies"] = [(ok, restarted) for ok, _, restarted in at_once["replies"]]
    one_by_one["replies"] = [(ok, restarted) for ok, _, restarted in one_by_one["replies"]]
    assert at_once["classes"] <= one_by_one["classes"]
    for run_ in (at_once, one_by_one):
        del run_["classes"], run_["wake"], run_["epoch"]
    assert at_once == one_by_one
    assert {ok for ok, _ in at_once["replies"]} == {True, False}


def test_a_plan_on_a_read_a_moment_old_is_still_right(client: Client, redis_url: str) -> None:
    """A worker plans on the pool as it read it with the job's record: a card taken meanwhile by another
    worker makes the commit fail and the plan run again on a fresh read; the job is never placed on the
    taken card."""
    client.heartbeat(hb("gpu-1", gpus=1, seq=1))
    job = client.submit(request())
    empty_queue(client)
    rec = planning.claim(client.store, job, "w")  # reads the job and the pool: the card is free
    assert rec is not None
    other = Client.from_url(redis_url)  # another worker, with a Store of its own
    taker = other.submit(request())
    drain(other)
    other.redis.close()
    assert client.get(taker).state is JobState.PLACED
    assert [n.free_gpus for n in client.store.recent_snapshot(60).nodes] == [1]  # the read: still free
    settled = planning.settle(client.store, rec)
    assert settled is not None and settled.state is JobState.WAITING
    assert whole_state(client)["held"] == {"gpu-1": {taker: 1}}


def test_a_plan_reads_the_pool_with_the_job(client: Client) -> None:
    """The pool is brought up to date in the round trip that reads the job: a node that joined a moment
    after the last plan is planned on at once, not after the job waited for it."""
    client.heartbeat(hb("gpu-1", gpus=1, seq=1))
    first = client.submit(request())
    drain(client)
    client.heartbeat(hb("gpu-2", gpus=1, seq=1))
    second = client.submit(request())
    drain(client)
    states: Any = client.redis.xrange(client.keys.job_events(second))
    assert [e[1][b"state"] for e in states] == [b"queued", b"planning", b"placed"]
    assert whole_state(client)["held"] == {"gpu-1": {first: 1}, "gpu-2": {second: 1}}


def test_a_planning_job_lost_with_its_worker_is_queued_again(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that took a planning job off the queue and died before claiming it leaves the job queued
    with nothing on the queue for it: the sweep queues it again. One still on the queue is left alone."""
    monkeypatch.setattr(C, "QUEUED_LOST_MS", 50)
    client.heartbeat(hb("gpu-1", gpus=2, seq=1))
    drain(client)
    lost, waiting_its_turn = client.submit(request()), client.submit(request(context=4096))
    client.redis.lrem(client.store.queue.key, 0, planning_job_id(lost))  # taken by a worker that then died
    time.sleep(0.1)
    done = maintenance.sweep(client.store, force=True)
    assert done["requeued_lost"] == 1
    assert queued_functions(client).count("worker.jobs.plan_job") == 2
    drain(client)
    assert [client.get(j).state for j in (lost, waiting_its_turn)] == [JobState.PLACED, JobState.PLACED]


@pytest.mark.parametrize("stored", ["as written", "keys sorted", "spaced"])
def test_a_commit_reads_the_stored_version_however_the_record_is_laid_out(client: Client, stored: str) -> None:
    """The commit script reads a record's version from the head modelplan writes, and decodes any other
    layout (a record rewritten by another tool) in full: both give the same version, so a stale plan is
    refused and a current one commits."""
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=2))
    job = client.submit(request())
    key = client.keys.job(job)
    raw: Any = client.redis.get(key)
    assert raw is not None and raw.startswith(b'{"schema_version":1,"job_id":')
    if stored != "as written":
        layout = {"keys sorted": {"sort_keys": True}, "spaced": {"indent": 1}}[stored]
        client.redis.set(key, json.dumps(json.loads(raw), **layout))  # type: ignore[arg-type]
    rec = client.get(job)
    store = client.store
    claimed = rec.advance(JobState.PLANNING, at=utcnow(), worker="w")
    stale = store.transition(rec.model_copy(update={"version": rec.version + 1}), claimed, reason="stale")
    assert (stale.code, stale.detail) == ("stale", str(rec.version))
    out = store.transition(rec, claimed, reason="claimed")
    assert (out.code, out.detail) == ("ok", str(claimed.version))
    assert client.get(job).state is JobState.PLANNING
    entries: Any = client.redis.xrange(client.keys.job_events(job))
    assert entries[-1][1][b"version"] == str(claimed.version).encode()


def test_the_sweep_finds_silent_nodes_from_the_oldest_heartbeats(client: Client) -> None:
    """A node's score is when its heartbeat lapses, by the server's clock; the sweep asks only the nodes
    whose heartbeat has lapsed by their scores whether they are gone, not every node of the index: one
    whose heartbeat has not lapsed yet is not asked."""
    for n in ("old", "fresh", "alive"):
        client.heartbeat(hb(n, gpus=1))
    secs, micros = client.redis.time()
    lapses = client.redis.zscore(client.keys.nodes, "fresh")
    assert lapses is not None and abs(lapses - (secs * 1000 + micros // 1000 + C.NODE_TTL_MS)) < 5_000
    client.redis.zadd(client.keys.nodes, {"old": 0, "alive": 0})  # lapsed long ago, by their scores
    client.redis.delete(client.keys.node("old"), client.keys.node("fresh"))  # no heartbeat now
    assert client.store.silent_nodes() == ["old"]  # "alive" still has its key; "fresh" is not asked yet
