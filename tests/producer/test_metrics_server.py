"""The exporter's HTTP server: it listens on loopback unless told otherwise, and a client that connects and
sends nothing, or sends slowly, costs it no thread and keeps no scrape from being answered."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Gauge

from producer.cli import main
from producer.metrics_server import MetricsServer
from tests.redis_server import free_port
from tests.worker.processes import ROOT

DEADLINE_S = 30.0
"""How long a test waits for something that should happen at once: generous, for a loaded machine."""

IDLE_CONNECTIONS = 30


def scrape(host: str, port: int, timeout: float = DEADLINE_S) -> str:
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout) as reply:
        return str(reply.read().decode())


def threads_of(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


@contextmanager
def exporter(redis_url: str, *flags: str) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """``modelplan metrics --port PORT`` in a process of its own, once it answers on 127.0.0.1."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "producer.cli", "metrics", "--redis-url", redis_url, "--port", str(port), *flags],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + DEADLINE_S
        while True:
            try:
                scrape("127.0.0.1", port, timeout=2)
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "the exporter did not start"
                time.sleep(0.1)
        yield proc, port
    finally:
        proc.terminate()
        proc.wait(timeout=DEADLINE_S)


def connects(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=DEADLINE_S).close()
    except ConnectionRefusedError:
        return False
    return True


@pytest.mark.skipif(sys.platform != "linux", reason="Linux routes every 127.x.y.z to the loopback interface")
def test_the_exporter_listens_on_loopback_unless_told(redis_url: str) -> None:
    with exporter(redis_url) as (_, port):
        # every 127.x.y.z reaches the loopback interface: a socket bound to all addresses answers on
        # 127.0.0.2 too, one bound to 127.0.0.1 only does not
        assert connects("127.0.0.1", port)
        assert not connects("127.0.0.2", port)
    with exporter(redis_url, "--addr", "0.0.0.0") as (_, port):
        assert connects("127.0.0.2", port)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts a process's threads in /proc")
def test_idle_connections_add_no_thread_and_do_not_hold_up_a_scrape(redis_url: str) -> None:
    with exporter(redis_url) as (proc, port), ExitStack() as idle:
        before = threads_of(proc.pid)
        for _ in range(IDLE_CONNECTIONS):
            idle.enter_context(socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S))
        half = idle.enter_context(socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S))
        half.sendall(b"GET /metr")  # a request that never ends
        assert "modelplan_redis_up 1.0" in scrape("127.0.0.1", port)
        assert threads_of(proc.pid) == before


# --- the server on its own, in this process -------------------------------------------------------------


@contextmanager
def served(**bounds: Any) -> Iterator[MetricsServer]:
    registry = CollectorRegistry()
    Gauge("answered", "1", registry=registry).set(1)
    with MetricsServer(registry, "127.0.0.1", 0, **bounds) as server:
        yield server


def closed_by_server(conn: socket.socket) -> bool:
    """Whether the server closed ``conn`` (read to its end within the deadline), rather than kept it."""
    conn.settimeout(DEADLINE_S)
    try:
        return conn.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def request(port: int, raw: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S) as conn:
        conn.sendall(raw)
        got = b""
        while chunk := conn.recv(4096):
            got += chunk
    return got


def test_the_server_runs_on_a_fixed_set_of_threads_and_leaves_none_behind() -> None:
    before = set(threading.enumerate())
    with served(handlers=3) as server, ExitStack() as idle:
        started = set(threading.enumerate()) - before
        assert sorted(t.name for t in started) == ["metrics-accept", *(f"metrics-handler-{i}" for i in range(3))]
        for _ in range(IDLE_CONNECTIONS):
            idle.enter_context(socket.create_connection(server.address, timeout=DEADLINE_S))
        assert "answered 1.0" in scrape(*server.address)
        assert set(threading.enumerate()) - before == started
    assert not any(t.is_alive() for t in started)


def test_a_connection_that_sends_nothing_is_closed_past_its_deadline() -> None:
    with served(head_deadline=0.2) as server:
        with socket.create_connection(server.address, timeout=DEADLINE_S) as idle:
            assert closed_by_server(idle)
        with socket.create_connection(server.address, timeout=DEADLINE_S) as slow:
            slow.sendall(b"GET /metrics HTTP/1.1\r\n")  # and the rest never
            assert closed_by_server(slow)


def test_a_slow_request_does_not_hold_the_only_handler() -> None:
    with served(handlers=1) as server, socket.create_connection(server.address, timeout=DEADLINE_S) as slow:
        slow.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        assert "answered 1.0" in scrape(*server.address)
        slow.sendall(b"\r\n")  # its request ends: it is answered too
        slow.settimeout(DEADLINE_S)
        assert slow.recv(4096).startswith(b"HTTP/1.1 200 OK\r\n")


def test_past_the_cap_the_oldest_waiting_connection_is_closed() -> None:
    # no deadline within the test: only the cap closes a connection here
    with served(max_pending=2, head_deadline=3600) as server, ExitStack() as stack:
        first, second = (stack.enter_context(socket.create_connection(server.address)) for _ in range(2))
        assert "answered 1.0" in scrape(*server.address)  # the scrape took the first's place
        assert closed_by_server(first)
        third, _ = (stack.enter_context(socket.create_connection(server.address)) for _ in range(2))
        assert closed_by_server(second)
        third.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        assert third.recv(4096).startswith(b"HTTP/1.1 200 OK\r\n")


def test_an_over_long_request_is_closed_unanswered() -> None:
    with served() as server, socket.create_connection(server.address) as conn:
        conn.sendall(b"GET /metrics HTTP/1.1\r\nX: " + b"x" * 10_000)
        assert closed_by_server(conn)


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", b"200 OK"),
        (b"GET /?name[]=answered HTTP/1.1\r\n\r\n", b"200 OK"),
        (b"GET /metrics HTTP/1.0\n\n", b"200 OK"),
        (b"HEAD /metrics HTTP/1.1\r\n\r\n", b"200 OK"),
        (b"GET /other HTTP/1.1\r\n\r\n", b"404 Not Found"),
        (b"POST /metrics HTTP/1.1\r\n\r\n", b"405 Method Not Allowed"),
        (b"hello\r\n\r\n", b"400 Bad Request"),
    ],
)
def test_answers(raw: bytes, status: bytes) -> None:
    with served() as server:
        got = request(server.address[1], raw)
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 " + status + b"\r\n")
    assert (b"answered 1.0" in body) == (status == b"200 OK" and not raw.startswith(b"HEAD"))


def test_the_openmetrics_format_when_asked_for() -> None:
    with served() as server:
        got = request(server.address[1], b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text\r\n\r\n")
    assert b"Content-Type: application/openmetrics-text" in got and got.endswith(b"# EOF\n")


@pytest.mark.parametrize("addr", ["203.0.113.1", "no-such-host.invalid"])
def test_an_address_it_cannot_listen_on_is_one_line(addr: str, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    assert main(["metrics", "--redis-url", url, "--port", str(free_port()), "--addr", addr]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"modelplan metrics: arguments: --addr/--port: cannot listen on {addr} port ")
    assert err.count("\n") == 1


class _Stopped(Exception):
    """Ends ``modelplan metrics --port``'s wait, in place of an interrupt."""


def test_the_exporter_says_where_it_serves(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``modelplan metrics --port`` says on one line, on standard error, the URL it serves (port 0: the one
    the system picked), and prints nothing on standard output."""
    seen: list[str] = []

    def stop(_: float) -> None:
        seen.append(capsys.readouterr().err)
        raise _Stopped

    monkeypatch.setattr(time, "sleep", stop)  # the exporter's wait, once it has said where it serves
    with pytest.raises(_Stopped):
        main(["metrics", "--redis-url", redis_url, "--port", "0"])
    lines = seen[0].splitlines()
    assert len(lines) == 1 and lines[0].startswith("serving metrics on http://127.0.0.1:"), seen
    port = int(lines[0].removeprefix("serving metrics on http://127.0.0.1:").removesuffix("/metrics"))
    assert port > 0 and lines[0].endswith("/metrics")
    assert capsys.readouterr().out == ""
