"""In a container the agent reports its control group's memory limit, not the host's ``/proc/meminfo``."""

from __future__ import annotations

from pathlib import Path

import pytest

from producer.agent import HostMemory, SystemReader, cgroup_memory
from tests.producer.agent.test_agent import DATA, no_smi

GIB = 1 << 30
HOST = HostMemory(125, 125)  # tests/data/h200/meminfo.txt: MemTotal and MemAvailable in whole GiB


def write(root: Path, files: dict[str, str]) -> Path:
    for name, content in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(content)
    return root


def reader(cgroup: Path) -> SystemReader:
    return SystemReader(nvml=lambda: None, smi=no_smi, meminfo=DATA / "meminfo.txt", cgroup=cgroup)


def test_a_v2_limit_bounds_total_and_free(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "memory.max": f"{8 * GIB}\n",
            "memory.current": f"{3 * GIB}\n",
            "memory.stat": f"anon 1\ninactive_file {GIB}\nactive_file 5\n",
        },
    )
    assert cgroup_memory(root) == (8 * GIB, 2 * GIB)  # page cache that can be reclaimed is not counted
    assert reader(root).memory() == HostMemory(8, 6)


def test_a_v1_limit_bounds_total_and_free(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "memory/memory.limit_in_bytes": f"{16 * GIB}\n",
            "memory/memory.usage_in_bytes": f"{4 * GIB}\n",
            "memory/memory.stat": f"inactive_file 7\ntotal_inactive_file {2 * GIB}\n",
        },
    )
    assert reader(root).memory() == HostMemory(16, 14)


@pytest.mark.parametrize(
    "files",
    [
        {"memory.max": "max\n", "memory.current": "123\n"},
        {"memory/memory.limit_in_bytes": "9223372036854771712\n", "memory/memory.usage_in_bytes": "1540509696\n"},
        {},
    ],
    ids=["v2-max", "v1-unlimited", "none"],
)
def test_without_a_limit_the_hosts_memory_is_reported(tmp_path: Path, files: dict[str, str]) -> None:
    root = write(tmp_path, files)
    assert cgroup_memory(root) is None
    assert reader(root).memory() == HOST


def test_a_limit_past_the_hosts_memory_changes_nothing(tmp_path: Path) -> None:
    root = write(tmp_path, {"memory.max": f"{1024 * GIB}\n", "memory.current": "0\n"})
    assert reader(root).memory() == HOST
