"""Faults: workers killed mid-plan, Redis killed and restarted with AOF, Redis away for a while."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest
import redis

from producer import Client
from producer.agent import Agent, HostMemory
from tests.redis_server import RedisServer
from tests.reliability.invariants import Checker, report
from tests.worker.helpers import hb, request
from tests.worker.processes import WorkerProcess
from worker import constants as C
from worker.errors import RedisUnavailable
from worker.planning import FAULT_PAUSE_ENV
from worker.records import JobState
from worker.runner import drain

KILLS = 8
"""Workers SIGKILLed in the mid-plan run, each as soon as a worker holds a job in planning."""
PAUSE_AFTER_CLAIM_S = "0.3"
"""Each worker pauses this long holding a claimed job, so that most kills land mid-plan."""


def settled(client: Client) -> bool:
    c = client.counts()
    return c["queued"] == 0 and c["planning"] == 0


def wait_until(check: object, timeout: float, what: str) -> float:
    started = time.monotonic()
    while not check():  # type: ignore[operator]
        assert time.monotonic() - started < timeout, f"timed out after {timeout} s: {what}"
        time.sleep(0.05)
    return time.monotonic() - started


def mid_plan_worker(client: Client, workers: list[WorkerProcess], within_s: float = 5.0) -> WorkerProcess | None:
    """A worker that holds a job in planning now, waiting up to ``within_s`` for one: the kill the run is
    about, whatever the machine's speed (a worker just started may not have claimed anything yet)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        for rec in client.jobs(JobState.PLANNING):
            for w in workers:
                if rec.worker and f".{w.proc.pid}." in rec.worker:
                    return w
        time.sleep(0.02)
    return None


def test_workers_killed_mid_plan_leave_no_job_stuck(client: Client, redis_url: str, tmp_path: Path) -> None:
    rnd = random.Random(7)
    nodes = [f"gpu-{i}" for i in range(10)]
    for n in nodes:
        client.heartbeat(hb(n, "h100-80g", gpus=4, seq=1))
    checker = Checker(client.redis, client.keys)
    env = {FAULT_PAUSE_ENV: PAUSE_AFTER_CLAIM_S}
    workers = [WorkerProcess(redis_url, tmp_path, f"w{i}", env=env) for i in range(3)]
    jobs = [client.submit(request()) for _ in range(60)]
    checker.acknowledged.update(jobs)
    stranded: dict[str, float] = {}  # job -> when its worker was killed
    killed = mid_plan = 0
    try:
        for i in range(KILLS):
            victim = mid_plan_worker(client, workers) or workers[rnd.randrange(len(workers))]
            workers.remove(victim)
            pid = victim.proc.pid
            victim.kill()
            killed += 1
            at = time.monotonic()
            for rec in client.jobs(JobState.PLANNING):
                if rec.worker and f".{pid}." in rec.worker:
                    stranded[rec.job_id] = at
                    mid_plan += 1
            workers.append(WorkerProcess(redis_url, tmp_path, f"r{i}", env=env))
            assert checker.check(nodes) == []
            for n in nodes:
                client.heartbeat(hb(n, "h100-80g", gpus=4, seq=2 + i))
        finish: dict[str, float] = {}
        deadline = time.monotonic() + 45
        while len(finish) < len(stranded) or not settled(client):
            assert time.monotonic() < deadline, f"stuck: {client.counts()}"
            now = time.monotonic()
            for j in set(stranded) - set(finish):
                if client.get(j).state not in (JobState.PLANNING, JobState.QUEUED):
                    finish[j] = now - stranded[j]
            for n in nodes:
                client.heartbeat(hb(n, "h100-80g", gpus=4, seq=int(now * 1000)))
            assert checker.check(nodes) == []
            time.sleep(0.1)
    finally:
        for w in workers:
            w.stop()
    times = sorted(finish.values())
    report(
        "sigkill_mid_plan",
        workers_killed=killed,
        jobs_killed_mid_plan=mid_plan,
        jobs=len(jobs),
        finished_after_s_max=round(max(times), 1) if times else None,
        finished_after_s_median=round(times[len(times) // 2], 1) if times else None,
        samples=checker.samples,
        violations=len(checker.violations),
    )
    assert killed == KILLS and mid_plan >= KILLS // 2
    assert times and max(times) < 30
    counts = client.counts()
    assert counts["placed"] + counts["waiting"] == len(jobs) and checker.violations == []


@pytest.mark.parametrize("fsync", ["always", "everysec"])
def test_acknowledged_submits_survive_a_redis_kill(fsync: str) -> None:
    server = RedisServer("--appendonly", "yes", "--appendfsync", fsync)
    server.start()
    try:
        client = Client.from_url(server.url)
        client.heartbeat(hb("gpu-1", "h100-80g", gpus=8, seq=1))
        acked: list[tuple[str, float]] = []
        stop = threading.Event()
        req = request()

        def submit_forever() -> None:
            c = Client.from_url(server.url)
            i = 0
            while not stop.is_set():
                try:
                    acked.append((c.submit(req, job_id=f"job-{i}"), time.monotonic()))
                    i += 1
                except RedisUnavailable:
                    break
            c.redis.close()

        t = threading.Thread(target=submit_forever)
        t.start()
        time.sleep(1.5)
        client.redis.close()
        server.stop(kill=True)  # SIGKILL: no shutdown, no final fsync
        killed_at = time.monotonic()
        stop.set()
        t.join()
        server.start()
        client = Client.from_url(server.url)
        present = {j for j, _ in acked if client.redis.exists(client.keys.job(j))}
        lost = [(j, killed_at - at) for j, at in acked if j not in present]
        drain(client.store)  # the survivors are planned as if nothing happened
        placed = client.counts()["placed"]
        report(
            "redis_kill_aof",
            appendfsync=fsync,
            acknowledged=len(acked),
            lost=len(lost),
            lost_acknowledged_within_s_of_kill=round(max((s for _, s in lost), default=0.0), 3),
            planned_after_restart=placed,
        )
        assert len(acked) > 100
        if fsync == "always":
            assert lost == []
        else:
            # everysec may lose what was acknowledged in the last second or two before the kill, no more
            assert all(s < 2.5 for _, s in lost)
        assert placed == min(len(present), 8)
        client.redis.close()
    finally:
        server.cleanup()


def test_redis_away_for_a_while(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(C, "NODE_TTL_MS", 60_000)
    server = RedisServer("--appendonly", "yes", "--appendfsync", "always")
    server.start()
    worker = WorkerProcess(server.url, tmp_path, "survivor")
    stop = threading.Event()
    try:
        client = Client.from_url(server.url)
        agent_client = Client.from_url(server.url)
        beats: list[int] = []

        class Reader:
            def cards(self) -> list[object]:
                return []

            def memory(self) -> HostMemory:
                return HostMemory(total_gb=64, free_gb=64)

        agent = Agent("cpu-agent", Reader(), agent_client, gpu_class="", boot_id="b1")  # type: ignore[arg-type]
        t = threading.Thread(target=agent.run, args=(0.2, stop, lambda h: beats.append(h.seq)), daemon=True)
        t.start()
        client.heartbeat(hb("gpu-1", "h100-80g", gpus=4, seq=1))
        first = client.submit(request())
        wait_until(lambda: client.get(first).state is JobState.PLACED, 20, "the first job placed")

        server.stop()
        started = time.monotonic()
        with pytest.raises(RedisUnavailable, match=r"Redis at redis://127\.0\.0\.1:\d+/0 cannot be reached"):
            client.submit(request(), job_id="never-stored")
        refused_in = time.monotonic() - started
        beats_before = len(beats)
        time.sleep(2.0)  # away for a while: the worker and the agent keep trying
        server.start()
        back = time.monotonic()
        assert not client.redis.exists(client.keys.job("never-stored"))
        second = client.submit(request())
        replanned = wait_until(lambda: client.get(second).state is JobState.PLACED, 30, "the worker to come back")
        wait_until(lambda: len(beats) > beats_before, 10, "the agent to publish again")
        agent_back = time.monotonic() - back
        report(
            "redis_away",
            down_s=2.0,
            submit_refused_in_s=round(refused_in, 3),
            worker_planned_again_in_s=round(replanned, 2),
            agent_published_again_in_s=round(agent_back, 2),
        )
        assert refused_in < 6
        assert "cpu-agent" in client.store.node_ids()
        client.redis.close()
    finally:
        stop.set()
        worker.stop()
        server.cleanup()


def test_the_pool_reader_sees_no_node_twice_after_a_restart(client: Client) -> None:
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=2, seq=5, boot="a"))
    job = client.submit(request(replicas=2))
    drain(client.store)
    assert whole_cards(client) == {"gpu-1": 2}
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=2, seq=1, boot="b"))  # restarted: its engines are gone
    drain(client.store)
    rec = client.get(job)
    assert rec.state is JobState.PLACED and len(rec.placement) == 2
    assert whole_cards(client) == {"gpu-1": 2}  # replaced, not added: nothing counted twice
    assert {h.boot_id for h in client.store.held_on("gpu-1").values()} == {"b"}


def whole_cards(client: Client) -> dict[str, int]:
    r: redis.Redis = client.redis
    return {n: sum(h.gpus for h in client.store.held_on(n).values()) for n in client.store.node_ids() if r}
