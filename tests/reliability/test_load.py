"""Seeded random load: several worker processes, many jobs, heartbeats that free and take cards, releases
and cancels, nodes joining, leaving and restarting. The invariants hold at every sample.

Short by default; ``MODELPLAN_SOAK=1`` runs longer and larger.
"""

from __future__ import annotations

import os
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from producer import Client
from tests.reliability.invariants import Checker, idle_while_waiting, report
from tests.worker.helpers import hb, request
from tests.worker.processes import WorkerProcess
from worker import constants as C
from worker import maintenance
from worker.errors import WrongState
from worker.records import JobState, ServeRequest
from worker.runner import drain

SOAK = bool(os.environ.get("MODELPLAN_SOAK"))
RUNS = (
    [(2, 350, 10.0), (4, 350, 10.0), (8, 350, 10.0)]
    if not SOAK
    else [(2, 1500, 60.0), (4, 2000, 90.0), (8, 3000, 120.0)]
)
"""(worker processes, jobs, seconds of churn) for each run: one job a step, and steps for at least the
seconds and until every job is submitted."""
STEP_S = 0.02
"""The pause after each churn step. The steps, and with them the jobs, heartbeats, releases and nodes
leaving, returning and restarting, are the seed's whatever the pause; it sets how many steps a heartbeat's
life spans (``NODE_TTL_MS``)."""
NODE_TTL_MS = 700
"""The heartbeats' TTL while the churn runs: short, so that nodes that leave lapse within the run, some
twenty-odd steps after their last heartbeat."""
END_TTL_MS = 120_000
"""The heartbeats' TTL from the end of the churn: the nodes still present outlive the quiet point and the
workers' stopping, however long those take."""
QUIET_S = 1.0
"""How long nothing changes before the idle-card check: shorter than a node's lifetime here."""
LIMIT_S = 60.0
"""How long the run waits for the jobs to settle and the silent nodes to be let go before it gives up."""


@dataclass
class Cluster:
    """The simulated nodes: each with its cards, what something outside modelplan uses, its boot."""

    client: Client
    rnd: random.Random
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    present: set[str] = field(default_factory=set)
    restarts: int = 0
    leaves: int = 0
    joins: int = 0

    def add(self, node_id: str, gpu_class: str, gpus: int, fabric: str = "") -> None:
        self.nodes[node_id] = {
            "gpu_class": gpu_class,
            "gpus": gpus,
            "fabric": fabric,
            "outside": 0,
            "seq": 0,
            "boot": 1,
        }
        self.present.add(node_id)

    def beat(self, node_id: str) -> None:
        n = self.nodes[node_id]
        n["seq"] += 1
        free = max(0, n["gpus"] - n["outside"])
        self.client.heartbeat(
            hb(
                node_id,
                n["gpu_class"],
                gpus=n["gpus"],
                free=free,
                seq=n["seq"],
                host=512,
                host_free=400,
                fabric=n["fabric"],
                boot=f"boot-{n['boot']}",
            )
        )

    def churn(self) -> None:
        """One step: a few nodes report (cards taken or given back outside), maybe one leaves, returns or
        restarts."""
        for node_id in self.rnd.sample(sorted(self.present), min(4, len(self.present))):
            self.nodes[node_id]["outside"] = self.rnd.choice([0, 0, 0, 1, 2])
            self.beat(node_id)
        roll = self.rnd.random()
        if roll < 0.03 and len(self.present) > 4:
            self.present.discard(self.rnd.choice(sorted(self.present)))  # goes silent
            self.leaves += 1
        elif roll < 0.06 and len(self.present) < len(self.nodes):
            back = self.rnd.choice(sorted(set(self.nodes) - self.present))
            self.present.add(back)
            self.joins += 1
        elif roll < 0.08:
            node_id = self.rnd.choice(sorted(self.present))
            self.nodes[node_id]["boot"] += 1
            self.nodes[node_id]["seq"] = 0
            self.restarts += 1
        for node_id in self.present:  # keep the rest alive
            if self.rnd.random() < 0.3:
                self.beat(node_id)


def make_cluster(client: Client, rnd: random.Random) -> Cluster:
    cluster = Cluster(client, rnd)
    for i in range(6):
        cluster.add(f"h100-{i}", "h100-80g", 4, fabric="ib-a")
    for i in range(4):
        cluster.add(f"a100-{i}", "a100-40g", 4, fabric="ib-b")
    cluster.add("cpu-0", "", 0)
    cluster.add("cpu-1", "", 0)
    for n in cluster.nodes:
        cluster.beat(n)
    return cluster


def requests() -> list[ServeRequest]:
    return [
        request(),
        request("qwen2.5-7b-instruct"),
        request("llama-3-8b-gguf", fallback=True),
        request(replicas=2),
        request("llama-3.1-70b-instruct", priority=5),
        request(fallback=True),
    ]


@pytest.mark.parametrize(("workers", "jobs", "seconds"), RUNS)
def test_invariants_hold_under_load(
    client: Client,
    redis_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    workers: int,
    jobs: int,
    seconds: float,
) -> None:
    monkeypatch.setattr(C, "NODE_TTL_MS", NODE_TTL_MS)
    seed = 1000 + workers
    rnd = random.Random(seed)
    cluster = make_cluster(client, rnd)
    checker = Checker(client.redis, client.keys)
    stop = threading.Event()

    def monitor() -> None:
        while not stop.is_set():
            checker.check(cluster.nodes)
            time.sleep(0.02)

    watcher = threading.Thread(target=monitor, daemon=True)
    procs = [WorkerProcess(redis_url, tmp_path, f"w{i}") for i in range(workers)]
    kinds = requests()
    released = cancelled = 0
    submitted: list[str] = []
    started = time.monotonic()
    try:
        watcher.start()
        deadline = started + seconds
        per_step = max(1, jobs // int(seconds / STEP_S))
        while time.monotonic() < deadline or len(submitted) < jobs:
            for _ in range(min(per_step, jobs - len(submitted))):
                job_id = client.submit(rnd.choice(kinds))
                submitted.append(job_id)
                checker.acknowledged.add(job_id)
            cluster.churn()
            if submitted and rnd.random() < 0.5:
                job_id = rnd.choice(submitted)
                try:
                    if rnd.random() < 0.5:
                        client.release(job_id)
                        released += 1
                    else:
                        client.cancel(job_id)
                        cancelled += 1
                except WrongState:
                    pass
            time.sleep(STEP_S)
        churned = time.monotonic() - started
        # the churn ends: every node that is still present reports all its cards free, for good
        monkeypatch.setattr(C, "NODE_TTL_MS", END_TTL_MS)
        for n in cluster.present:
            cluster.nodes[n]["outside"] = 0
            cluster.beat(n)
        absent = sorted(set(cluster.nodes) - cluster.present)

        def settled() -> bool:
            c = client.counts()
            return c["queued"] == 0 and c["planning"] == 0 and len(client.store.queue) == 0

        def let_go() -> bool:
            """Every node that left has lapsed, and the workers' own sweeps handed each off: none of them
            carries a placed replica."""
            lapsed = not any(client.redis.exists(client.keys.node(n)) for n in absent)
            return lapsed and not checker.silent_holding(cluster.nodes)

        limit = time.monotonic() + LIMIT_S
        while not (settled() and let_go()):
            assert time.monotonic() < limit, (
                f"not settled: {client.counts()}; silent nodes holding: {checker.silent_holding(cluster.nodes)}"
            )
            time.sleep(0.1)
        # a quiet point, inside the nodes' lifetime and well before the 30 s sweep: no card idles while a
        # job that it serves as well waits
        for n in cluster.present:
            cluster.beat(n)
        time.sleep(QUIET_S)
        idle = idle_while_waiting(client)
    finally:
        for p in procs:
            p.stop()
        stop.set()
        watcher.join()
    for n in cluster.present:
        cluster.beat(n)
    maintenance.sweep(client.store, force=True)
    drain(client.store)
    final = checker.check(cluster.nodes)
    counts = client.counts()
    report(
        "load",
        workers=workers,
        jobs=len(submitted),
        seconds=round(time.monotonic() - started, 1),
        churn_s=round(churned, 1),
        seed=seed,
        samples=checker.samples,
        violations=len(checker.violations),
        released=released,
        cancelled=cancelled,
        node_leaves=cluster.leaves,
        node_joins=cluster.joins,
        node_restarts=cluster.restarts,
        node_lapses=checker.lapses,
        silent_holding_s_max=round(checker.silent_holding_s, 1),
        states={s: n for s, n in counts.items() if n},
        idle_while_waiting=len(idle),
        **({"first_violations": sorted(set(checker.violations))[:8]} if checker.violations else {}),
        **({"first_idle": idle[:4]} if idle else {}),
    )
    assert checker.violations == [] and final == []
    assert idle == []
    assert len(submitted) >= jobs and sum(counts.values()) == len(submitted)
    assert counts["queued"] == counts["planning"] == 0
    assert checker.samples > 20
    records = [client.get(j) for j in submitted]
    assert all(
        r.state in (JobState.PLACED, JobState.WAITING, JobState.FAILED, JobState.RELEASED, JobState.CANCELLED)
        for r in records
    )
