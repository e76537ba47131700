"""A throwaway redis-server on a free loopback port, for tests that need a real one."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import ClassVar, NoReturn

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

HOST = "127.0.0.1"
LAST_LINES = 8
"""How many of a failed server's last log lines its error repeats."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class RedisServer:
    """Starts ``redis-server`` in its own folder; ``restart`` keeps the folder (and so its AOF), ``cleanup``
    stops it and removes the folder. Each one is ``live`` from its making to its cleanup (a test that
    forgets the cleanup is told so: tests/conftest.py)."""

    live: ClassVar[set[RedisServer]] = set()
    wait_s: float = 10
    """How long ``start`` waits for the new server's first answer."""

    def __init__(self, *extra: str) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed: run scripts/setup")
        self.binary = binary
        self.dir = Path(tempfile.mkdtemp(prefix="modelplan-redis-"))
        self.port = free_port()
        self.extra = list(extra)
        self.proc: subprocess.Popen[bytes] | None = None
        RedisServer.live.add(self)

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    def start(self) -> None:
        """Starts it and waits for its answer to a PING, for ``wait_s`` seconds at most. A start that fails
        stops the process, removes the folder and says why: how the last connection failed, or the exit
        code, and the last lines of its log and of what it printed."""
        args = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            HOST,
            "--dir",
            str(self.dir),
            "--save",
            "",
            "--appendonly",
            "no",
            "--logfile",
            str(self.dir / "redis.log"),
            # what ``modelplan setup-redis`` turns on: the keyspace notifications the workers' intake hears
            "--notify-keyspace-events",
            "K$x",
            *self.extra,
        ]
        with (self.dir / "redis.out").open("wb") as out:  # what it prints before it has a log: a bad option
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        # one try per ping: the loop below is the retry
        client = redis.Redis(host=HOST, port=self.port, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
        deadline = time.monotonic() + self.wait_s
        try:
            while True:
                try:
                    if client.ping():
                        return
                except (redis.ConnectionError, redis.BusyLoadingError) as e:
                    if self.proc.poll() is not None:
                        self._failed(f"redis-server exited with code {self.proc.returncode}")
                    if time.monotonic() >= deadline:
                        self._failed(
                            f"redis-server (pid {self.proc.pid}) runs, but did not answer a PING on "
                            f"{HOST}:{self.port} in {self.wait_s:g} s: {e}"
                        )
                    time.sleep(0.02)
        finally:
            client.close()

    def _failed(self, why: str) -> NoReturn:
        said = [why]
        for name in ("redis.log", "redis.out"):
            path = self.dir / name
            lines = path.read_text(errors="replace").splitlines()[-LAST_LINES:] if path.exists() else []
            if lines:
                said.append(f"the last lines of its {name}:")
                said.extend(f"  {line}" for line in lines)
        self.cleanup()
        raise RuntimeError("\n".join(said)) from None

    def stop(self, kill: bool = False) -> None:
        if self.proc is None:
            return
        if kill:
            self.proc.kill()
        else:
            self.proc.terminate()
        self.proc.wait(timeout=10)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def cleanup(self) -> None:
        self.stop(kill=True)
        shutil.rmtree(self.dir, ignore_errors=True)
        RedisServer.live.discard(self)
