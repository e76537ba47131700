"""The benchmark runs, as its README command does, and prints its figures as JSON lines.

Tiny sizes (``--smoke``): this checks that every figure is measured and reported, not how fast anything
is. Speed is the benchmark's to measure (``python -m bench``), not a test's to assert.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FIGURES = (
    "rq_noop_jobs_per_s_w1",
    "plan_jobs_per_s_w1",
    "plan_jobs_placed_share_w1",
    "plan_ratio_lowest_round_w1",
    "plan_ratio_highest_round_w1",
    "wake_latency_p50",
    "wake_latency_p99",
    "plan_ms_n100_a1",
    "plan_ms_n1000_a30",
    "plan_growth_n100_to_n1000_a30",
    "pool_read_after_change_ms_n1000",
    "snapshot_cold_ms_n1000",
    "heartbeats_per_s_batched",
    "heartbeats_per_s_batched_2_clients",
    "heartbeats_per_s_one_client_one_at_a_time",
    "redis_benchmark_set_per_s",
)
COMPARED = ("plan_jobs_per_s_w1", "heartbeats_per_s_batched", "heartbeats_per_s_one_client_one_at_a_time")


def test_the_benchmark_prints_every_figure_as_a_json_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke"], cwd=ROOT, capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    by_name = {line["name"]: line for line in lines}
    assert len(by_name) == len(lines), "a figure is printed twice"
    assert set(FIGURES) <= set(by_name), sorted(set(FIGURES) - set(by_name))
    for line in lines:
        assert {"name", "value", "unit"} <= set(line) <= {"name", "value", "unit", "baseline", "ratio"}, line
        assert isinstance(line["value"], int | float) and isinstance(line["unit"], str) and line["unit"], line
    for name in COMPARED:
        line = by_name[name]
        assert line["baseline"] > 0 and abs(line["ratio"] - line["value"] / line["baseline"]) < 1e-3, line
    assert by_name["plan_jobs_placed_share_w1"]["value"] == 1.0
