"""What the agent's tests share."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from producer import standin as standin_module
from producer.agent.engine_state import proc_stat

STANDIN = str(Path(standin_module.__file__).resolve())
"""The shipped stand-in engine, run by path (``python -P``) so that its processes can be found by it."""


@pytest.fixture
def logging_restored() -> Iterator[None]:
    """structlog's configuration as it was before the test (the agent's command configures it)."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


def standins(tag: Path) -> list[int]:
    """The stand-ins tagged ``tag`` that run (zombies left out)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        stat = proc_stat(int(entry.name))
        if STANDIN.encode() in cmdline and str(tag).encode() in cmdline and stat is not None and stat.state != "Z":
            found.append(int(entry.name))
    return found


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[list[int]]:
    """Pids to make sure of at the end, with every stand-in tagged with the test's folder: any still
    running is killed, and waited for."""
    pids: list[int] = []
    yield pids
    for pid in {*pids, *standins(tmp_path)}:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
