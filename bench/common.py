"""What the benchmark's figures share: its sizes, its prefixes, how it prints a figure, loads a pool,
keeps heartbeats fresh and runs ``modelplan worker`` processes, and how it waits on a job."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from rq.registry import StartedJobRegistry

from worker import constants as C
from worker.keys import Keys
from worker.queueing import queue_class
from worker.records import utcnow
from worker.reports import NodeRecord
from worker.scripts import text
from worker.store import Store

ROOT = Path(__file__).resolve().parents[1]
CONTEXT = 8192
"""Tokens of context every benchmark job asks for."""
PLAN_PREFIX = "bench"
NOOP_PREFIX = "bench-noop"
REFRESH_SLICES = 50
"""A refreshed pool's heartbeats arrive in this many slices per interval (every 0.1 s), not all at once."""


@dataclass(frozen=True, slots=True)
class Sizes:
    """How much each figure measures: ``--quick`` is a smaller run of the same code."""

    jobs: int
    workers: tuple[int, ...]
    pool: int
    wake_trials: int
    plan_pools: tuple[int, ...]
    plan_artifacts: tuple[int, ...]
    plan_seconds: float
    snapshot_pools: tuple[int, ...]
    snapshot_reads: int
    ingest_nodes: int
    ingest_rounds: int
    single_heartbeats: int
    cluster_nodes: int
    cluster_seconds: float
    rounds: int
    """The throughput figure's rounds: each drains the no-op jobs, then the planning jobs, so that a
    machine that slows for a while weighs on both sides of a ratio."""


FULL = Sizes(1500, (1, 2, 4), 1000, 300, (100, 1_000, 10_000, 100_000), (1, 10, 30), 1.0, (1_000, 10_000, 100_000),
             20, 20_000, 3, 5_000, 100_000, 60, 3)  # fmt: skip
QUICK = Sizes(400, (1, 2, 4), 1000, 60, (100, 1_000, 10_000, 100_000), (1, 30), 0.3, (1_000, 10_000, 100_000),
              5, 10_000, 2, 2_000, 20_000, 10, 1)  # fmt: skip
SMOKE = Sizes(40, (1,), 100, 5, (100, 1_000), (1, 30), 0.05, (1_000,), 3, 1_000, 1, 200, 1_000, 3, 1)  # fmt: skip
"""For the test suite: every figure, tiny, in a few seconds. Its values mean nothing."""


def emit(name: str, value: float, unit: str, baseline: float | None = None) -> dict[str, Any]:
    line: dict[str, Any] = {"name": name, "value": round(value, 4), "unit": unit}
    if baseline is not None:
        line["baseline"] = round(baseline, 4)
        line["ratio"] = round(value / baseline, 4) if baseline else None
    print(json.dumps(line), flush=True)
    return line


def records_of(beats: Sequence[dict[str, Any]]) -> list[NodeRecord]:
    at = utcnow()
    return [NodeRecord.model_validate({**b, "received_at": at}) for b in beats]


def load_pool(store: Store, beats: Sequence[dict[str, Any]], batch: int = 2000) -> None:
    records = records_of(beats)
    for i in range(0, len(records), batch):
        store.put_heartbeats(records[i : i + batch])


class Refresher:
    """Keeps a pool's heartbeats fresh while a figure runs, as its agents would: each node every
    ``HEARTBEAT_INTERVAL_S``, spread evenly over the interval in slices of ``REFRESH_SLICES``, figures
    unchanged (so that nothing wakes), the next ``seq`` each time."""

    def __init__(self, url: str, beats: list[dict[str, Any]], skip: set[str] | None = None) -> None:
        self.store = Store(redis.Redis.from_url(url), Keys(PLAN_PREFIX))
        self.beats = [b for b in beats if b["node_id"] not in (skip or set())]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        seq = 1
        step = C.HEARTBEAT_INTERVAL_S / REFRESH_SLICES
        slices = [self.beats[i::REFRESH_SLICES] for i in range(REFRESH_SLICES)]
        while True:
            seq += 1
            for part in slices:
                if self.stop.wait(step):
                    return
                load_pool(self.store, [{**b, "seq": seq} for b in part])

    def __enter__(self) -> Refresher:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self.store.redis.close()


class Workers:
    """``modelplan worker`` processes, the real path: RQ SimpleWorkers on the queue of ``prefix``. Their
    logs go to files, shown if they stop before their work is done."""

    def __init__(self, url: str, prefix: str, count: int, *, burst: bool) -> None:
        cmd = [sys.executable, "-m", "producer.cli", "worker", "--redis-url", url, "--prefix", prefix]
        if burst:
            cmd.append("--burst")
        if prefix == NOOP_PREFIX:  # modelplan's worker runs only modelplan's jobs: the no-op's own worker
            cmd = [sys.executable, "-m", "bench.noop", url, prefix]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.folder = tempfile.TemporaryDirectory()
        self.logs = [Path(self.folder.name) / f"worker-{i}.log" for i in range(count)]
        self.procs = []
        for log in self.logs:
            with log.open("wb") as out:  # the worker keeps its own copy of the file open
                self.procs.append(subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env))

    def check(self) -> None:
        """Raise, with their logs, if every worker has stopped."""
        if all(p.poll() is not None for p in self.procs):
            tails = [log.read_bytes()[-2000:].decode(errors="replace") for log in self.logs]
            raise RuntimeError("every worker stopped before the work was done:\n" + "\n---\n".join(tails))

    def count_log(self, event: str) -> int:
        """How many lines of the workers' logs, together, record ``event``."""
        return sum(self._log_text(log).count(f'"event": "{event}"') for log in self.logs)

    def wait_for_log(self, event: str, timeout_s: float = 300) -> None:
        """Wait until every worker has logged ``event`` (each its first whole read of the pool, say)."""
        deadline = time.monotonic() + timeout_s
        while not all(f'"event": "{event}"' in self._log_text(log) for log in self.logs):
            self.check()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the workers did not all log {event} in {timeout_s} s")
            time.sleep(0.05)

    def rss_mib(self) -> list[float]:
        """Each worker's resident memory now (Linux's ``/proc``), MiB."""
        out = []
        for p in self.procs:
            status = Path(f"/proc/{p.pid}/status").read_text()
            kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
            out.append(kib / 1024)
        return out

    @staticmethod
    def _log_text(log: Path) -> str:
        return log.read_bytes().decode(errors="replace")

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.folder.cleanup()


def ready(r: redis.Redis, workers: int) -> None:
    """Wait until ``workers`` workers listen on the planning queue."""
    key = f"rq:workers:{Keys(PLAN_PREFIX).queue_name}"
    deadline = time.monotonic() + 60
    while r.scard(key) < workers:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{workers} workers did not start in 60 s")
        time.sleep(0.05)


def pct(sorted_values: Sequence[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, math.ceil(q * len(sorted_values)) - 1)]


def wait_state(r: redis.Redis, stream: str, after: str, states: set[str], timeout_s: float = 30) -> str:
    """Block on a job's stream until it reaches one of ``states``; the entry id it did."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got: Any = r.xread({stream: after}, block=1000)
        for _, entries in got or []:
            for entry_id, fields in entries:
                after = text(entry_id)
                if text(fields[b"state"]) in states:
                    return after
    raise RuntimeError(f"{stream} did not reach {states} in {timeout_s} s")


def quiet(r: redis.Redis) -> None:
    """Wait until the planning queue is empty and no worker is busy, so that a trial starts alone."""
    queue = queue_class(PLAN_PREFIX)(Keys(PLAN_PREFIX).queue_name, connection=r)
    queue_key, started = queue.key, StartedJobRegistry(queue=queue).key
    for _ in range(5000):
        if r.llen(queue_key) == 0 and not r.zcard(started):
            time.sleep(0.005)
            if r.llen(queue_key) == 0:
                return
        time.sleep(0.001)
