"""Worker processes for tests where concurrency or a crash is the point."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class WorkerProcess:
    """``modelplan worker`` in its own process, logging to a file."""

    def __init__(
        self,
        redis_url: str,
        log_dir: Path,
        name: str,
        env: dict[str, str] | None = None,
        launcher: Sequence[str] = ("-m", "producer.cli"),
    ) -> None:
        """``launcher``: what runs the CLI, for a test's own wrapper around it."""
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, *launcher, "worker", "--redis-url", redis_url],
            cwd=ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )

    def kill(self) -> None:
        """SIGKILL: no cleanup of any kind."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._log.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
