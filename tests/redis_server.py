"""A throwaway redis-server on a free loopback port, for tests that need a real one."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """Starts ``redis-server`` in its own folder; ``restart`` keeps the folder (and so its AOF)."""

    def __init__(self, *extra: str) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed: run scripts/setup")
        self.binary = binary
        self.dir = Path(tempfile.mkdtemp(prefix="modelplan-redis-"))
        self.port = free_port()
        self.extra = list(extra)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        args = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.dir),
            "--save",
            "",
            "--appendonly",
            "no",
            "--logfile",
            str(self.dir / "redis.log"),
            *self.extra,
        ]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        deadline = time.monotonic() + 10
        while True:
            try:
                if client.ping():
                    break
            except (redis.ConnectionError, redis.BusyLoadingError):
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"redis-server did not start; see {self.dir / 'redis.log'}") from None
                time.sleep(0.02)
        client.close()

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
