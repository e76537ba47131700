"""The cluster-scale run: a pool heartbeating every ``HEARTBEAT_INTERVAL_S`` through the batched publish
path, as rack relays forward their nodes' heartbeats (100,000 nodes: 20,000 heartbeats a second), a few
per cent of the nodes freeing or taking cards each interval, and serve jobs arriving all the while,
planned by two ``modelplan worker`` processes.

Two streams of jobs arrive. Jobs for the repository's best option (Q8_0 on one H200 card) find every
H200 card taken: a few are kept waiting at all times, and the relays free H200 cards at a steady rate, so
that each freed card wakes one of them. Other jobs (a small quantisation, placed at once on any free card)
arrive at a steady rate beside them. Reported: the heartbeats a second the relays held, the jobs a second
planned, the wake-up latency (from the heartbeat that freed a card to the placed record of the job that
took it), each worker's memory and Redis's.
"""

from __future__ import annotations

import json
import multiprocessing
import random
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import redis

from bench.common import CONTEXT, PLAN_PREFIX, Sizes, Workers, emit, load_pool, pct, quiet, ready
from bench.pool import pool, repository
from producer.client import Client, request_from_repository
from worker import constants as C
from worker.config import configure_logging
from worker.records import JobRecord, JobState
from worker.scripts import text

RELAYS = 2
"""Relay processes publishing the pool's heartbeats, each for its share of the nodes."""
RACK = 100
"""Heartbeats per ``Client.heartbeats`` call: a few racks' worth."""
TICK_S = 0.05
"""A relay sends its next slice of nodes this often: each node once an interval, spread evenly."""
CHURN = 0.03
"""The share of the nodes whose free cards change (one more or one fewer) each interval."""
TARGET_CLASS = "h200-141g"
"""The class the waiting jobs want: every card of it is taken when the run starts."""
FREES_PER_S = 20
"""H200 cards freed a second, across the relays: each wakes one waiting job."""
BACKLOG = 4
"""Jobs kept waiting for H200 cards: when one is placed, another is submitted."""
OTHER_JOBS_PER_S = 10
"""Jobs a second that are placed at once, on whatever cards are free."""
OTHER = "Meta-Llama-3.1-70B-Instruct-Q4_K_M.gguf"
"""What those jobs ask for: one card of 80 GiB or more, which the busy pool has free."""
SETUP_TTL_MS = 300_000
"""The TTL of the heartbeats the pool is loaded with: past the workers' first whole reads of it."""
START_S = 3.0
"""The relays start together this long after they are launched (imported and connected by then)."""
POLL_S = 0.01


def cluster(url: str, sizes: Sizes) -> None:
    """Run the scenario for ``sizes.cluster_seconds`` on ``sizes.cluster_nodes`` nodes and print its
    figures."""
    r = redis.Redis.from_url(url)
    r.flushall()
    client = Client(redis.Redis.from_url(url), PLAN_PREFIX)
    beats = pool(sizes.cluster_nodes, busy=True)
    for b in beats:
        if b["gpu_class"] == TARGET_CLASS:
            b["free_gpus"] = 0
    # loaded with a TTL long enough for the workers' first reads, so that no node lapses before its relay
    # publishes it; from then on the relays' heartbeats carry the usual TTL
    ttl, C.NODE_TTL_MS = C.NODE_TTL_MS, SETUP_TTL_MS
    try:
        load_pool(client.store, beats)
    finally:
        C.NODE_TTL_MS = ttl
    waiting_req = request_from_repository(repository(30), model="bench/llama-70b", context=CONTEXT)
    other_req = request_from_repository(repository(30), model="bench/llama-70b", context=CONTEXT, artifact=OTHER)

    ws = Workers(url, PLAN_PREFIX, 2, burst=False)
    try:
        ready(r, 2)
        ws.wait_for_log("pool_read_whole")  # each worker's first, whole read: not part of the run
        parts = [beats[i::RELAYS] for i in range(RELAYS)]
        start_at = time.time() + START_S
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(RELAYS) as relays:
            args = [
                (url, part, sizes.cluster_seconds, FREES_PER_S / RELAYS, i, start_at) for i, part in enumerate(parts)
            ]
            pending = relays.starmap_async(relay, args)
            while time.time() < start_at:
                time.sleep(POLL_S)
            waiting_ids, other_ids = _submit_while(client, pending, waiting_req, other_req, ws)
            results: list[dict[str, Any]] = pending.get()
        quiet(r)
        rss = ws.rss_mib()
        whole_reads = ws.count_log("pool_read_whole") - len(rss)  # past each worker's first
    finally:
        ws.stop()

    seconds = max(res["seconds"] for res in results)
    sent = sum(res["sent"] for res in results)
    frees: dict[str, list[float]] = {}
    for res in results:
        for node, at_ms in res["frees"]:
            frees.setdefault(node, []).append(at_ms)
    latencies, woken, at_once = _wake_latencies(client, waiting_ids, frees)
    planned = _planned(client, waiting_ids + other_ids)

    emit("cluster_heartbeats_per_s", sent / seconds, "heartbeats/s")
    emit("cluster_relay_behind_max_ms", max(res["late_s"] for res in results) * 1000, "ms")
    emit("cluster_jobs_per_s", planned / seconds, "jobs/s")
    emit("cluster_jobs_woken", woken, "jobs")
    emit("cluster_jobs_placed_at_once", at_once, "jobs")
    if latencies:
        latencies.sort()
        emit("cluster_wake_latency_p50", statistics.median(latencies), "ms")
        emit("cluster_wake_latency_p99", pct(latencies, 0.99), "ms")
    for i, mib in enumerate(rss):
        emit(f"cluster_worker_rss_mib_w{i}", mib, "MiB")
    emit("cluster_redis_used_mib", int(r.info("memory")["used_memory"]) / (1 << 20), "MiB")
    emit("cluster_whole_reads_during_run", whole_reads, "reads")
    r.flushall()
    client.redis.close()
    r.close()


def _submit_while(
    client: Client, relays: Any, waiting_req: Any, other_req: Any, ws: Workers
) -> tuple[list[str], list[str]]:
    """Keep ``BACKLOG`` jobs waiting for H200 cards and submit the others at their rate, until the relays
    are done: the ids of each."""
    waiting_ids: list[str] = []
    other_ids: list[str] = []
    unplaced: list[str] = []
    started = time.monotonic()
    placed_index = client.keys.jobs(JobState.PLACED)
    while not relays.ready():
        # the placed index, not the records: this loop runs every 10 ms on the cores the run measures
        scores = client.redis.zmscore(placed_index, unplaced) if unplaced else []
        unplaced = [j for j, score in zip(unplaced, scores, strict=True) if score is None]
        for _ in range(BACKLOG - len(unplaced)):
            waiting_ids.append(client.submit(waiting_req, job_id=f"w-{len(waiting_ids)}"))
            unplaced.append(waiting_ids[-1])
        while len(other_ids) < OTHER_JOBS_PER_S * (time.monotonic() - started):
            other_ids.append(client.submit(other_req, job_id=f"o-{len(other_ids)}"))
        ws.check()
        time.sleep(POLL_S)
    return waiting_ids, other_ids


def _placed(rec: JobRecord | None) -> bool:
    return rec is not None and rec.state is JobState.PLACED


def _wake_latencies(
    client: Client, job_ids: Sequence[str], frees: dict[str, list[float]]
) -> tuple[list[float], int, int]:
    """For each job that waited and was then placed: from the latest heartbeat that freed a card on its
    node before it was placed, to its placed record (ms). Also how many waited, and how many were placed
    at their first plan."""
    out: list[float] = []
    woken = at_once = 0
    for job_id, rec in zip(job_ids, client.records(job_ids), strict=True):
        if rec is None or not _placed(rec):
            continue
        entries: Any = client.redis.xrange(client.keys.job_events(job_id))
        states = [(text(e[1][b"state"]), int(text(e[0]).split("-", 1)[0])) for e in entries]
        placed_ms = next(ms for state, ms in states if state == JobState.PLACED.value)
        if JobState.WAITING.value not in {state for state, _ in states}:
            at_once += 1
            continue
        woken += 1
        node = rec.placement[0].node_id
        freed = [ms for ms in frees.get(node, []) if ms <= placed_ms]
        if freed:
            out.append(placed_ms - max(freed))
    return out, woken, at_once


def _planned(client: Client, job_ids: Sequence[str]) -> int:
    """How many of the jobs have been planned: placed, or waiting for their cards."""
    done = (JobState.PLACED, JobState.WAITING)
    return sum(1 for rec in client.records(job_ids) if rec is not None and rec.state in done)


class Agents:
    """The nodes' agents, as far as a relay sees them: the JSON text each sends, which the relay forwards
    as it came. Each node's text is rendered once per change of its figures, around its seq, rather than
    at every send: the agents run on their own machines, and the run's two cores are for the relays,
    Redis and the workers."""

    def __init__(self, beats: list[dict[str, Any]]) -> None:
        self.beats = beats
        self._parts = [self._render(b) for b in beats]

    @staticmethod
    def _render(b: dict[str, Any]) -> tuple[str, str]:
        before, after = json.dumps({**b, "seq": -1}, separators=(",", ":")).split('"seq":-1')
        return before + '"seq":', after

    def changed(self, i: int) -> None:
        """Node ``i``'s figures changed: render its text anew."""
        self._parts[i] = self._render(self.beats[i])

    def sent(self, i: int, seq: int) -> str:
        """Node ``i``'s heartbeat ``seq`` as its agent sends it."""
        before, after = self._parts[i]
        return before + str(seq) + after


def relay(
    url: str, beats: list[dict[str, Any]], seconds: float, frees_per_s: float, seed: int, start_at: float
) -> dict[str, Any]:
    """One relay: publishes each of ``beats`` once every ``HEARTBEAT_INTERVAL_S`` for ``seconds``, a slice
    every ``TICK_S``, in calls of ``RACK`` spread evenly over the tick (relay ``seed`` of ``RELAYS`` offset
    by its share of a call's spacing, so that the relays' calls interleave, as unsynchronised racks'
    would); each interval ``CHURN`` of its card nodes gain or lose a free card and ``frees_per_s`` H200
    cards are freed. Returns how many it sent, over how long, when it sent each freeing heartbeat (node,
    ms), and how far behind its schedule it fell at most (s)."""
    configure_logging("WARNING", sys.stderr)
    client = Client(redis.Redis.from_url(url), PLAN_PREFIX)
    client.store.inline_intake = False  # as a relay's login: the workers' intake takes its changes in
    agents = Agents(beats)
    rng = random.Random(seed)
    ticks = round(C.HEARTBEAT_INTERVAL_S / TICK_S)
    slices = [list(range(i, len(beats), ticks)) for i in range(ticks)]
    target = [i for i, b in enumerate(beats) if b["gpu_class"] == TARGET_CLASS]
    cards = [i for i, b in enumerate(beats) if b["gpu_class"] and b["gpu_class"] != TARGET_CLASS]
    per_interval = round(frees_per_s * C.HEARTBEAT_INTERVAL_S)
    sent, seq, late = 0, 1, 0.0
    frees: list[tuple[str, float]] = []
    free_now: set[int] = set()
    churn: set[int] = set()
    while time.time() < start_at:
        time.sleep(0.001)
    t0 = time.monotonic()
    calls = -(-len(slices[0]) // RACK)
    spacing = TICK_S / calls
    for tick in range(round(seconds / TICK_S)):
        if tick % ticks == 0:  # a new interval: which nodes change in it
            seq += 1
            free_now = set(rng.sample(target, min(per_interval, len(target))))
            churn = set(rng.sample(cards, min(round(CHURN * len(beats)), len(cards))))
        part = slices[tick % ticks]
        for j in range(0, len(part), RACK):
            behind = time.monotonic() - (t0 + tick * TICK_S + (j // RACK + seed / RELAYS) * spacing)
            if behind < 0:
                time.sleep(-behind)
            late = max(late, behind)
            batch = part[j : j + RACK]
            freed = []
            for i in batch:
                b = beats[i]
                b["seq"] = seq
                if i in free_now and b["free_gpus"] < b["gpus"]:
                    b["free_gpus"] += 1
                    freed.append(b["node_id"])
                    agents.changed(i)
                elif i in churn:
                    b["free_gpus"] = min(b["gpus"], max(0, b["free_gpus"] + rng.choice((-1, 1))))
                    agents.changed(i)
            at_ms = time.time() * 1000
            client.heartbeats([agents.sent(i, seq) for i in batch])
            sent += len(batch)
            frees += [(node, at_ms) for node in freed]
    elapsed = time.monotonic() - t0
    client.redis.close()
    return {"sent": sent, "seconds": elapsed, "frees": frees, "late_s": late}
