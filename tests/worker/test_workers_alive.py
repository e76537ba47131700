"""Whether any worker is running, as ``modelplan status``, ``modelplan job`` and the metrics tell it: each
worker keeps a registration of its own under the prefix (``worker:{name}``, with a TTL it renews, named in
``workers``), gone when it stops or when it stops renewing it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from producer import Client
from producer.cli import main
from producer.metrics import exposition
from tests.worker.helpers import request
from tests.worker.processes import WorkerProcess
from worker import constants as C
from worker.runner import PlanningWorker, planning_worker

NONE = "no worker is running: start one with `modelplan worker`"


def url_of(client: Client) -> list[str]:
    kw = client.redis.get_connection_kwargs()
    return ["--redis-url", f"redis://{kw['host']}:{kw['port']}/{kw.get('db', 0)}"]


def running(client: Client) -> PlanningWorker:
    worker = planning_worker(client.store)
    worker.heartbeat()
    return worker


def alive_metric(client: Client) -> float:
    [value] = [
        s.value
        for f in text_string_to_metric_families(exposition(client))
        for s in f.samples
        if s.name == "modelplan_workers_alive"
    ]
    return value


def test_a_worker_counts_while_it_renews_its_registration(client: Client, r: redis.Redis) -> None:
    assert client.workers_alive() == 0
    worker = running(client)
    assert client.workers_alive() == 1
    key = client.keys.worker(worker.name)
    assert 0 < r.pttl(key) <= C.WORKER_TTL_MS
    other = running(client)
    assert client.workers_alive() == 2
    r.delete(key)  # as its TTL lapses when the process is killed and renews it no more
    assert client.workers_alive() == 1
    other.teardown()  # a worker that stops says so at once
    assert client.workers_alive() == 0
    assert not r.exists(client.keys.worker(other.name))


def test_a_name_in_the_set_that_is_no_id_counts_for_nothing(client: Client, r: redis.Redis) -> None:
    r.sadd(client.keys.workers, "not an id", "gone-1")
    assert client.workers_alive() == 0


def test_status_job_and_metrics_say_when_no_worker_runs(client: Client, capsys: pytest.CaptureFixture[str]) -> None:
    job = client.submit(request(), job_id="j1")
    assert main(["status", *url_of(client)]) == 0
    assert NONE in capsys.readouterr().out
    assert main(["job", *url_of(client), job]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("job j1: queued") and first.endswith(f"; {NONE}"), first
    assert alive_metric(client) == 0

    worker = running(client)
    assert main(["status", *url_of(client)]) == 0
    out = capsys.readouterr().out
    assert "1 worker alive" in out.splitlines() and NONE not in out
    assert main(["job", *url_of(client), job]) == 0
    assert NONE not in capsys.readouterr().out
    assert alive_metric(client) == 1
    worker.teardown()


def test_a_worker_process_is_counted_while_it_runs(redis_url: str, tmp_path: Path) -> None:
    """``modelplan worker`` registers as it starts its loop, and is no longer counted once stopped."""
    client = Client.from_url(redis_url)
    worker = WorkerProcess(redis_url, tmp_path, "w1")
    try:
        deadline = time.monotonic() + 30
        while client.workers_alive() != 1:
            assert worker.proc.poll() is None and time.monotonic() < deadline, worker.log_path.read_text()
            time.sleep(0.05)
    finally:
        worker.stop()
    assert client.workers_alive() == 0
    client.redis.close()
