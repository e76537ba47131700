"""The checker the reliability suite samples with: a silent node's placements are judged by what the
workers did, not by how long a sample came after the lapse."""

from __future__ import annotations

import time

import pytest

from producer import Client
from tests.reliability import invariants
from tests.reliability.invariants import Checker
from tests.worker.helpers import drain, hb, request
from worker import constants as C
from worker import maintenance
from worker.records import JobRecord, JobState


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def lapsed_holding(client: Client, monkeypatch: pytest.MonkeyPatch) -> str:
    """A job placed on gpu-1, whose heartbeat then lapses (a last one of a millisecond's life): no worker
    runs to hand the node off."""
    client.heartbeat(hb("gpu-1", gpus=1, seq=1))
    job = client.submit(request())
    drain(client)
    assert client.get(job).state is JobState.PLACED
    monkeypatch.setattr(C, "NODE_TTL_MS", 1)
    client.heartbeat(hb("gpu-1", gpus=1, free=0, seq=2, started=(client.get(job).placement[0].hold_id,)))
    deadline = time.monotonic() + 10
    while client.redis.exists(client.keys.node("gpu-1")):
        assert time.monotonic() < deadline, "the heartbeat did not lapse"
        time.sleep(0.01)
    return job


def test_a_node_silent_long_with_no_worker_to_hand_it_off_breaks_nothing(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sample taken long after the lapse, while no worker runs (they are stopping, or starved of the
    CPU), finds the node still holding: the time is measured, not judged."""
    clock = Clock()
    monkeypatch.setattr(invariants, "time", clock)
    job = lapsed_holding(client, monkeypatch)
    checker = Checker(client.redis, client.keys)
    assert checker.check(["gpu-1"]) == []
    clock.now += 60
    assert checker.check(["gpu-1"]) == []
    assert checker.silent_holding_s == 60
    [hold] = client.get(job).placement
    assert checker.silent_holding(["gpu-1"]) == {"gpu-1": [hold.hold_id]}
    # a worker's sweep hands it off, and the handoff lets the placement go and drops the node
    maintenance.sweep(client.store, force=True)
    drain(client)
    assert checker.silent_holding(["gpu-1"]) == {}
    assert client.get(job).state is JobState.WAITING
    assert checker.check(["gpu-1"]) == [] and checker.violations == []


def test_a_node_out_of_the_index_still_holding_breaks_an_invariant_at_once(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    lapsed_holding(client, monkeypatch)
    client.redis.zrem(client.keys.nodes, "gpu-1")  # dropped from the pool with its placement left behind
    [found] = Checker(client.redis, client.keys).check(["gpu-1"])
    assert found.startswith("node gpu-1 silent and out of the pool's index still holds ")


def test_a_record_unchanged_since_the_last_sample_is_not_parsed_again(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    client.heartbeat(hb("gpu-1", gpus=1, seq=1))
    client.submit(request())
    drain(client)
    checker = Checker(client.redis, client.keys)
    parsed: list[bytes] = []
    parse = JobRecord.from_stored

    def counting(raw: bytes) -> JobRecord:
        parsed.append(raw)
        return parse(raw)

    monkeypatch.setattr(JobRecord, "from_stored", counting)
    assert checker.check(["gpu-1"]) == [] and checker.check(["gpu-1"]) == []
    assert len(parsed) == 1
