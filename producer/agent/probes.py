"""The cards' readings: NVML (the ``nvidia-ml-py`` package, imported only when used), else nvidia-smi, and
the pure functions that turn either into cards, or into what each process holds on each card;
``SystemReader`` reads this machine (and, for measuring an engine, its processes in ``/proc``), and the
boot id."""

from __future__ import annotations

import csv
import importlib
import io
import re
import subprocess
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

from planner.pool import ID_REGEX
from producer import constants as K
from producer.agent.errors import CardReadingError
from producer.agent.labels import Card
from producer.agent.memory import (
    HostMemory,
    ProcessMemory,
    cgroup_memory,
    memory_from_meminfo,
    memory_within,
    parent_from_stat,
    process_memory_from_status,
)
from worker import logs

log = logs.get_logger("modelplan.agent")


def _text(value: str | bytes) -> str:
    # pynvml before 11.5 returns bytes for names and UUIDs
    return value.decode() if isinstance(value, bytes) else str(value)


def cards_from_nvml(readings: Iterable[Mapping[str, Any]]) -> list[Card]:
    """Cards from NVML readings, one mapping per card with ``index``, ``name``, ``uuid``, ``total`` and
    ``used`` bytes, and ``procs`` (the compute processes), as ``nvml_readings`` and the recorded
    ``nvml_*.json`` files give them."""
    cards = [
        Card(
            index=int(r["index"]),
            name=str(r["name"]),
            uuid=str(r["uuid"]),
            total_mib=int(r["total"]) // K.MIB,
            used_mib=int(r["used"]) // K.MIB,
            processes=len(r["procs"]),
        )
        for r in readings
    ]
    return sorted(cards, key=lambda c: c.index)


def _smi_rows(text: str, columns: int, source: str) -> list[list[str]]:
    rows = []
    for row in csv.reader(io.StringIO(text), skipinitialspace=True):
        if not row or not "".join(row).strip():
            continue
        if len(row) != columns:
            raise CardReadingError(source, f"expected {columns} columns, got {len(row)}: {', '.join(row)!r}")
        rows.append([cell.strip() for cell in row])
    return rows


def _mib(cell: str) -> int | None:
    """A MiB figure; None for ``[N/A]`` and the like."""
    return int(cell) if cell.isdigit() else None


def cards_from_smi(cards_csv: str, apps_csv: str) -> list[Card]:
    """Cards from ``nvidia-smi --query-gpu=index,name,uuid,memory.total,memory.used,memory.free,
    utilization.gpu`` and ``--query-compute-apps=gpu_uuid,pid,used_memory`` (both ``csv,noheader,nounits``).
    A card whose used memory reads ``[N/A]`` counts as busy."""
    procs = Counter(row[0] for row in _smi_rows(apps_csv, 3, "nvidia-smi --query-compute-apps"))
    cards = []
    for index, name, card_uuid, total, used, _free, _util in _smi_rows(cards_csv, 7, "nvidia-smi --query-gpu"):
        total_mib = _mib(total)
        if not index.isdigit() or total_mib is None:
            raise CardReadingError("nvidia-smi --query-gpu", f"card {index!r} has no index or memory.total")
        used_mib = _mib(used)
        cards.append(
            Card(
                index=int(index),
                name=name,
                uuid=card_uuid,
                total_mib=total_mib,
                used_mib=total_mib if used_mib is None else used_mib,
                processes=procs[card_uuid],
            )
        )
    return sorted(cards, key=lambda c: c.index)


@dataclass(frozen=True, slots=True)
class CardUse:
    """One card as the engines on it use it: its index, its memory in bytes, and each compute process on
    it with the bytes it holds there (None where the driver cannot tell: NVML's ``usedGpuMemory`` None,
    nvidia-smi's ``[N/A]``, as in some containers)."""

    index: int
    total_bytes: int
    procs: tuple[tuple[int, int | None], ...]


def card_use_from_nvml(readings: Iterable[Mapping[str, Any]]) -> list[CardUse]:
    """What each process holds on each card, from NVML readings (``nvmlDeviceGetComputeRunningProcesses``:
    ``usedGpuMemory`` per pid, in bytes) as ``nvml_readings`` and the recorded ``nvml_*.json`` give them."""
    use = [
        CardUse(
            index=int(r["index"]),
            total_bytes=int(r["total"]),
            procs=tuple((int(p["pid"]), None if p["used"] is None else int(p["used"])) for p in r["procs"]),
        )
        for r in readings
    ]
    return sorted(use, key=lambda c: c.index)


def card_use_from_smi(cards_csv: str, apps_csv: str) -> list[CardUse]:
    """What each process holds on each card, from ``nvidia-smi --query-compute-apps=gpu_uuid,pid,
    used_memory`` (MiB) mapped to card indices by the uuids of ``--query-gpu`` (both ``csv,noheader,
    nounits``, as the agent asks them). A process on a card the list does not name is left out."""
    procs: dict[str, list[tuple[int, int | None]]] = {}
    for card_uuid, pid, used in _smi_rows(apps_csv, 3, "nvidia-smi --query-compute-apps"):
        if not pid.isdigit():
            raise CardReadingError("nvidia-smi --query-compute-apps", f"pid {pid!r} is not a number")
        mib = _mib(used)
        procs.setdefault(card_uuid, []).append((int(pid), None if mib is None else mib * K.MIB))
    use = []
    for index, _name, card_uuid, total, _used, _free, _util in _smi_rows(cards_csv, 7, "nvidia-smi --query-gpu"):
        total_mib = _mib(total)
        if not index.isdigit() or total_mib is None:
            raise CardReadingError("nvidia-smi --query-gpu", f"card {index!r} has no index or memory.total")
        use.append(CardUse(int(index), total_mib * K.MIB, tuple(procs.get(card_uuid, ()))))
    return sorted(use, key=lambda c: c.index)


class Nvml(Protocol):
    """What the agent uses of ``pynvml`` (the ``nvidia-ml-py`` package)."""

    NVMLError: type[Exception]

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetName(self, handle: Any) -> str | bytes: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str | bytes: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> Sequence[Any]: ...
    def nvmlSystemGetDriverVersion(self) -> str | bytes: ...


def nvml_readings(nvml: Nvml) -> list[dict[str, Any]]:
    """Each card as NVML reports it, in the form ``cards_from_nvml`` reads (and the recorded
    ``nvml_*.json`` files hold). Raises ``nvml.NVMLError`` when NVML cannot be started or read."""
    nvml.nvmlInit()
    try:
        out = []
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            mem = nvml.nvmlDeviceGetMemoryInfo(handle)
            procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            out.append(
                {
                    "index": i,
                    "name": _text(nvml.nvmlDeviceGetName(handle)),
                    "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
                    "total": int(mem.total),
                    "used": int(mem.used),
                    "free": int(mem.free),
                    # usedGpuMemory is None where the driver cannot tell (some containers)
                    "procs": [
                        {"pid": int(p.pid), "used": None if p.usedGpuMemory is None else int(p.usedGpuMemory)}
                        for p in procs
                    ],
                }
            )
        return out
    finally:
        nvml.nvmlShutdown()


def load_nvml() -> Nvml | None:
    """The ``pynvml`` module, or None when ``nvidia-ml-py`` is not installed."""
    try:
        module: Any = importlib.import_module("pynvml")
    except ImportError:
        return None
    return cast(Nvml, module)


def run_smi(args: Sequence[str]) -> str | None:
    """nvidia-smi's standard output for ``args``; None when it is missing, fails or hangs."""
    try:
        done = subprocess.run([K.SMI, *args], capture_output=True, text=True, timeout=K.SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        log.debug("nvidia_smi_unavailable", error=str(e))
        return None
    if done.returncode != 0:
        log.debug("nvidia_smi_failed", returncode=done.returncode, stderr=done.stderr.strip()[:200])
        return None
    return done.stdout


class Reader(Protocol):
    """Where the agent's readings come from."""

    def cards(self) -> list[Card]: ...
    def memory(self) -> HostMemory: ...


class UsageReader(Protocol):
    """What measuring a started engine reads: the node's processes and what they hold, in RAM and on cards."""

    def parents(self) -> dict[int, int]:
        """Every process's parent, by pid."""
        ...

    def process_memory(self, pid: int) -> ProcessMemory | None:
        """A process's resident memory; None once it is gone or has none."""
        ...

    def card_use(self) -> tuple[str, list[CardUse]]:
        """Where the cards were read (``nvml``, ``nvidia-smi`` or ``none``) and what each process holds on
        each card."""
        ...


class SystemReader:
    """Reads this machine: cards through NVML, else nvidia-smi, else none (a CPU node); host memory from
    ``/proc/meminfo``, within this process's control group's memory limit where it has one (as in a
    container). Each source can be replaced, for tests; ``cgroup=None`` reads no limit."""

    def __init__(
        self,
        *,
        nvml: Callable[[], Nvml | None] = load_nvml,
        smi: Callable[[Sequence[str]], str | None] = run_smi,
        meminfo: str | Path = K.MEMINFO_PATH,
        cgroup: str | Path | None = K.CGROUP_PATH,
        proc: str | Path = K.PROC_PATH,
    ) -> None:
        self._nvml = nvml
        self._smi = smi
        self._meminfo = Path(meminfo)
        self._cgroup = cgroup
        self._proc = Path(proc)
        self.source = ""
        """Where the last cards came from: ``nvml``, ``nvidia-smi`` or ``none``."""

    def _from(self, source: str, why: str = "") -> None:
        if source != self.source:
            log.info("cards_source", source=source, why=why)
            self.source = source

    def cards(self) -> list[Card]:
        api = self._nvml()
        why = "nvidia-ml-py is not installed"
        if api is not None:
            try:
                cards = cards_from_nvml(nvml_readings(api))
            except api.NVMLError as e:
                why = f"NVML: {e}"
            else:
                self._from("nvml")
                return cards
        listed = self._smi(K.SMI_CARDS_ARGS)
        apps = self._smi(K.SMI_APPS_ARGS) if listed is not None else None
        if listed is None or apps is None:
            self._from("none", f"{why}; nvidia-smi is missing or failed")
            return []
        self._from("nvidia-smi", why)
        return cards_from_smi(listed, apps)

    def memory(self) -> HostMemory:
        host = memory_from_meminfo(self._meminfo.read_text(encoding="ascii"))
        limited = cgroup_memory(self._cgroup) if self._cgroup is not None else None
        return memory_within(host, *limited) if limited else host

    def parents(self) -> dict[int, int]:
        """Each process's parent from ``/proc/PID/stat``; one that ends while being read is left out."""
        parents = {}
        for entry in self._proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                ppid = parent_from_stat((entry / "stat").read_text(encoding="utf-8", errors="replace"))
            except OSError:
                continue
            if ppid is not None:
                parents[int(entry.name)] = ppid
        return parents

    def process_memory(self, pid: int) -> ProcessMemory | None:
        """``VmRSS`` and ``VmHWM`` from ``/proc/PID/status`` (see ``process_memory_from_status``)."""
        try:
            text = (self._proc / str(pid) / "status").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        return process_memory_from_status(text)

    def driver(self) -> str | None:
        """The NVIDIA driver's version (``535.230.02``) from NVML, else nvidia-smi; None where neither
        answers (a CPU node)."""
        api = self._nvml()
        if api is not None:
            try:
                api.nvmlInit()
                try:
                    return _text(api.nvmlSystemGetDriverVersion()).strip()
                finally:
                    api.nvmlShutdown()
            except api.NVMLError as e:
                log.debug("nvml_failed", error=str(e))
        listed = self._smi(K.SMI_DRIVER_ARGS)
        versions = [line.strip() for line in (listed or "").splitlines() if line.strip()]
        return versions[0] if versions else None

    def card_use(self) -> tuple[str, list[CardUse]]:
        """What each compute process holds on each card: NVML's per-process figures, else nvidia-smi's
        compute apps mapped to card indices by uuid, else none."""
        api = self._nvml()
        if api is not None:
            try:
                return "nvml", card_use_from_nvml(nvml_readings(api))
            except api.NVMLError as e:
                log.debug("nvml_failed", error=str(e))
        listed = self._smi(K.SMI_CARDS_ARGS)
        apps = self._smi(K.SMI_APPS_ARGS) if listed is not None else None
        if listed is None or apps is None:
            return "none", []
        return "nvidia-smi", card_use_from_smi(listed, apps)


def read_boot_id(path: str | Path = K.BOOT_ID_PATH) -> str:
    """This boot's id from the kernel; a random one where there is none (then every agent start looks to
    the workers like a node restart, and the jobs placed on the node are planned again)."""
    try:
        boot_id = Path(path).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        boot_id = ""
    if re.fullmatch(ID_REGEX, boot_id):
        return boot_id
    boot_id = uuid.uuid4().hex
    log.warning("boot_id_random", path=str(path), boot_id=boot_id)
    return boot_id
