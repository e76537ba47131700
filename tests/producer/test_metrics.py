"""The metrics exporter: its exposition passes Prometheus' own check, and its figures are the ones
`modelplan status` prints for the same pool."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from producer import Client
from producer.cli import main
from producer.metrics import exposition
from producer.render import CARD_GLYPHS
from tests.redis_server import free_port
from tests.worker.helpers import drain, hb, request
from tests.worker.processes import ROOT
from worker import metrics

CLOCK_SLACK_S = 0.002
"""What comparing a span of the wall clock, as records store times, with one of ``time.monotonic`` allows."""


@pytest.fixture
def began() -> float:
    """When the test's pool began to be made (``time.monotonic``)."""
    return time.monotonic()


@pytest.fixture
def pool(redis_url: str, began: float) -> Iterator[Client]:
    """Two classes of cards (one busy outside modelplan), a CPU node, a placed job, a waiting one; the
    heartbeats sent in the order gpu-a, gpu-b, gpu-c, cpu-1."""
    metrics.forget()
    client = Client.from_url(redis_url)
    client.heartbeat(hb("gpu-a", "h100-80g", gpus=4, free=3))
    client.heartbeat(hb("gpu-b", "h100-80g", gpus=2))
    client.heartbeat(hb("gpu-c", "l4-24g", gpus=1))
    client.heartbeat(hb("cpu-1", "", host=64))
    client.submit(request(), "fits")
    client.submit(request("llama-3.1-70b-instruct", replicas=3), "big")
    client.submit(request(replicas=2), "two")
    drain(client)
    metrics.flush(client.redis, client.keys)
    # a footprint taken (tests/worker/test_observed.py takes one from a heartbeat): its ratio to the formula
    client.redis.hset(client.keys.stats, "estimate_observed_ratio:vllm:h100-80g", 1.25)
    yield client
    client.redis.close()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def status(client: Client, capsys: pytest.CaptureFixture[str]) -> str:
    kw = client.redis.get_connection_kwargs()
    assert main(["status", "--redis-url", f"redis://{kw['host']}:{kw['port']}/0"]) == 0
    return capsys.readouterr().out


def test_the_metrics_agree_with_status(pool: Client, began: float, capsys: pytest.CaptureFixture[str]) -> None:
    got = samples(exposition(pool))
    since = time.monotonic() - began
    said = status(pool, capsys)

    # jobs by state: "jobs: 2 placed, 1 waiting"
    line = next(line for line in said.splitlines() if line.startswith("jobs: "))
    in_status = {state: int(n) for n, state in re.findall(r"(\d+) (\w+)", line)}
    in_metrics = {dict(labels)["state"]: v for (name, labels), v in got.items() if name == "modelplan_jobs"}
    assert {s: int(v) for s, v in in_metrics.items() if v} == in_status
    assert sum(in_metrics.values()) == 3

    # cards by class, as the picture draws them
    classes = {"gpu-a": "h100-80g", "gpu-b": "h100-80g", "gpu-c": "l4-24g"}
    drawn: dict[str, Counter[str]] = {}
    for row in said.splitlines():
        node = row.split(" ", 1)[0]
        if node in classes:
            glyphs = Counter(row)
            per = drawn.setdefault(classes[node], Counter())
            for state in ("reserved", "held", "busy", "free"):
                per[state] += glyphs[CARD_GLYPHS[state]]
    for cls, counted in drawn.items():
        for state in ("reserved", "held", "busy", "free"):
            assert got[("modelplan_cards", (("gpu_class", cls), ("state", state)))] == counted[state], (cls, state)
    assert drawn["h100-80g"]["busy"] == 1 and drawn["h100-80g"]["reserved"] >= 1

    assert got[("modelplan_nodes", (("gpu_class", "cpu"),))] == 1
    waiting = {labels: v for (name, labels), v in got.items() if name == "modelplan_waiting_jobs"}
    assert sum(waiting.values()) == in_status.get("waiting", 0)
    # each node's age counts from its own heartbeat: oldest first in the order they were sent, none older
    # than the pool (CLOCK_SLACK_S: the records' times are the wall clock's, the bound the monotonic one's)
    ages = [got[("modelplan_heartbeat_age_seconds", (("node", n),))] for n in [*classes, "cpu-1"]]
    assert ages == sorted(ages, reverse=True) and ages[-1] >= 0 and ages[0] <= since + CLOCK_SLACK_S, (ages, since)
    assert got[("modelplan_plan_seconds_count", ())] == 3
    assert got[("modelplan_commit_seconds_count", ())] >= 3
    assert got[("modelplan_redis_up", ())] == 1
    assert got[("modelplan_queue_depth", ())] == 0


def test_the_exposition_passes_the_prometheus_parser_and_promtool(pool: Client) -> None:
    text = exposition(pool)
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"modelplan_jobs", "modelplan_cards", "modelplan_plan_seconds", "modelplan_wake_latency_seconds"} <= names
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus); the parser's check passed")
    out = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_wake_up_is_timed_from_the_heartbeat_that_freed_the_cards(redis_url: str) -> None:
    metrics.forget()
    client = Client.from_url(redis_url)
    client.heartbeat(hb("gpu-a", gpus=1, free=0))  # its card busy outside modelplan
    client.submit(request(), "waiting")
    drain(client)
    assert client.get("waiting").state.value == "waiting"
    freed = time.monotonic()
    client.heartbeat(hb("gpu-a", gpus=1, seq=2))  # the card frees
    drain(client)
    since = time.monotonic() - freed
    assert client.get("waiting").state.value == "placed"
    metrics.flush(client.redis, client.keys)
    got = samples(exposition(client))
    assert got[("modelplan_wake_latency_seconds_count", ())] == 1
    # counted from the heartbeat that freed the card (from the one before it, seq 1, it would count the
    # submit and the first drain too), in seconds (milliseconds would be a thousand times the time passed)
    assert 0 <= got[("modelplan_wake_latency_seconds_sum", ())] <= since + CLOCK_SLACK_S, since
    client.redis.close()


def test_a_wake_up_no_heartbeat_caused_is_not_timed(redis_url: str) -> None:
    """A release frees the card: the node's last heartbeat came before the job waited, so it freed
    nothing for it, and the time since it is no wake-up latency (on a node steady for hours it would read
    hours)."""
    metrics.forget()
    client = Client.from_url(redis_url)
    client.heartbeat(hb("gpu-a", gpus=1))
    client.submit(request(), "first")
    drain(client)
    client.submit(request(), "second")
    drain(client)
    assert client.get("second").state.value == "waiting"
    client.release("first")
    drain(client)
    assert client.get("second").state.value == "placed"
    metrics.flush(client.redis, client.keys)
    got = samples(exposition(client))
    assert got.get(("modelplan_wake_latency_seconds_count", ()), 0) == 0
    client.redis.close()


def test_the_exporter_serves_over_http(pool: Client, redis_url: str) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "producer.cli", "metrics", "--redis-url", redis_url, "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as reply:
                    body = reply.read().decode()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "the exporter did not start"
                time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        assert proc.stderr is not None
        proc.stderr.close()
    got = samples(body)
    assert got[("modelplan_jobs", (("state", "placed"),))] >= 1


def test_the_dashboard_uses_only_metrics_the_exporter_serves(pool: Client) -> None:
    dashboard = json.loads((ROOT / "dashboards" / "modelplan.json").read_text())
    served = {s.name for f in text_string_to_metric_families(exposition(pool)) for s in f.samples}
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    used = {name for e in exprs for name in re.findall(r"modelplan_[a-z_]+", e)}
    assert used and used <= served, used - served
    families = {f.name for f in text_string_to_metric_families(exposition(pool))}
    panels = {u.removesuffix("_bucket").removesuffix("_total") for u in used}
    assert families <= panels, "every metric has a panel"
