"""What the ``run`` start hook keeps on the node's disk: a record per hold of the engine it started (so that
an agent started again adopts it rather than starting a second copy), the engine's log, and how a process
is told apart from a later one that reuses its pid.

The state directory holds ``holds/{hold_id}.json`` (one ``EngineRecord`` each) and ``logs/{hold_id}.log``
(the engine's standard output and standard error)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from worker import logs

log = logs.get_logger("modelplan.agent")

STATE_SUBDIR = ("modelplan", "agent")


def default_state_dir(environ: dict[str, str] | None = None) -> Path:
    """``$XDG_STATE_HOME/modelplan/agent``, else ``~/.local/state/modelplan/agent``."""
    env = os.environ if environ is None else environ
    base = Path(env["XDG_STATE_HOME"]) if env.get("XDG_STATE_HOME") else Path.home() / ".local" / "state"
    return base.joinpath(*STATE_SUBDIR)


@dataclass(frozen=True, slots=True)
class ProcStat:
    """A process as ``/proc/PID/stat`` says: its state letter, process group and start time (clock ticks
    after boot, field 22), which together with the pid names one process for as long as the node is up."""

    state: str
    pgid: int
    start_time: int


def proc_stat(pid: int, proc: Path = Path("/proc")) -> ProcStat | None:
    """The process ``pid`` now, or None when there is none (a zombie is reported, state ``Z``)."""
    try:
        text = (proc / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # the command name (field 2) is in parentheses and may hold spaces or ")": split after the last ")"
    fields = text[text.rfind(")") + 2 :].split()
    try:
        return ProcStat(state=fields[0], pgid=int(fields[2]), start_time=int(fields[19]))
    except (IndexError, ValueError):
        return None


@dataclass
class EngineRecord:
    """One hold's engine as started on this node. ``boot_id`` and ``start_time`` (with ``pid``) tell it
    from a process that took its pid later; ``stopping`` is set once it was told to stop; ``ended`` says
    why it is gone while its hold was still on the node ("" while it runs)."""

    hold_id: str
    pid: int
    start_time: int
    boot_id: str
    engine: str
    command: list[str]
    cards: list[int]
    log: str
    port: int
    ready: bool = False
    stopping: bool = False
    ended: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    served: bool = False
    """Whether it ever answered its health: an engine that dies before it did failed to start."""
    model: str = ""
    """The model name it serves, as its ``/v1/models`` says."""
    restarts: int = 0
    """How many times it was started again after it died while serving."""
    out_of_memory: str = ""
    """The line in which it said it ran out of memory as it started ("" when it did not)."""
    version: str = ""
    """The release its log printed ("" when it did not say)."""
    api_key: str = ""
    """The API key it wants of its callers (its hold's, ``worker.apikeys``): given as ``--api-key`` when it
    is started, kept out of ``command`` and the logs; the record's file is its owner's alone to read."""

    def argv(self) -> list[str]:
        """The command line it is started with: ``command``, and its API key."""
        return [*self.command, "--api-key", self.api_key] if self.api_key else list(self.command)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> EngineRecord:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return cls(**data)


class Store:
    """The records and logs under one state directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.holds = root / "holds"
        self.logs = root / "logs"

    def ensure(self) -> None:
        self.holds.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)

    def record_path(self, hold_id: str) -> Path:
        return self.holds / f"{hold_id}.json"

    def log_path(self, hold_id: str) -> Path:
        return self.logs / f"{hold_id}.log"

    def save(self, record: EngineRecord) -> None:
        """Write ``record`` whole or not at all (a temporary file renamed over the old one)."""
        self.ensure()
        path = self.record_path(record.hold_id)
        tmp = path.with_suffix(".json.tmp")
        # its owner's alone: it holds the engine's API key
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(record.to_json() + "\n")
        os.replace(tmp, path)

    def remove(self, hold_id: str) -> None:
        self.record_path(hold_id).unlink(missing_ok=True)

    def load(self) -> list[EngineRecord]:
        """Every record in the directory; one that cannot be read is logged (``engine_record_unreadable``)
        and left where it is."""
        if not self.holds.is_dir():
            return []
        records = []
        for path in sorted(self.holds.glob("*.json")):
            try:
                records.append(EngineRecord.from_json(path.read_text()))
            except (OSError, ValueError, TypeError) as e:
                log.warning("engine_record_unreadable", path=str(path), error=str(e))
        return records


def read_log(path: Path, limit: int = 4 << 20) -> str:
    """The first ``limit`` bytes of an engine's log (its start-up lines say what it allocated), as text."""
    try:
        with path.open("rb") as f:
            return f.read(limit).decode(errors="replace")
    except OSError:
        return ""


def read_tail(path: Path, limit: int = 64 << 10) -> str:
    """The last ``limit`` bytes of an engine's log (its last lines say why it stopped), as text."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - limit))
            return f.read(limit).decode(errors="replace")
    except OSError:
        return ""
