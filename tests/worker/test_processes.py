"""Several worker processes at once, and a worker killed mid-job, against a real Redis."""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path

import pytest
import redis

from producer import Client
from tests.worker.helpers import drain, event_reasons, hb, request, whole_state
from tests.worker.processes import WorkerProcess
from worker import constants as C
from worker import maintenance
from worker.planning import FAULT_PAUSE_ENV
from worker.records import JobState
from worker.scripts import text

NODES = [f"gpu-{i}" for i in range(5)]
CARDS = 4  # 5 nodes x 4 cards: 20 cards
CHURN_STEPS = 340
"""Steps of churn once every worker runs: each two heartbeats, and a release three times in ten."""
STEP_S = 0.01
"""The pause after each step: the steps are the same whatever it is."""
LAST_TTL_MS = 120_000
"""The TTL of the nodes' last heartbeats: they outlive the drain and the workers' stopping, however long
those take (the default 15 s is not long on a busy machine, and a node gone would leave its jobs waiting
for no node)."""


def wait_for(check: object, timeout: float, what: str) -> float:
    started = time.monotonic()
    while not check():  # type: ignore[operator]
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)
    return time.monotonic() - started


class Monitor(threading.Thread):
    """Reads the reservations and the state indexes in one transaction, over and over, and records any
    moment in which a node had more cards reserved than it has, or a job stood in two states."""

    def __init__(self, client: Client) -> None:
        super().__init__(daemon=True)
        self.r: redis.Redis = redis.Redis(connection_pool=client.redis.connection_pool)
        self.k = client.keys
        self.stop_flag = threading.Event()
        self.samples = 0
        self.violations: list[str] = []

    def run(self) -> None:
        while not self.stop_flag.is_set():
            with self.r.pipeline(transaction=True) as pipe:
                for n in NODES:
                    pipe.hvals(self.k.held(n))
                for s in JobState:
                    pipe.zrange(self.k.jobs(s), 0, -1)
                replies = pipe.execute()
            for n, vals in zip(NODES, replies[: len(NODES)], strict=True):
                held = sum(json.loads(v)["gpus"] for v in vals)
                if held > CARDS:
                    self.violations.append(f"{n}: {held} cards reserved of {CARDS}")
            seen: dict[str, str] = {}
            for s, ids in zip(JobState, replies[len(NODES) :], strict=True):
                for j in ids:
                    if text(j) in seen:
                        self.violations.append(f"{text(j)} both {seen[text(j)]} and {s.value}")
                    seen[text(j)] = s.value
            self.samples += 1


def test_four_workers_200_jobs_20_cards_with_churn(
    client: Client, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rnd = random.Random(20261130)
    seqs = dict.fromkeys(NODES, 0)

    def beat(node: str, outside: int) -> None:
        seqs[node] += 1
        client.heartbeat(hb(node, "h100-80g", gpus=CARDS, free=CARDS - outside, seq=seqs[node], fabric="ib"))

    for n in NODES:
        beat(n, 0)
    monitor = Monitor(client)
    monitor.start()
    workers = [WorkerProcess(redis_url, tmp_path, f"worker-{i}") for i in range(4)]
    small, large = request(), request("llama-3.1-70b-instruct")  # one card each, and four
    try:
        jobs = [client.submit(large if i % 10 == 0 else small) for i in range(200)]
        released: list[str] = []
        wait_for(lambda: all(b'"worker_started"' in w.log_path.read_bytes() for w in workers), 60, "the workers")
        for _ in range(CHURN_STEPS):
            # heartbeats churn: cards taken and given back outside modelplan
            for n in rnd.sample(NODES, 2):
                beat(n, rnd.choice([0, 0, 1, 2]))
            placed_now = client.store.job_ids(JobState.PLACED)
            if placed_now and rnd.random() < 0.3:
                job = rnd.choice(placed_now)
                try:
                    client.release(job)
                    released.append(job)
                except Exception as e:  # another release of the same job raced this one: fine
                    assert "release applies only to placed or waiting jobs" in str(e)
            time.sleep(STEP_S)
        monkeypatch.setattr(C, "NODE_TTL_MS", LAST_TTL_MS)
        for n in NODES:
            beat(n, 0)
        counts = client.counts

        def quiet() -> bool:
            c = counts()
            return c["queued"] == 0 and c["planning"] == 0 and len(client.store.queue) == 0

        wait_for(quiet, 60, "the queue to drain")
    finally:
        for w in workers:
            w.stop()
        monitor.stop_flag.set()
        monitor.join()

    # one full pass, so that every waiting job was planned against the pool as it ended
    maintenance.sweep(client.store, force=True)
    drain(client)
    assert monitor.samples > 50 and monitor.violations == []
    state = whole_state(client)
    records = state["records"]
    assert sorted(records) == sorted(jobs) and len(jobs) == 200
    for s, ids in state["index"].items():
        assert all(records[j] == s for j in ids)
    assert sum(len(ids) for ids in state["index"].values()) == 200
    assert set(records.values()) <= {"placed", "waiting", "released"}
    assert {j for j, s in records.items() if s == "released"} == set(released)
    # what is held is exactly what the placed jobs say they hold, and no node is over
    placed = [client.get(j) for j, s in records.items() if s == "placed"]
    expected: dict[str, dict[str, int]] = {}
    for rec in placed:
        for p in rec.placement:
            expected.setdefault(p.node_id, {})[rec.job_id] = p.gpus
    assert state["held"] == expected
    assert all(sum(h.values()) <= CARDS for h in expected.values())
    # every waiting job waits because its option is busy now
    nodes = client.pool().nodes
    for j, s in records.items():
        if s == "waiting":
            waiting = client.get(j)
            assert waiting.option is not None
            assert not any(n.free_gpus >= waiting.option.gpus_per_node for n in nodes), waiting.reason
    assert len(released) > 5 and len(placed) >= 5


def test_a_worker_killed_mid_job_leaves_it_to_another(client: Client, redis_url: str, tmp_path: Path) -> None:
    client.heartbeat(hb("gpu-1", gpus=1))
    drain(client)
    doomed = WorkerProcess(redis_url, tmp_path, "doomed", env={FAULT_PAUSE_ENV: "120"})
    try:
        job = client.submit(request())
        wait_for(lambda: client.get(job).state is JobState.PLANNING, 30, "the doomed worker to claim the job")
        doomed.kill()
    finally:
        doomed.stop()
    claimed = client.get(job)
    rescuer = WorkerProcess(redis_url, tmp_path, "rescuer")
    try:
        # a give-up only: how soon the rescue comes is the benchmark's and the reliability suite's to measure
        wait_for(lambda: client.get(job).state.settled, 60, "another worker to finish the job")
    finally:
        rescuer.stop()
    rec = client.get(job)
    # sent back when the killed worker's lease lapsed, then planned by the other and placed on the card
    assert claimed.state is JobState.PLANNING and claimed.version < rec.version
    assert rec.state is JobState.PLACED
    assert any(r.endswith("stopped mid-plan (its lease expired)") for r in event_reasons(client, job)), event_reasons(
        client, job
    )
    assert whole_state(client)["held"] == {"gpu-1": {job: 1}}
