"""What a worker measures for the metrics exporter: plan and commit times, commit conflicts, the wake-up
latency, and the engines' footprints refused and flagged (``worker.observations``, which also sets each
engine and card class's latest footprint over the formula in ``stats`` itself), kept in this process
and added to the ``stats`` hash in Redis every maintenance interval, so that one exporter (``modelplan
metrics``) reports every worker's.

Histograms are stored as Prometheus has them: a cumulative count for each upper bound
(``{name}:bucket:{le}``), ``{name}:sum`` and ``{name}:count``; counters as ``{name}``. A worker killed
loses at most one interval of its figures, never a job.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from datetime import datetime

import redis

from worker.keys import Keys

HISTOGRAMS: dict[str, tuple[float, ...]] = {
    # a plan or a commit takes a millisecond or so: buckets from 0.5 ms, with the tail a stalled Redis gives
    "plan_seconds": (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
    "commit_seconds": (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
    # a heartbeat every 5 s: a wake-up within one interval is the design, past it something lagged
    "wake_latency_seconds": (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
}
COUNTERS = {
    "commit_conflicts": "Commits that found their cards taken since the plan",
    "observations_refused": (
        "Footprints (or ended engines) refused: for a hold not on the reporting node, or past its card or RAM"
    ),
    "observations_flagged": "Footprints under half or over twice the formula's estimate (kept, not planned with)",
}
"""Each counter with what it counts (``modelplan_{name}_total``)."""
CONFLICT_HEARTBEATS = "conflict_heartbeats"
"""The counter of heartbeats refused because two agents claim their node id: ``heartbeat.lua`` counts
them in the node's conflict record, and a worker's intake (``intake.lua``) adds them to ``stats``."""
NODE_RECORDS_DROPPED = "node_records_dropped"
"""The counter of node records (and conflict records) the intake deleted: longer than
``NODE_RECORD_MAX_BYTES``, or of another type than a string."""

_lock = threading.Lock()
_pending: dict[str, float] = {}


def bucket_field(name: str, le: float) -> str:
    return f"{name}:bucket:{le:g}"


_FIELDS = {
    name: (tuple(zip(bounds, (bucket_field(name, le) for le in bounds), strict=True)), f"{name}:count", f"{name}:sum")
    for name, bounds in HISTOGRAMS.items()
}
"""Each histogram's bounds with their fields, and its count and sum fields: named once, not per job."""


def observe(name: str, seconds: float) -> None:
    """Count one observation of ``name`` (one of ``HISTOGRAMS``)."""
    buckets, count_field, sum_field = _FIELDS[name]
    with _lock:
        for le, field in buckets:
            if seconds <= le:
                _pending[field] = _pending.get(field, 0) + 1
        _pending[count_field] = _pending.get(count_field, 0) + 1
        _pending[sum_field] = _pending.get(sum_field, 0.0) + seconds


def count(name: str, n: int = 1) -> None:
    """Add ``n`` to the counter ``name`` (one of ``COUNTERS``)."""
    with _lock:
        _pending[name] = _pending.get(name, 0) + n


def wake_latencies(received: Iterable[datetime], at: datetime) -> None:
    """A wake-up pass placed replicas at ``at`` on nodes whose last heartbeats arrived at ``received``:
    the time from the latest of them (the one that freed the cards, or a later one) to the placement."""
    latest = max(received, default=None)
    if latest is not None:
        observe("wake_latency_seconds", max(0.0, (at - latest).total_seconds()))


def flush(client: redis.Redis, keys: Keys) -> None:
    """Add what this process measured since the last flush to ``stats``. On a Redis error the figures are
    kept for the next flush."""
    with _lock:
        taken = dict(_pending)
        _pending.clear()
    if not taken:
        return
    try:
        with client.pipeline(transaction=True) as pipe:
            for field, value in taken.items():
                if field.endswith(":sum"):
                    pipe.hincrbyfloat(keys.stats, field, value)
                else:
                    pipe.hincrby(keys.stats, field, int(value))
            pipe.execute()
    except redis.RedisError:
        with _lock:
            for field, value in taken.items():
                _pending[field] = _pending.get(field, 0) + value
        raise


def forget() -> None:
    """Drop what is not flushed (tests)."""
    with _lock:
        _pending.clear()
