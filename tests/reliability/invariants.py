"""The invariants the reliability suite checks all through every run, on one consistent read of Redis."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import redis

from producer import Client
from worker.classes import hardware_rank
from worker.ids import job_of_hold
from worker.keys import Keys
from worker.planning import plan_for
from worker.records import JobRecord, JobState
from worker.scripts import text

OUT_ENV = "MODELPLAN_RELIABILITY_OUT"
"""A file the suite appends one JSON line per run to; docs/RELIABILITY.md is made from them."""

PARSED_KEPT = 50_000
"""Job records a checker keeps parsed, by their stored bytes: a record unchanged since the last sample is
not parsed again (a run's few hundred jobs change a few thousand times)."""


def report(suite: str, **figures: Any) -> None:
    """Print a run's figures, and append them to ``$MODELPLAN_RELIABILITY_OUT`` if set."""
    line = json.dumps({"suite": suite, **figures}, sort_keys=True)
    print(line)
    path = os.environ.get(OUT_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


@dataclass
class Checker:
    """Reads the whole state in one transaction and lists what breaks an invariant.

    A node whose heartbeat lapsed may carry placed replicas until a worker's sweep hands it off, and the
    handoff plans them again and drops the node from the pool's index: one out of the index that still
    carries any breaks an invariant at once. How long one in the index carries them is the workers' speed,
    not an invariant: it is measured (``silent_holding_s``), and a run waits for the event itself, every
    silent node let go while the workers run (``silent_holding``), rather than judging a sample by the
    clock (a sample taken while the workers are stopping, or starved of the CPU, would find a node silent
    for longer than any grace with no worker there to act)."""

    r: redis.Redis
    keys: Keys
    acknowledged: set[str] = field(default_factory=set)
    """Every job id whose submit returned: each must have a record."""
    lapsed_at: dict[str, float] = field(default_factory=dict)
    """Each node seen with no stored heartbeat, from when this checker first saw it so."""
    lapses: int = 0
    """How many times a sample found a node newly without a stored heartbeat."""
    silent_holding_s: float = 0.0
    """The longest a sample found a node silent (since this checker first saw it so) with placed replicas."""
    samples: int = 0
    violations: list[str] = field(default_factory=list)
    _parsed: dict[bytes, JobRecord] = field(default_factory=dict)

    def _record(self, raw: bytes) -> JobRecord:
        rec = self._parsed.get(raw)
        if rec is None:
            if len(self._parsed) >= PARSED_KEPT:
                self._parsed.clear()
            rec = self._parsed[raw] = JobRecord.from_stored(raw)
        return rec

    def silent_holding(self, node_ids: Iterable[str]) -> dict[str, list[str]]:
        """Each of ``node_ids`` with no stored heartbeat that still carries placed replicas (not holds for
        waiting jobs), with their hold ids, on one read."""
        nodes = sorted(set(node_ids))
        with self.r.pipeline(transaction=True) as pipe:
            for n in nodes:
                pipe.exists(self.keys.node(n))
                pipe.hgetall(self.keys.held(n))
            replies = pipe.execute()
        found = {}
        for i, n in enumerate(nodes):
            alive, held = replies[2 * i], replies[2 * i + 1]
            placed = sorted(text(h) for h, v in held.items() if not json.loads(v)["nominated"])
            if not alive and placed:
                found[n] = placed
        return found

    def check(self, node_ids: Iterable[str]) -> list[str]:
        k = self.keys
        nodes = sorted(set(node_ids))
        with self.r.pipeline(transaction=True) as pipe:
            for s in JobState:
                pipe.zrange(k.jobs(s), 0, -1)
            ids_by_state = pipe.execute()
        job_ids = sorted({text(j) for ids in ids_by_state for j in ids} | self.acknowledged)
        with self.r.pipeline(transaction=True) as pipe:
            for s in JobState:
                pipe.zrange(k.jobs(s), 0, -1)
            for n in nodes:
                pipe.get(k.node(n))
                pipe.hgetall(k.held(n))
            pipe.zrange(k.nodes, 0, -1)
            pipe.hgetall(k.pending_for)
            pipe.hgetall(k.pending_classes)
            pipe.hgetall(k.pending_records)
            if job_ids:
                pipe.mget([k.job(j) for j in job_ids])
            replies = pipe.execute()
        now = time.monotonic()
        states = replies[: len(JobState)]
        node_replies = replies[len(JobState) : len(JobState) + 2 * len(nodes)]
        indexed = {text(n) for n in replies[len(JobState) + 2 * len(nodes)]}
        at = len(JobState) + 2 * len(nodes) + 1
        pending_for, pending_classes, pending_records = replies[at : at + 3]
        raws = replies[-1] if job_ids else []
        found: list[str] = []

        # what a wake-up pass reads: each pending job's record as stored, and no other
        stored = dict(zip(job_ids, raws, strict=True))
        if set(pending_records) != set(pending_for):
            kept_ids, for_ids = sorted(map(text, pending_records)), sorted(map(text, pending_for))
            found.append(f"pending:records holds {kept_ids}, pending:for {for_ids}")
        for j, raw in pending_records.items():
            if stored.get(text(j), raw) != raw:
                found.append(f"pending:records holds another record of {text(j)} than job:{text(j)}")

        # what heartbeats read to wake anyone: each class counts the pending jobs it wakes
        counted = Counter(c for classes in pending_for.values() for c in text(classes).split(",") if c)
        kept = {text(c): int(n) for c, n in pending_classes.items()}
        if kept != dict(counted):
            found.append(f"pending:classes is {kept} but pending:for counts {dict(counted)}")

        where: dict[str, list[str]] = {}
        for s, ids in zip(JobState, states, strict=True):
            for j in ids:
                where.setdefault(text(j), []).append(s.value)
        records: dict[str, JobRecord] = {}
        for j, raw in zip(job_ids, raws, strict=True):
            if raw is None:
                if j in self.acknowledged:
                    found.append(f"acknowledged job {j} has no record")
                continue
            rec = self._record(raw)
            records[j] = rec
            if where.get(j) != [rec.state.value]:
                found.append(f"job {j} is {rec.state.value} in its record but indexed as {where.get(j)}")

        expected: dict[str, dict[str, int]] = {}
        for rec in records.values():
            if rec.state.final or rec.state in (JobState.QUEUED, JobState.PLANNING):
                if rec.state in (JobState.QUEUED, JobState.PLANNING) and rec.holds:
                    found.append(f"job {rec.job_id} is {rec.state.value} but holds {len(rec.holds)}")
                continue
            for h in rec.holds:
                expected.setdefault(h.node_id, {})[h.hold_id] = h.gpus
            for rep in rec.replicas:
                w = rep.wait
                if rep.state == "waiting" and (w is None or (w.kind == "resources" and not all(w.missing.values()))):
                    found.append(f"job {rec.job_id} replica {rep.index} waits with no busy option: {w}")

        for i, n in enumerate(nodes):
            raw, held = node_replies[2 * i], node_replies[2 * i + 1]
            holds = {text(h): json.loads(v) for h, v in held.items()}
            if raw is not None:
                self.lapsed_at.pop(n, None)
                gpus = json.loads(raw)["gpus"]
                total = sum(v["gpus"] for v in holds.values())
                if total > gpus:
                    found.append(f"node {n}: {total} cards held of {gpus}")
            else:
                if n not in self.lapsed_at:
                    self.lapses += 1
                since = self.lapsed_at.setdefault(n, now)
                placed_here = [h for h in holds if not holds[h]["nominated"]]
                if placed_here and n not in indexed:
                    found.append(f"node {n} silent and out of the pool's index still holds {placed_here}")
                elif placed_here:
                    self.silent_holding_s = max(self.silent_holding_s, now - since)
            got = {h: v["gpus"] for h, v in holds.items() if job_of_hold(h) in records}
            if got != expected.get(n, {}):
                found.append(f"node {n}: held {got} but the records say {expected.get(n, {})}")
        self.samples += 1
        self.violations += found
        return found


def idle_while_waiting(client: Client) -> list[str]:
    """At a quiet point (no heartbeat or job change for a second or more): each waiting job with an option
    ranked equal to its best on the hardware that is free now, a card idling while the job waits."""
    snap = client.store.snapshot()
    found = []
    for rec in client.jobs(JobState.WAITING):
        if rec.option is None:
            continue
        best = hardware_rank(rec.option)
        free = [o for o in plan_for(rec, snap).alternatives if o.free_now and hardware_rank(o) == best]
        if free:
            found.append(f"job {rec.job_id} waits for {rec.option.label} while {free[0].label}, ranked equal, is free")
    return found
