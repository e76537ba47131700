"""What a started hold's engine holds, measured on its node: ``measure`` reads it once, ``Steady`` says
when the readings of one hold are steady and which footprint to send in the heartbeat.

Where each figure comes from:

- RAM (``ram_bytes``, ``ram_peak_bytes``): the engine's process tree, the pids the engine was started as
  and every descendant (vLLM's engine core and workers are children of its API server), by the parent
  pid in each ``/proc/PID/stat``; each process's ``VmRSS`` (now) and ``VmHWM`` (the most it had) from
  ``/proc/PID/status``, summed (see ``process_memory_from_status``). Pages two processes of the tree
  share (the libraries each vLLM process maps, a fork's copy-on-write pages) count once per process, so
  with several processes the figure is an upper bound: a plan made from it is more careful, not less.
  The peak sums each process's own high-water mark, which may have come at different times: an upper
  bound too, exact for llama-server's single process. An mmap'd GGUF counts once its pages are touched.
- Cards (``card_bytes``, one per card given to the hold, in the hold's order): what the tree's processes
  hold on that card, NVML's ``nvmlDeviceGetComputeRunningProcesses`` (``usedGpuMemory`` per pid), else
  ``nvidia-smi --query-compute-apps`` mapped to indices by uuid. NVML names processes by the host's pids:
  in a container without the host's pid namespace none of them match, and nothing is said.
- ``kv_bytes`` and ``version``: what the engine printed in its log (``engine_log``): vLLM sizes its cache to
  fill its ``--gpu-memory-utilization`` share, so the plan's estimate predicts a card's figure less it.

Trust on this side: a footprint is built only for the hold's own cards (a tree process on another card is
left out, and said once), and never with a card figure past that card's memory (refused, and said).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from producer import constants as K
from producer.agent.engine_log import engine_version, kv_per_card, ram_kv
from producer.agent.errors import CardReadingError
from producer.agent.probes import CardUse, UsageReader
from worker import logs
from worker.footprints import Footprint

log = logs.get_logger("modelplan.agent")

_SAID_MAX = 1024
_said: set[tuple[Any, ...]] = set()


def _once(event: str, key: tuple[Any, ...], **kw: Any) -> None:
    """Log ``event`` once for ``key``: measuring runs every tick, and a state that lasts says so once."""
    if (event, *key) in _said:
        return
    if len(_said) >= _SAID_MAX:
        _said.clear()
    _said.add((event, *key))
    log.warning(event, **kw)


def process_tree(roots: Iterable[int], parents: Mapping[int, int]) -> list[int]:
    """``roots`` that are alive (in ``parents``) and all their descendants, roots first."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    tree: list[int] = []
    seen: set[int] = set()
    todo = [p for p in roots if p in parents]
    while todo:
        pid = todo.pop(0)
        if pid in seen:
            continue
        seen.add(pid)
        tree.append(pid)
        todo.extend(sorted(children.get(pid, ())))
    return tree


@dataclass(frozen=True, slots=True)
class Refused:
    """A card whose figure cannot be trusted, and why."""

    card: int
    why: str


def card_figures(tree: Sequence[int], cards: Sequence[int], use: Sequence[CardUse]) -> tuple[int, ...] | Refused | None:
    """The bytes the tree's processes hold on each of ``cards``, in their order; ``Refused`` when a figure
    cannot be trusted; None when there is nothing to say yet (a card the tree holds nothing on, or whose
    figure the driver cannot tell)."""
    pids = set(tree)
    by_index = {c.index: c for c in use}
    figures = []
    for index in cards:
        card = by_index.get(index)
        if card is None:
            return Refused(index, "not among the cards read")
        held = [used for pid, used in card.procs if pid in pids]
        if not held or any(used is None for used in held):
            return None
        figure = sum(used for used in held if used is not None)
        if figure > card.total_bytes:
            return Refused(index, f"{figure} bytes held, past the card's {card.total_bytes}")
        figures.append(figure)
    return tuple(figures)


def foreign_cards(tree: Sequence[int], cards: Sequence[int], use: Sequence[CardUse]) -> list[int]:
    """Cards not given to the hold on which a process of its tree holds memory."""
    pids = set(tree)
    return [c.index for c in use if c.index not in cards and any(pid in pids for pid, _ in c.procs)]


def measure(
    pids: Sequence[int], cards: tuple[int, ...], engine: str, log_text: str, reader: UsageReader
) -> Footprint | None:
    """What the engine started as ``pids`` holds now on the hold's ``cards`` (none: a CPU hold) and in
    RAM, with what its log (``log_text``, this start's) says of its release and KV cache. None when
    there is nothing to say yet (its processes are gone, a card not yet used, no card reading) or a figure
    is refused. ``engine`` is ``vllm`` or ``llamacpp``; anything else is a ValueError."""
    name: Literal["vllm", "llamacpp"] = "vllm" if engine == "vllm" else "llamacpp"
    version = engine_version(engine, log_text)  # names a bad engine
    tree = process_tree(pids, reader.parents())
    if not tree:
        return None
    memory = [m for m in (reader.process_memory(pid) for pid in tree) if m is not None]
    ram, peak = sum(m.rss_bytes for m in memory), sum(m.peak_bytes for m in memory)
    key = tuple(pids)
    try:
        if not cards:
            if ram <= 0:
                return None
            kv = ram_kv(engine, log_text)
            return Footprint(
                engine=name, version=version, source="proc", ram_bytes=ram, ram_peak_bytes=peak, kv_bytes=kv
            )
        try:
            source, use = reader.card_use()
        except CardReadingError as e:
            _once("footprint_unread", key, pids=list(pids), why=str(e))
            return None
        if source not in ("nvml", "nvidia-smi"):
            _once("footprint_unread", key, pids=list(pids), why="no card reading (neither NVML nor nvidia-smi)")
            return None
        foreign = foreign_cards(tree, cards, use)
        if foreign:
            _once("footprint_foreign_card", (*key, *foreign), pids=list(pids), cards=foreign, given=list(cards))
        figures = card_figures(tree, cards, use)
        if isinstance(figures, Refused):
            _once("footprint_refused", (*key, figures.card), pids=list(pids), card=figures.card, why=figures.why)
            return None
        if figures is None:
            return None
        kv = kv_per_card(engine, log_text, len(cards))
        if kv > min(figures):
            # the log is not this engine's, or of an earlier start: its cache cannot be larger than a card's figure
            _once("footprint_kv_ignored", key, pids=list(pids), kv_bytes=kv, card_bytes=list(figures))
            kv = 0
        return Footprint(
            engine=name,
            version=version,
            source="nvml" if source == "nvml" else "nvidia-smi",
            card_bytes=figures,
            ram_bytes=ram,
            ram_peak_bytes=peak,
            kv_bytes=kv,
        )
    except ValidationError as e:
        _once("footprint_refused", key, pids=list(pids), why=str(e.errors()[0]["msg"]))
        return None


def _kind(fp: Footprint) -> tuple[Any, ...]:
    """What readings must share to be compared figure by figure."""
    return (fp.engine, fp.version, fp.source, fp.kv_bytes, len(fp.card_bytes))


def _figures(fp: Footprint) -> tuple[int, ...]:
    return (*fp.card_bytes, fp.ram_bytes)


class Steady:
    """Successive footprints of one hold in (``update``, one a tick); the footprint to send out.

    Nothing is sent until ``readings`` readings in a row agree (same release, source, KV figure and
    cards) and each figure moved less than ``spread`` of its largest across them. From then on the same
    object is sent again, so that each heartbeat is a refresh, until a reading rises more than ``rise``
    above a sent figure (a new peak: sent at once, every figure the larger of the two, never lower) or
    the engine says something new (a release or KV figure read later: sent once steady). A reading of
    None (nothing to say this tick) keeps what was sent."""

    def __init__(
        self,
        readings: int = K.FOOTPRINT_STEADY_READINGS,
        spread: float = K.FOOTPRINT_STEADY_SPREAD,
        rise: float = K.FOOTPRINT_NEW_PEAK,
    ) -> None:
        self.readings = readings
        self.spread = spread
        self.rise = rise
        self.sent: Footprint | None = None
        self._window: list[Footprint] = []
        self._ram_peak = 0

    @property
    def steady(self) -> bool:
        return self.sent is not None

    def _merged(self, fp: Footprint) -> Footprint:
        sent = self.sent
        same_cards = sent is not None and len(sent.card_bytes) == len(fp.card_bytes)
        cards = tuple(map(max, sent.card_bytes, fp.card_bytes)) if sent is not None and same_cards else fp.card_bytes
        ram = max(fp.ram_bytes, sent.ram_bytes) if sent is not None else fp.ram_bytes
        return fp.model_copy(update={"card_bytes": cards, "ram_bytes": ram, "ram_peak_bytes": max(self._ram_peak, ram)})

    def update(self, footprint: Footprint | None) -> Footprint | None:
        if footprint is None:
            return self.sent
        self._ram_peak = max(self._ram_peak, footprint.ram_bytes, footprint.ram_peak_bytes)
        if self._window and _kind(self._window[-1]) != _kind(footprint):
            self._window = []
        self._window = [*self._window, footprint][-self.readings :]
        if self.sent is not None and _kind(self.sent) == _kind(footprint):
            before = (*_figures(self.sent), self.sent.ram_peak_bytes)
            now = (*_figures(footprint), footprint.ram_peak_bytes)
            if any(n > b * (1 + self.rise) for n, b in zip(now, before, strict=True)):
                self.sent = self._merged(footprint)
            return self.sent
        columns = zip(*map(_figures, self._window), strict=True)
        if len(self._window) == self.readings and all(max(c) - min(c) <= self.spread * max(c) for c in columns):
            self.sent = self._merged(footprint)
        return self.sent
