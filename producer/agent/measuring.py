"""How the ``run`` hook asks what a started engine holds: ``Measure`` (the engine's pids and cards, its log,
a reader in; a ``Footprint`` or None out) and ``Steadiness`` (successive footprints of one hold in; the one
to send, or None before it is steady).

The defaults here are a stand-in until the full measurement is in place: ``measure_rss`` sums the resident
memory (``/proc/PID/status`` VmRSS) of the engine's process tree on a CPU node and says nothing on cards;
``SteadyFootprint`` calls a figure steady once three readings in a row lie within 2% and sends the same
footprint until the peak rises more than 5% above what it sent."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from worker.footprints import Footprint

KIB = 1024
STEADY_READINGS = 3
STEADY_SPREAD = 0.02
NEW_PEAK = 0.05


class Measure(Protocol):
    def __call__(
        self, pids: Sequence[int], cards: tuple[int, ...], engine: str, log_text: str, reader: Any
    ) -> Footprint | None: ...


class Steadiness(Protocol):
    def update(self, footprint: Footprint | None) -> Footprint | None:
        """Take the latest reading; return the footprint to send (the same object until a real change),
        or None while there is nothing steady to send."""
        ...


def process_tree(pids: Sequence[int], proc: Path = Path("/proc")) -> list[int]:
    """``pids`` and all their descendants, from the parent pid in each ``/proc/PID/stat``."""
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2 :].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    seen: list[int] = []
    todo = list(pids)
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.append(pid)
            todo.extend(children.get(pid, []))
    return seen


def _rss_bytes(pid: int, proc: Path) -> int:
    try:
        for line in (proc / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * KIB
    except (OSError, ValueError, IndexError):
        pass
    return 0


def measure_rss(
    pids: Sequence[int], cards: tuple[int, ...], engine: str, log_text: str, reader: Any, proc: Path = Path("/proc")
) -> Footprint | None:
    """The resident memory of the tree of ``pids`` on a CPU node (VmRSS of each process, summed); None on
    cards, or when no process is left."""
    if cards or engine not in ("vllm", "llamacpp"):
        return None
    rss = sum(_rss_bytes(p, proc) for p in process_tree(pids, proc))
    if rss <= 0:
        return None
    return Footprint(
        engine="vllm" if engine == "vllm" else "llamacpp", source="proc", ram_bytes=rss, ram_peak_bytes=rss
    )


def _size(fp: Footprint) -> int:
    return max((*fp.card_bytes, fp.ram_bytes, fp.ram_peak_bytes))


class SteadyFootprint:
    """Steady once ``STEADY_READINGS`` readings in a row lie within ``STEADY_SPREAD`` of each other; then
    the footprint sent stays the same object until a reading's peak is more than ``NEW_PEAK`` above it."""

    def __init__(self) -> None:
        self.readings: list[Footprint] = []
        self.sent: Footprint | None = None

    def update(self, footprint: Footprint | None) -> Footprint | None:
        if footprint is None:
            return self.sent
        self.readings = [*self.readings, footprint][-STEADY_READINGS:]
        sizes = [_size(f) for f in self.readings]
        steady = len(sizes) == STEADY_READINGS and max(sizes) <= min(sizes) * (1 + STEADY_SPREAD)
        if self.sent is None:
            if steady:
                self.sent = footprint.model_copy(
                    update={"ram_peak_bytes": max(f.ram_peak_bytes for f in self.readings)}
                )
        elif _size(footprint) > _size(self.sent) * (1 + NEW_PEAK):
            self.sent = footprint
        return self.sent


def new_steadiness() -> Steadiness:
    return SteadyFootprint()


SteadinessFactory = Callable[[], Steadiness]
