"""The node's host memory: ``/proc/meminfo``, within this process's control group's limit where it has one."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from producer import constants as K
from producer.agent.errors import CardReadingError


@dataclass(frozen=True, slots=True)
class HostMemory:
    """The node's RAM in whole GiB (rounded down): total, and available now."""

    total_gb: int
    free_gb: int


def memory_from_meminfo(text: str) -> HostMemory:
    """Host memory from ``/proc/meminfo``: ``MemTotal`` and ``MemAvailable`` (kB) as whole GiB."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            values[key.strip()] = int(parts[0])
    missing = [k for k in ("MemTotal", "MemAvailable") if k not in values]
    if missing:
        raise CardReadingError("/proc/meminfo", f"no {' or '.join(missing)}")
    kib_per_gib = 1 << 20
    return HostMemory(values["MemTotal"] // kib_per_gib, values["MemAvailable"] // kib_per_gib)


_CGROUP_FILES = (
    # (limit, usage, stat, the stat line of page cache that can be reclaimed)
    ("memory.max", "memory.current", "memory.stat", "inactive_file"),
    ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes", "memory/memory.stat", "total_inactive_file"),
)


def cgroup_memory(root: str | Path) -> tuple[int, int] | None:
    """This process's control group's memory limit and what it uses (less page cache that can be
    reclaimed), in bytes, from cgroup v2 then v1 under ``root``; None where there is no limit."""
    for limit_name, used_name, stat_name, inactive_key in _CGROUP_FILES:
        try:
            limit_text = (Path(root) / limit_name).read_text(encoding="ascii").strip()
            used = int((Path(root) / used_name).read_text(encoding="ascii"))
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        if not limit_text.isdigit() or int(limit_text) >= K.CGROUP_NO_LIMIT:
            return None  # "max", or v1's "unlimited"
        inactive = 0
        try:
            for line in (Path(root) / stat_name).read_text(encoding="ascii").splitlines():
                key, _, value = line.partition(" ")
                if key == inactive_key and value.strip().isdigit():
                    inactive = int(value)
        except (OSError, UnicodeDecodeError):
            pass
        return int(limit_text), max(0, used - inactive)
    return None


def memory_within(host: HostMemory, limit: int, used: int) -> HostMemory:
    """The host's memory as a control group limited to ``limit`` bytes, ``used`` of them, may use it."""
    gib = 1 << 30
    return HostMemory(min(host.total_gb, limit // gib), min(host.free_gb, max(0, limit - used) // gib))


@dataclass(frozen=True, slots=True)
class ProcessMemory:
    """One process's resident memory in bytes: now (``VmRSS``) and the most it has had (``VmHWM``)."""

    rss_bytes: int
    peak_bytes: int


def process_memory_from_status(text: str) -> ProcessMemory | None:
    """A process's memory from its ``/proc/PID/status``; None when it has none resident (a zombie, a
    kernel thread).

    ``VmRSS`` is the kernel's running count of the process's resident pages: anonymous memory, shared
    memory, and the pages of mapped files it has touched, so the parts of an mmap'd GGUF the engine has read
    count once read (all of it after llama.cpp's warm-up), and stay counted while they stay in the page
    cache. It is read in constant time, where ``smaps_rollup`` would walk every page table of the process
    under its memory-map lock (ten million entries for a 40 GiB model, every tick, stalling the engine's
    own faults meanwhile) for a ``Rss`` that is the same figure. ``VmHWM`` is its high-water mark, which
    catches a peak between two readings (a model's load)."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if key in ("VmRSS", "VmHWM") and parts and parts[0].isdigit():
            values[key] = int(parts[0]) * 1024  # kB in the kernel's words: KiB
    if "VmRSS" not in values:
        return None
    return ProcessMemory(values["VmRSS"], max(values["VmRSS"], values.get("VmHWM", 0)))


def parent_from_stat(text: str) -> int | None:
    """The parent pid in a ``/proc/PID/stat`` line; None when it cannot be read. The process's name comes
    second, in parentheses, and may hold spaces and parentheses itself: the fields are read after the
    last ``)``."""
    fields = text[text.rfind(")") + 1 :].split()
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None
