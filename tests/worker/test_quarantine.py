"""A stored record that does not parse is quarantined, never fatal: planning, wake-ups and the sweep go on
for everyone else, the record is reported once, and ``modelplan status`` names it in one line."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import redis

from producer import Client
from producer.cli import main
from tests.worker.helpers import drain, hb, request
from tests.worker.processes import WorkerProcess
from worker.keys import Keys
from worker.maintenance import sweep
from worker.records import JobState, utcnow
from worker.store import now_ms

GARBAGE = "{garbage"
OLD = 1_000  # a score far in the past: a lease long lapsed, a job queued long ago


def newer_job(job_id: str) -> str:
    return json.dumps({"schema_version": 2, "job_id": job_id, "state": "queued", "plan": "a newer shape"})


def plant_job(r: redis.Redis, k: Keys, job_id: str, state: JobState, raw: str = GARBAGE) -> None:
    r.set(k.job(job_id), raw)
    r.zadd(k.jobs(state), {job_id: OLD})
    if state is JobState.WAITING:
        r.zadd(k.pending, {job_id: OLD})


def node_record(node_id: str, **change: object) -> str:
    return json.dumps({**hb(node_id), "received_at": "2026-01-01T00:00:00Z", "schema_version": 1, **change})


def plant_node(r: redis.Redis, k: Keys, raw: str) -> str:
    r.set(k.node("evil"), raw)
    r.zadd(k.nodes, {"evil": now_ms()})
    return k.node("evil")


def plant_hold(r: redis.Redis, k: Keys, field: str, value: str) -> str:
    r.hset(k.held("gpu-2"), field, value)
    r.sadd(k.held_nodes, "gpu-2")
    return k.held("gpu-2")


def plant_member(r: redis.Redis, key: str, member: str = "bad id", *, recent: bool = False) -> str:
    if key.endswith(":holding"):
        r.sadd(key, member)
    else:
        r.zadd(key, {member: now_ms() if recent else OLD})
    return key


def plant_record(r: redis.Redis, k: Keys, job_id: str, state: JobState, raw: str = GARBAGE) -> str:
    plant_job(r, k, job_id, state, raw)
    return k.job(job_id)


READ_STATES = (JobState.QUEUED, JobState.PLANNING, JobState.WAITING, JobState.PLACED)
"""The states whose records something reads unasked (planning, the sweep, wake-ups, ``status``); a final
record is read only when asked for by id."""

PLANTS: dict[str, Callable[[redis.Redis, Keys], str]] = {
    "node": lambda r, k: plant_node(r, k, GARBAGE),
    "node of a newer schema": lambda r, k: plant_node(r, k, node_record("evil", schema_version=2)),
    "node with 10^30 cards": lambda r, k: plant_node(r, k, node_record("evil", gpus=10**30, free_gpus=10**30)),
    "node with an extra field": lambda r, k: plant_node(r, k, node_record("evil", extra=1)),
    "nodes entry": lambda r, k: plant_member(r, k.nodes),
    "held value": lambda r, k: plant_hold(r, k, "ghost:0:1", GARBAGE),
    "held field": lambda r, k: plant_hold(r, k, "not a hold", json.dumps({"gpus": 1, "host_gb": 0, "boot_id": "b"})),
    "holding entry": lambda r, k: plant_member(r, k.held_nodes),
    "pending entry": lambda r, k: plant_member(r, k.pending),
    # a final state's index is trimmed by age: its bad member is planted as if just added
    **{
        f"jobs:{s.value} entry": partial(lambda s, r, k: plant_member(r, k.jobs(s), recent=s.final), s)
        for s in JobState
    },
    **{
        f"job record {s.value}": partial(lambda s, r, k: plant_record(r, k, f"ghost-{s.value}", s), s)
        for s in READ_STATES
    },
    "job record of a newer schema": lambda r, k: plant_record(r, k, "future", JobState.QUEUED, newer_job("future")),
}


def pool(redis_url: str) -> Client:
    client = Client.from_url(redis_url)
    client.heartbeat(hb("gpu-1", gpus=1))
    client.heartbeat(hb("gpu-2", gpus=1))
    return client


@pytest.mark.parametrize("kind", sorted(PLANTS))
def test_garbage_is_quarantined_and_everyone_else_goes_on(
    redis_url: str, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    client = pool(redis_url)
    bad_key = PLANTS[kind](client.redis, client.keys)
    client.submit(request(), job_id="good")
    drain(client)
    for _ in range(3):  # the sweep keeps going, pass after pass
        sweep(client.store, force=True)
        drain(client)

    assert client.get("good").state is JobState.PLACED
    capsys.readouterr()
    assert main(["status", "--redis-url", redis_url]) == 0
    out, err = capsys.readouterr()
    lines = [line for line in out.splitlines() if line.startswith("unreadable record")]
    assert len(lines) == 1 and bad_key in lines[0], out
    assert "Traceback" not in out + err
    logged = [line for line in out.splitlines() if "record_unreadable" in line]
    assert len(logged) <= 1  # once, not every sweep


@pytest.mark.parametrize("state", [JobState.QUEUED, JobState.PLANNING, JobState.WAITING])
def test_an_unreadable_job_a_worker_meets_is_failed_with_its_reason(redis_url: str, state: JobState) -> None:
    client = pool(redis_url)
    k = client.keys
    plant_job(client.redis, k, "ghost", state)
    client.redis.hset(k.held("gpu-2"), "ghost:0:3", json.dumps({"gpus": 1, "host_gb": 0, "boot_id": "boot-1"}))
    client.redis.sadd(k.held_nodes, "gpu-2")
    client.redis.zadd(k.jobs(state), {"ghost": OLD})
    sweep(client.store, force=True)
    drain(client)

    assert client.redis.get(k.job("ghost")) == GARBAGE.encode()  # kept as it was
    index = {s.value: client.redis.zscore(k.jobs(s), "ghost") is not None for s in JobState}
    assert [s for s, there in index.items() if there] == ["failed"]
    assert client.redis.zscore(k.pending, "ghost") is None
    events: Any = client.redis.xrange(k.job_events("ghost"))
    last = events[-1][1]
    assert last[b"state"] == b"failed" and b"does not parse" in last[b"reason"]
    assert client.held_on("gpu-2") == {}  # what it held is free again
    entry = json.loads(client.redis.hget(k.quarantine, k.job("ghost")) or b"{}")
    assert entry["action"] == "marked failed"


def test_a_job_of_a_newer_schema_is_left_alone_and_not_queued_again(redis_url: str) -> None:
    client = pool(redis_url)
    k = client.keys
    plant_job(client.redis, k, "future", JobState.QUEUED, newer_job("future"))
    for _ in range(3):
        sweep(client.store, force=True)
        drain(client)
    assert client.redis.get(k.job("future")) == newer_job("future").encode()
    assert client.redis.zscore(k.jobs(JobState.QUEUED), "future") == OLD  # untouched, not bumped
    assert client.store.queue.count == 0
    assert "newer modelplan" in json.loads(client.redis.hget(k.quarantine, k.job("future")) or b"{}")["what"]


def test_an_unreadable_hold_keeps_its_nodes_cards_taken(redis_url: str) -> None:
    client = pool(redis_url)
    client.redis.hset(client.keys.held("gpu-1"), "ghost:0:1", GARBAGE)
    client.redis.sadd(client.keys.held_nodes, "gpu-1")
    client.submit(request(), job_id="a")
    client.submit(request(), job_id="b")
    drain(client)
    assert [client.get(j).state for j in ("a", "b")] == [JobState.PLACED, JobState.WAITING]
    assert [r.node_id for r in client.get("a").placement] == ["gpu-2"]
    # the commit script counts it so too: a hold written straight at gpu-1 is refused
    rec = client.get("b")
    from worker.pool import HoldSpec

    out = client.store.transition(
        rec, rec.advance(rec.state, at=utcnow()), reason="t", place=[HoldSpec("gpu-1", "b:0:9", 1)]
    )
    assert (out.code, out.detail) == ("full", "gpu-1")


def test_a_fixed_record_leaves_the_quarantine(redis_url: str) -> None:
    client = pool(redis_url)
    PLANTS["node"](client.redis, client.keys)
    assert "evil" not in client.pool().records  # read, and left out
    sweep(client.store, force=True)
    assert list(client.quarantined()) == [client.keys.node("evil")]
    client.heartbeat(hb("evil"))  # the node publishes again: its record is good
    sweep(client.store, force=True)
    assert client.quarantined() == {}
    assert "evil" in client.pool().records


def test_the_cli_says_one_line_for_an_unreadable_job(redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    client = pool(redis_url)
    plant_job(client.redis, client.keys, "ghost", JobState.PLACED)
    for command in (["job", "ghost"], ["release", "ghost"], ["cancel", "ghost"], ["scale", "ghost", "2"]):
        assert main([*command, "--redis-url", redis_url]) == 2
        out, err = capsys.readouterr()
        assert err.strip().count("\n") == 0 and "modelplan:job:ghost:" in err, err
        assert "Traceback" not in out + err


def test_a_worker_process_with_every_kind_planted_places_the_next_job(redis_url: str, tmp_path: Path) -> None:
    """Everything at once, against a running worker: the next valid job is placed in about a second, the
    sweep still drops a silent node, and each bad record is logged once however many sweeps pass."""
    client = pool(redis_url)
    keys = {kind: plant(client.redis, client.keys) for kind, plant in PLANTS.items()}
    worker = WorkerProcess(redis_url, tmp_path, "w1")
    try:
        client.redis.zadd(client.keys.nodes, {"gone-node": 0})  # in the index, no heartbeat for long
        time.sleep(1.0)
        start = time.monotonic()
        client.submit(request(), job_id="good")
        deadline = start + 5
        while client.get("good").state is not JobState.PLACED and time.monotonic() < deadline:
            time.sleep(0.05)
        took = time.monotonic() - start
        assert client.get("good").state is JobState.PLACED
        time.sleep(5)  # two sweeps and more
        assert client.redis.zscore(client.keys.nodes, "gone-node") is None
    finally:
        worker.stop()
    log = worker.log_path.read_text()
    assert "Traceback" not in log and "maintenance_failed" not in log
    counted = [json.loads(line)["key"] for line in log.splitlines() if '"record_unreadable"' in line]
    assert len(counted) == len(set(counted))
    assert main(["status", "--redis-url", redis_url]) == 0
    found = list(client.quarantined())
    assert [kind for kind, key in keys.items() if not any(f.startswith(key) for f in found)] == []
    print(f"placed {took:.2f} s after submit with {len(keys)} kinds of bad record planted")
