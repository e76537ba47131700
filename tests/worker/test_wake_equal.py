"""A waiting job is woken by capacity freed in any class that serves it as well as its best: the
ranking's hardware (cards, nodes, precision) is what counts, and free-now only breaks the tie."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from producer import Client
from producer.client import request_from_listing
from tests.reliability.invariants import idle_while_waiting
from tests.worker.helpers import EXAMPLES, drain, hb
from tests.worker.processes import WorkerProcess
from worker.constants import WAITING_SWEEP_INTERVAL_S
from worker.records import JobState, ServeRequest


def eight_b() -> ServeRequest:
    """The 8B example as a new user gives it: ``--files``, ``--config``, ``--index``."""
    folder = EXAMPLES / "llama-3.1-8b-instruct"
    files, config, index = (
        json.loads((folder / f).read_text()) for f in ("files.json", "config.json", "model.safetensors.index.json")
    )
    return request_from_listing(files, config, index, model="llama-3.1-8b-instruct", context=8192)


def test_pending_for_names_every_class_ranked_equal(redis_url: str) -> None:
    client = Client.from_url(redis_url)
    client.heartbeat(hb("h100-a", "h100-80g", gpus=1, free=0))
    client.heartbeat(hb("a100-a", "a100-40g", gpus=1, free=0))
    client.submit(eight_b(), job_id="job-b")
    drain(client)
    assert client.get("job-b").state is JobState.WAITING
    assert client.redis.hget(client.keys.pending_for, "job-b") == b"a100-40g,h100-80g"


def test_a_card_of_another_class_ranked_equal_places_the_waiting_job_at_once(redis_url: str, tmp_path: Path) -> None:
    client = Client.from_url(redis_url)
    client.heartbeat(hb("h100-a", "h100-80g", gpus=1))
    client.heartbeat(hb("a100-a", "a100-40g", gpus=1, free=0))  # busy outside modelplan
    worker = WorkerProcess(redis_url, tmp_path, "w1")
    try:
        client.submit(eight_b(), job_id="job-a")
        assert [r.state for r in client.watch("job-a", timeout=10)][-1] is JobState.PLACED
        client.submit(eight_b(), job_id="job-b")
        waited = [r for r in client.watch("job-b", timeout=10)][-1]
        assert waited.state is JobState.WAITING and waited.option is not None
        assert waited.option.label == "1 × h100-80g"
        client.heartbeat(hb("a100-a", "a100-40g", gpus=1, seq=2))  # its card frees
        # past the safety net's sweep (every WAITING_SWEEP_INTERVAL_S) only as a give-up: which pass placed
        # the job is read from the worker's log below
        settled = [r for r in client.watch("job-b", timeout=2 * WAITING_SWEEP_INTERVAL_S, through_waiting=True)][-1]
    finally:
        worker.stop()
    placed = client.get("job-b")
    assert settled.state is placed.state is JobState.PLACED
    assert [r.node_id for r in placed.placement] == ["a100-a"]
    # the wake-up the freed card's class signalled placed it, not the sweep's full pass (classes ["*"])
    passes = [e for e in json_lines(worker.log_path) if e.get("event") == "wake_pass" and e.get("moved")]
    assert [(p["classes"], p["moved"]) for p in passes] == [(["a100-40g"], 1)], passes
    assert idle_while_waiting(client) == []


def json_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of a worker's log (RQ's own lines are JSON too)."""
    out = []
    for line in path.read_text().splitlines():
        event = json.loads(line)
        assert isinstance(event, dict), line
        out.append(event)
    return out


def test_the_idle_check_sees_a_card_idle_while_a_job_waits(redis_url: str) -> None:
    """The invariant the load runs hold at a quiet point can fail: with the wake-up pass left undone (as
    the wake-up by the best class alone left it), the job waits while an equal card is free."""
    client = Client.from_url(redis_url)
    client.heartbeat(hb("h100-a", "h100-80g", gpus=1))
    client.heartbeat(hb("a100-a", "a100-40g", gpus=1, free=0))
    client.submit(eight_b(), job_id="job-a")
    drain(client)
    client.submit(eight_b(), job_id="job-b")
    drain(client)
    client.heartbeat(hb("a100-a", "a100-40g", gpus=1, seq=2))
    client.redis.delete(client.keys.wake_signal)  # the pass it signalled never runs
    assert idle_while_waiting(client) == ["job job-b waits for 1 × h100-80g while 1 × a100-40g, ranked equal, is free"]
    drain(client)
    client.store.signal_pass()
    drain(client)
    assert idle_while_waiting(client) == []
