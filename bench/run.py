"""The benchmark: each figure measured against a ``redis-server`` of its own on loopback, beside its
baseline measured the same way in the same run. One JSON line per figure on standard output:
``{"name", "value", "unit"}``, with ``"baseline"`` and ``"ratio"`` where a figure is compared.

    python -m bench            # the full run (a few minutes)
    python -m bench --quick    # smaller counts, under a minute
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import multiprocessing
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import redis
from rq import Queue
from rq.serializers import JSONSerializer

from bench.cluster import cluster
from bench.common import (
    CONTEXT,
    FULL,
    NOOP_PREFIX,
    PLAN_PREFIX,
    QUICK,
    SMOKE,
    Refresher,
    Sizes,
    Workers,
    emit,
    load_pool,
    pct,
    quiet,
    ready,
    records_of,
    wait_state,
)
from bench.pool import BOOT, pool, pool_nodes, repository
from planner.decide import plan_job
from planner.index import PoolIndex
from producer.client import Client, request_from_repository
from tests.redis_server import RedisServer
from worker import constants as C
from worker.config import configure_logging
from worker.keys import Keys
from worker.mirrored import MirroredStore
from worker.queueing import queue_class
from worker.records import JobState

NOOP_FUNC = "bench.noop.noop"
"""What the no-op jobs name: run by ``bench.noop``'s worker, which modelplan's would refuse."""
INGEST_BATCH = 1000
"""Heartbeats per ``Client.heartbeats`` call: a relay's batch."""
INGEST_PUBLISHERS = 2
"""Publishing processes at once, for what one Redis takes: as many as this machine has cores."""
WAKE_WORKERS = 2
WAKE_WARMUP = 3
"""Trials run before the timed ones, so that imports and connections are warm."""
POLL_S = 0.002
"""How often a throughput run looks at the queue and the workers' counts."""


def drain_rate(r: redis.Redis, url: str, prefix: str, jobs: int, workers: int) -> float:
    """Jobs per second: ``jobs`` are on the queue; ``workers`` burst workers start; the clock runs from the
    first job taken off the queue to the last one finished, as the workers count them."""
    queue_key = Keys(prefix).rq_queue
    seen: set[bytes] = set()
    ws = Workers(url, prefix, workers, burst=True)
    t0: float | None = None
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            with r.pipeline(transaction=False) as pipe:
                pipe.llen(queue_key)
                pipe.smembers("rq:workers")
                left, members = pipe.execute()
            now = time.perf_counter()
            if t0 is None and left < jobs:
                t0 = now
            seen |= members
            if left == 0 and seen:
                with r.pipeline(transaction=False) as pipe:
                    for w in seen:
                        pipe.hmget(w, "successful_job_count", "failed_job_count")
                    done = sum(int(a or 0) + int(b or 0) for a, b in pipe.execute())
                if done >= jobs:
                    assert t0 is not None
                    return jobs / (now - t0)
            ws.check()
            time.sleep(POLL_S)
        raise RuntimeError(f"{jobs} jobs on {prefix} not done in 300 s")
    finally:
        ws.stop()


def throughput(url: str, sizes: Sizes) -> None:
    """Serve jobs planned and committed per second, against no-op jobs on the same workers: ``rounds``
    of each, alternated; the medians, their ratio, and the lowest and highest ratio of a round."""
    r = redis.Redis.from_url(url)
    client = Client(redis.Redis.from_url(url), PLAN_PREFIX)
    req = request_from_repository(repository(30), model="bench/llama-70b", context=CONTEXT)
    beats = pool(sizes.pool, busy=False)
    for workers in sizes.workers:
        noops: list[float] = []
        rates: list[float] = []
        placed = 0
        for _ in range(sizes.rounds):
            noops.append(_noop_rate(r, url, sizes.jobs, workers))
            r.flushall()
            load_pool(client.store, beats)
            with Refresher(url, beats):
                for i in range(sizes.jobs):
                    client.submit(req, job_id=f"job-{i}")
                rates.append(drain_rate(r, url, PLAN_PREFIX, sizes.jobs, workers))
            counts = client.counts()
            settled = counts["placed"] + counts["waiting"] + counts["failed"]
            if settled != sizes.jobs:
                raise RuntimeError(f"throughput run left jobs unsettled: {counts}")
            placed += counts["placed"]
        noop = statistics.median(noops)
        emit(f"rq_noop_jobs_per_s_w{workers}", noop, "jobs/s")
        emit(f"plan_jobs_per_s_w{workers}", statistics.median(rates), "jobs/s", baseline=noop)
        ratios = [rate / base for rate, base in zip(rates, noops, strict=True)]
        emit(f"plan_ratio_lowest_round_w{workers}", min(ratios), "ratio")
        emit(f"plan_ratio_highest_round_w{workers}", max(ratios), "ratio")
        emit(f"plan_jobs_placed_share_w{workers}", placed / (sizes.jobs * sizes.rounds), "fraction")
    client.redis.close()
    r.close()


def _noop_rate(r: redis.Redis, url: str, jobs: int, workers: int) -> float:
    r.flushall()
    noop_queue = queue_class(NOOP_PREFIX)(NOOP_PREFIX, connection=r, serializer=JSONSerializer)
    noop_queue.enqueue_many(
        [
            Queue.prepare_data(
                NOOP_FUNC,
                args=(NOOP_PREFIX, f"noop-{i}"),
                timeout=C.RQ_JOB_TIMEOUT_S,
                result_ttl=0,
                failure_ttl=C.RQ_FAILURE_TTL_S,
            )
            for i in range(jobs)
        ]
    )
    return drain_rate(r, url, NOOP_PREFIX, jobs, workers)


def wake_latency(url: str, sizes: Sizes) -> None:
    """From the heartbeat that frees a card to the waiting job's placed record, over many trials."""
    r = redis.Redis.from_url(url)
    r.flushall()
    client = Client(redis.Redis.from_url(url), PLAN_PREFIX)
    req = request_from_repository(repository(30), model="bench/llama-70b", context=CONTEXT)
    beats = [{**b, "free_gpus": 0} if b["gpu_class"] == "h200-141g" else b for b in pool(sizes.pool, busy=False)]
    load_pool(client.store, beats)
    node = next(b for b in beats if b["gpu_class"] == "h200-141g")
    client.store.inline_intake = False  # as a node agent's login: the workers' intake takes it in
    seq = 10
    times: list[float] = []
    ws = Workers(url, PLAN_PREFIX, WAKE_WORKERS, burst=False)
    try:
        ready(r, WAKE_WORKERS)
        with Refresher(url, beats, skip={node["node_id"]}):
            for trial in range(-WAKE_WARMUP, sizes.wake_trials):
                seq += 1
                client.heartbeat({**node, "seq": seq, "free_gpus": 0})
                job_id = f"wake-{trial + WAKE_WARMUP}"
                client.submit(req, job_id=job_id)
                stream = client.keys.job_events(job_id)
                last = wait_state(r, stream, "0-0", {JobState.WAITING.value})
                quiet(r)
                seq += 1
                t0 = time.perf_counter()
                client.heartbeat({**node, "seq": seq, "free_gpus": 1})
                wait_state(r, stream, last, {JobState.PLACED.value})
                if trial >= 0:
                    times.append(time.perf_counter() - t0)
                client.release(job_id)
                quiet(r)
    finally:
        ws.stop()
    times.sort()
    emit("wake_latency_p50", statistics.median(times) * 1000, "ms")
    emit("wake_latency_p99", pct(times, 0.99) * 1000, "ms")
    client.redis.close()
    r.close()


def planner_cost(sizes: Sizes) -> None:
    """Time per plan (``plan_job``: every option ranked, nodes chosen) against pool size and artifacts, on
    the pool indexed once, untimed, as a worker's mirror keeps it (``planner.index``). Before each plan one
    card node's free cards change in the index, untimed, as a heartbeat changes a worker's mirror between
    two plans: what the planner keeps from one plan to the next is kept only where the pool did not change."""
    per: dict[tuple[int, int], float] = {}
    rng = random.Random(11)
    for n in sizes.plan_pools:
        members = pool_nodes(pool(n, busy=True))
        nodes = PoolIndex(members)
        cards = [m for m in members if m.gpus > 0]
        for k in sizes.plan_artifacts:
            repo = repository(k)
            runs: list[float] = []
            spent = 0.0
            while spent < sizes.plan_seconds or len(runs) < 3:
                node = rng.choice(cards)
                now = nodes.get(node.id) or node
                nodes.put(replace(now, free_gpus=(now.free_gpus + 1) % (now.gpus + 1)))
                t0 = time.perf_counter()
                plan_job(repo.artifacts, repo.shape, nodes, CONTEXT)
                dt = time.perf_counter() - t0
                runs.append(dt)
                spent += dt
                if len(runs) >= 3 and spent > 5 * sizes.plan_seconds:
                    break
            per[(n, k)] = statistics.median(runs)
            emit(f"plan_ms_n{n}_a{k}", per[(n, k)] * 1000, "ms")
    pools = sorted(sizes.plan_pools)
    k = max(sizes.plan_artifacts)
    for a, b in itertools.pairwise(pools):
        growth = math.log(per[(b, k)] / per[(a, k)]) / math.log(b / a)
        emit(f"plan_growth_n{a}_to_n{b}_a{k}", growth, "exponent")


def snapshot_cost(url: str, sizes: Sizes) -> None:
    """Time for a worker to read the pool (``MirroredStore.snapshot``), a fifth of the nodes holding a job:
    cold (the first read, the whole pool) and after a change (one node published since the last read: what
    a worker's mirror catches up on between two plans)."""
    r = redis.Redis.from_url(url)
    store = MirroredStore(redis.Redis.from_url(url), Keys(PLAN_PREFIX))
    k = store.keys
    for n in sizes.snapshot_pools:
        r.flushall()
        beats = pool(n, busy=True)
        with r.pipeline(transaction=False) as pipe:
            for i, b in enumerate(beats[::5]):
                hold = json.dumps({"gpus": 1, "host_gb": 0.0, "boot_id": BOOT, "nominated": False})
                pipe.hset(k.held(b["node_id"]), f"job-{i}:0:1", hold)
                pipe.sadd(k.held_nodes, b["node_id"])
            pipe.execute()
        seq = 1
        load_pool(store, beats)
        loaded = time.monotonic()
        t0 = time.perf_counter()
        snap = store.snapshot()
        cold = time.perf_counter() - t0
        if len(snap.nodes) != n:
            raise RuntimeError(f"snapshot saw {len(snap.nodes)} of {n} nodes")
        runs = []
        for i in range(sizes.snapshot_reads):
            if time.monotonic() - loaded > C.NODE_TTL_MS / 2000:  # heartbeats lapse: publish them again
                seq += 1
                load_pool(store, [{**b, "seq": seq} for b in beats])
                loaded = time.monotonic()
                store.snapshot()
            # a change between two reads, as between two plans: one node publishes
            one = beats[(i * 7919) % n]
            store.put_heartbeat(records_of([{**one, "seq": seq + 1 + i}])[0])
            t0 = time.perf_counter()
            snap = store.snapshot()
            runs.append(time.perf_counter() - t0)
            if len(snap.nodes) != n:
                raise RuntimeError(f"snapshot saw {len(snap.nodes)} of {n} nodes")
        seq += sizes.snapshot_reads + 1
        emit(f"pool_read_after_change_ms_n{n}", statistics.median(runs) * 1000, "ms")
        emit(f"snapshot_cold_ms_n{n}", cold * 1000, "ms")
    r.flushall()
    store.redis.close()
    r.close()


def heartbeat_ingest(url: str, port: int, sizes: Sizes) -> None:
    """Heartbeats per second through the project's publish path, against redis-benchmark's SET rate: one
    client publishing batches (``Client.heartbeats``), ``INGEST_PUBLISHERS`` such clients at once (what
    one Redis takes from several relays), and one client one heartbeat at a time (``Client.heartbeat``,
    what one node agent does)."""
    r = redis.Redis.from_url(url)
    r.flushall()
    client = Client(redis.Redis.from_url(url), PLAN_PREFIX)
    beats = pool(sizes.ingest_nodes, busy=True)
    for i in range(0, len(beats), INGEST_BATCH):  # the nodes join: every later heartbeat is a refresh
        client.heartbeats(beats[i : i + INGEST_BATCH])
    batched = publish_rounds(url, beats, sizes.ingest_rounds, first_seq=2)

    ctx = multiprocessing.get_context("spawn")
    parts = [beats[i::INGEST_PUBLISHERS] for i in range(INGEST_PUBLISHERS)]
    with ctx.Pool(INGEST_PUBLISHERS) as workers:
        # every publisher has imported and connected before the clock starts: the first round is untimed
        workers.starmap(publish_rounds, [(url, part, 1, 100) for part in parts])
        t0 = time.perf_counter()
        workers.starmap(publish_rounds, [(url, part, sizes.ingest_rounds, 200) for part in parts])
        parallel = sizes.ingest_rounds * len(beats) / (time.perf_counter() - t0)

    single = beats[: sizes.single_heartbeats]
    t0 = time.perf_counter()
    for b in single:
        client.heartbeat({**b, "seq": 1000})
    one_by_one = len(single) / (time.perf_counter() - t0)

    set_rate = redis_benchmark_set(port, sizes.ingest_nodes * 5)
    emit("heartbeats_per_s_batched", batched, "heartbeats/s", baseline=set_rate)
    emit(f"heartbeats_per_s_batched_{INGEST_PUBLISHERS}_clients", parallel, "heartbeats/s", baseline=set_rate)
    emit("heartbeats_per_s_one_client_one_at_a_time", one_by_one, "heartbeats/s", baseline=set_rate)
    emit("redis_benchmark_set_per_s", set_rate, "requests/s")
    r.flushall()
    client.redis.close()
    r.close()


def publish_rounds(url: str, beats: Sequence[dict[str, Any]], rounds: int, first_seq: int) -> float:
    """Publish every heartbeat ``rounds`` times in batches of ``INGEST_BATCH``: heartbeats per second."""
    configure_logging("WARNING", sys.stderr)
    client = Client(redis.Redis.from_url(url), PLAN_PREFIX)
    batches = [
        [
            [{**b, "seq": first_seq + rnd} for b in beats[i : i + INGEST_BATCH]]
            for i in range(0, len(beats), INGEST_BATCH)
        ]
        for rnd in range(rounds)
    ]
    t0 = time.perf_counter()
    for rnd in batches:
        for batch in rnd:
            client.heartbeats(batch)
    rate = rounds * len(beats) / (time.perf_counter() - t0)
    client.redis.close()
    return rate


def redis_benchmark_set(port: int, requests: int) -> float:
    """``redis-benchmark -t set`` (50 clients, no pipelining) on the same server: requests per second."""
    binary = shutil.which("redis-benchmark")
    if binary is None:
        raise RuntimeError("redis-benchmark is not installed (it comes with redis-server: run scripts/setup)")
    out = subprocess.run(
        [binary, "-h", "127.0.0.1", "-p", str(port), "-t", "set", "-n", str(requests), "-q", "--csv"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # "test","rps",... then "SET","104058.27",...
    for line in out.splitlines():
        cells = [c.strip('"') for c in line.split(",")]
        if cells and cells[0] == "SET":
            return float(cells[1])
    raise RuntimeError(f"redis-benchmark gave no SET rate: {out!r}")


@contextmanager
def server() -> Iterator[RedisServer]:
    s = RedisServer()
    s.start()
    try:
        yield s
    finally:
        s.cleanup()


FIGURES: dict[str, Callable[[RedisServer, Sizes], None]] = {
    "throughput": lambda s, z: throughput(s.url, z),
    "wake": lambda s, z: wake_latency(s.url, z),
    "planner": lambda s, z: planner_cost(z),
    "snapshot": lambda s, z: snapshot_cost(s.url, z),
    "ingest": lambda s, z: heartbeat_ingest(s.url, s.port, z),
    "cluster": lambda s, z: cluster(s.url, z),
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts: under a minute")
    parser.add_argument("--smoke", action="store_true", help="tiny counts, for the test suite: seconds")
    parser.add_argument("--only", choices=sorted(FIGURES), action="append", help="run only these figures")
    args = parser.parse_args(argv)
    sizes = SMOKE if args.smoke else QUICK if args.quick else FULL
    configure_logging("WARNING", sys.stderr)  # standard output is the figures only
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped: its redis-server and workers go too
    with server() as s:
        for name, figure in FIGURES.items():
            if args.only and name not in args.only:
                continue
            figure(s, sizes)
    return 0
