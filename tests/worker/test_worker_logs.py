"""A worker's output is JSON lines only: its own events, RQ's, and what it says while Redis is away."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import redis

from tests.redis_server import RedisServer
from tests.worker.processes import WorkerProcess
from worker import constants as C
from worker import logs, runner


def json_lines(path: Path) -> list[dict[str, object]]:
    lines = path.read_text().splitlines()
    assert lines, "the worker wrote nothing"
    out = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError as e:
            raise AssertionError(f"not a JSON line: {line!r}") from e
        assert isinstance(event, dict), line
        out.append(event)
    return out


def test_a_worker_through_a_redis_outage_writes_json_lines_only(tmp_path: Path) -> None:
    server = RedisServer()
    server.start()
    worker = WorkerProcess(server.url, tmp_path, "w")
    try:
        deadline = time.monotonic() + 20
        while '"worker_started"' not in worker.log_path.read_text():
            assert time.monotonic() < deadline, worker.log_path.read_text()
            time.sleep(0.1)
        server.stop()
        time.sleep(7)  # past three maintenance intervals and RQ's own retries
        server.start()
        time.sleep(4)
    finally:
        worker.stop()
        server.cleanup()
    events = json_lines(worker.log_path)
    names = [e["event"] for e in events]
    assert names[0] == "worker_started"
    # each reader says once that Redis is away, not once per try and with no traceback
    assert names.count("maintenance_failed") == 1, names
    assert names.count("requests_unavailable") == 1, names
    assert names.count("commands_failed") == 1, names
    assert not any("Traceback" in json.dumps(e) for e in events if e["event"] == "maintenance_failed")
    assert "library_log" in names, "RQ's own lines (its retries) come through as JSON too"


def test_a_worker_with_no_redis_says_so_in_json_and_never_that_it_started(tmp_path: Path) -> None:
    server = RedisServer()  # a free port with nothing on it
    try:
        worker = WorkerProcess(server.url, tmp_path, "w")
        assert worker.proc.wait(timeout=30) == 2
        worker.stop()
    finally:
        server.cleanup()  # its folder
    events = json_lines(worker.log_path)
    assert [e["event"] for e in events] == ["worker_failed"]


def test_rqs_loop_is_started_again_when_it_gives_up_on_redis(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """RQ quits its loop on an error it does not handle (a failover while it records a job's end); the
    worker starts it again, under a new name, and stops for good only when told to."""
    started: list[str] = []

    class GivesUpOnce:
        def __init__(self, name: str) -> None:
            self.name = name
            self._shutdown_requested_date: object = None

        def work(self, **_: object) -> bool:
            started.append(self.name)
            if len(started) == 1:
                raise redis.ConnectionError("Error 111 connecting: the master is gone")
            self._shutdown_requested_date = "now"  # as SIGTERM leaves it
            return True

    monkeypatch.setattr(runner, "planning_worker", lambda store, name: GivesUpOnce(name))
    monkeypatch.setattr(C, "RQ_RESTART_S", 0.0)
    monkeypatch.setattr(logs, "route_to_structlog", lambda name: None)
    runner.run(redis_url, "modelplan")
    assert len(started) == 2 and started[0] != started[1]


def test_rqs_loop_is_started_again_when_redis_is_away_as_it_is_made(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RQ's worker names itself to Redis as it is made: Redis going away just as a worker starts, or still
    away when RQ's loop is started again, is a loop to start again, not the worker's end."""
    made: list[str] = []

    class Stops:
        def __init__(self) -> None:
            self._shutdown_requested_date = "now"  # as SIGTERM leaves it

        def work(self, **_: object) -> bool:
            return True

    def planning_worker(store: object, name: str) -> Stops:
        made.append(name)
        if len(made) < 3:
            raise redis.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
        return Stops()

    monkeypatch.setattr(runner, "planning_worker", planning_worker)
    monkeypatch.setattr(C, "RQ_RESTART_S", 0.0)
    monkeypatch.setattr(logs, "route_to_structlog", lambda name: None)
    runner.run(redis_url, "modelplan")
    assert len(made) == 3


def test_log_lines_keep_non_ascii_text_as_written() -> None:
    """A replica "on 1 × h100-80g" reads so in the worker's JSON lines, not as ``\\u00d7``."""
    import io

    import structlog

    from worker.config import configure_logging

    out = io.StringIO()
    configure_logging("INFO", out)
    try:
        logs.get_logger("modelplan.worker").info("placed", where="1 × h100-80g", model="Qwen–7B")
    finally:
        structlog.reset_defaults()
    line = out.getvalue().strip()
    assert "1 × h100-80g" in line and "Qwen–7B" in line, line
    assert json.loads(line)["where"] == "1 × h100-80g"
