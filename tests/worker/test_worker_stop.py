"""A worker stops as soon as it is told to (SIGTERM) or its burst is done, whatever order its stop and the
reader of its command channel take: RQ's reader, when it took the reply to UNSUBSCRIBE before its stop
flag was cleared, waited a minute for a subscription, and the worker with it (``worker/commands.py``).

The limit below bounds a hang, not speed: a stop is a few round trips to a local Redis."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis
from rq.command import send_command
from structlog.testing import capture_logs

from producer import Client
from tests.redis_server import RedisServer
from tests.worker.processes import ROOT
from tests.worker.stopping import ReaderFirst, kinds
from worker import commands
from worker.config import connect
from worker.runner import PlanningWorker, planning_worker

STOP_S = 2.0
"""How long a stopped worker may take to be gone."""
START_S = 60.0
"""How long the child below may take to start a worker and say so (it imports modelplan first)."""
COUNT = 100
"""Workers the child starts and stops, a quarter of each kind (``tests.worker.stopping.kinds``)."""


def in_a_thread(worker: PlanningWorker, burst: bool = True) -> threading.Thread:
    thread = threading.Thread(target=worker.work, kwargs={"burst": burst, "logging_level": "WARNING"}, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def no_signal_handlers(monkeypatch: pytest.MonkeyPatch) -> None:
    """RQ installs its signal handlers from ``work``, which only the main thread may: here it runs on
    another."""
    monkeypatch.setattr(signal, "signal", lambda *_: None)


@pytest.mark.usefixtures("no_signal_handlers")
def test_a_worker_stops_at_once_though_its_reader_takes_the_reply_to_unsubscribe_first(client: Client) -> None:
    worker = planning_worker(client.store, ReaderFirst)
    assert isinstance(worker, ReaderFirst)
    thread = in_a_thread(worker)
    thread.join(STOP_S)
    assert not thread.is_alive(), f"a burst on an empty queue is still stopping after {STOP_S} s"
    assert worker.reader is not None
    assert not worker.reader.is_alive(), "the reader of the command channel outlived its worker"
    assert worker.pubsub is not None and worker.pubsub.connection is None  # its connection back in the pool


@pytest.mark.usefixtures("no_signal_handlers")
def test_a_command_sent_to_a_worker_reaches_it(client: Client) -> None:
    heard: list[dict[str, object]] = []
    listening, told = threading.Event(), threading.Event()

    class Listening(PlanningWorker):
        def handle_payload(self, message: dict[str, object]) -> None:
            heard.append(message)
            told.set()

        def dequeue_job_and_maintain_ttl(self, timeout: int | None, max_idle_time: int | None = None) -> None:
            listening.set()
            told.wait(10)
            return None  # nothing to do: the burst ends

    worker = planning_worker(client.store, Listening)
    thread = in_a_thread(worker)
    assert listening.wait(10)
    send_command(client.redis, worker.name, "kill-horse")
    thread.join(10)
    assert not thread.is_alive()
    assert [(m["channel"], json.loads(m["data"])) for m in heard] == [  # type: ignore[arg-type]
        (worker.pubsub_channel_name.encode(), {"command": "kill-horse"})
    ]


def test_a_reader_stopped_while_redis_is_away_ends_at_once() -> None:
    server = RedisServer()
    server.start()
    connection = connect(server.url)
    try:
        with capture_logs() as logged:
            listener = commands.listen(connection, "modelplan:rq:pubsub:away", lambda _: None, "away")
            server.stop()
            deadline = time.monotonic() + START_S
            while not any(e["event"] == "commands_failed" for e in logged):  # it pauses before it tries again
                assert time.monotonic() < deadline, "the reader never found Redis away"
                time.sleep(0.01)
            listener.stop()
            listener.join(STOP_S)
        assert not listener.is_alive(), f"a reader stopped while Redis is away still runs after {STOP_S} s"
        assert [e["event"] for e in logged] == ["commands_failed"]  # said once
    finally:
        connection.close()
        server.cleanup()


class _Lines:
    """The lines a process writes to a pipe, each waited for up to a limit."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        self.fd = proc.stdout.fileno()
        self.buffer = b""

    def next(self, within: float) -> str | None:
        deadline = time.monotonic() + within
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode()


def test_a_hundred_workers_stopped_each_stop_within_the_limit(redis_url: str, r: redis.Redis, tmp_path: Path) -> None:
    """A process starts and stops a hundred workers in a row: half end a burst on an empty queue, half
    are stopped by SIGTERM while they wait for a job; in half of each the reader takes the reply to
    UNSUBSCRIBE before the stop goes on."""
    errors = tmp_path / "stopping.err"
    with errors.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.worker.stopping", redis_url, str(COUNT)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=err,
        )
    lines = _Lines(proc)

    def expect(start: str, within: float, what: str) -> str:
        deadline = time.monotonic() + within
        while not (got := lines.next(max(0.0, deadline - time.monotonic())) or "").startswith(start):
            if not got:
                proc.send_signal(signal.SIGUSR1)  # the child writes every thread's stack to its stderr
                _wait_for_stacks(errors)
                proc.kill()
                proc.wait()
                pytest.fail(f"{what}: no '{start}' within {within} s\n{errors.read_text()[-6000:]}")
        return got

    try:
        for number in range(COUNT):
            burst, first = kinds(number)
            what = f"worker {number} ({'a burst' if burst else 'SIGTERM'}, {'reader' if first else 'stop'} first)"
            if burst:
                expect(f"stopping {number}", START_S, what)
            else:
                client_id = int(expect(f"waiting {number} ", START_S, what).split()[-1])
                blocked(r, client_id)
                proc.send_signal(signal.SIGTERM)
            expect(f"stopped {number}", STOP_S, what)
        assert proc.wait(START_S) == 0, errors.read_text()[-6000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def blocked(r: redis.Redis, client_id: int) -> None:
    """Wait until the connection ``client_id`` is blocked in Redis: its worker waits for a job."""
    deadline = time.monotonic() + START_S
    while not any("b" in c["flags"] for c in r.client_list(client_id=[client_id])):
        assert time.monotonic() < deadline, f"connection {client_id} never waited for a job"
        time.sleep(0.002)


def _wait_for_stacks(path: Path) -> None:
    deadline = time.monotonic() + 5
    while "most recent call first" not in path.read_text(errors="replace") and time.monotonic() < deadline:
        time.sleep(0.05)
