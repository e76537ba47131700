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
