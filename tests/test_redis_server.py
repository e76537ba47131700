"""The tests' throwaway ``redis-server`` (tests/redis_server.py): a start that fails says why, and leaves
neither the process nor its folder behind."""

from __future__ import annotations

import errno
import subprocess
import time

import pytest
from redis.connection import Connection

from tests.redis_server import RedisServer


def test_a_server_that_cannot_be_reached_is_stopped_its_folder_removed_and_the_reason_said(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The loopback interface down: redis-server starts and logs that it is ready, but no connection to
    127.0.0.1 gets through. Every connection fails as it would then, once the server's log says ready."""
    server = RedisServer()
    server.wait_s = 0  # one try: the failure below is certain
    started: list[subprocess.Popen[bytes]] = []

    def unreachable(self: Connection) -> object:
        assert server.proc is not None
        started.append(server.proc)
        deadline = time.monotonic() + 30
        log = server.dir / "redis.log"
        while "Ready to accept connections" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline, "redis-server never said it was ready"
            time.sleep(0.02)
        raise OSError(errno.ENETUNREACH, "Network is unreachable")

    monkeypatch.setattr(Connection, "_connect", unreachable)
    with pytest.raises(RuntimeError) as failed:
        server.start()
    said = str(failed.value)
    assert f"127.0.0.1:{server.port}" in said
    assert "Network is unreachable" in said  # the reason the connection failed
    assert "Ready to accept connections" in said  # the log's last lines
    assert started and started[0].poll() is not None  # the process is gone
    assert server.proc is None
    assert not server.dir.exists()


def test_a_server_that_exits_at_once_says_what_it_printed_and_leaves_no_folder() -> None:
    server = RedisServer("--no-such-directive", "yes")
    with pytest.raises(RuntimeError) as failed:
        server.start()
    said = str(failed.value)
    assert "exited with code 1" in said
    assert "Bad directive" in said  # what it printed before it had a log
    assert server.proc is None
    assert not server.dir.exists()
