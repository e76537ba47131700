"""A waiting job is woken by capacity freed in any class that serves it as well as its best: the
ranking's hardware (cards, nodes, precision) is what counts, and free-now only breaks the tie."""

from __future__ import annotations

import json
import time
from pathlib import Path

from producer import Client
from producer.client import request_from_listing
from tests.reliability.invariants import idle_while_waiting
from tests.worker.helpers import EXAMPLES, drain, hb
from tests.worker.processes import WorkerProcess
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
        start = time.monotonic()
        client.heartbeat(hb("a100-a", "a100-40g", gpus=1, seq=2))  # its card frees
        while client.get("job-b").state is not JobState.PLACED and time.monotonic() - start < 5:
            time.sleep(0.02)
        took = time.monotonic() - start
    finally:
        worker.stop()
    placed = client.get("job-b")
    assert placed.state is JobState.PLACED
    assert [r.node_id for r in placed.placement] == ["a100-a"]
    assert took < 5.0  # the safety net is 30 s away: this was the wake-up, not the sweep
    assert idle_while_waiting(client) == []
    print(f"job-b placed on a100-a {took:.2f} s after its card freed")


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
