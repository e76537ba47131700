"""How the ``run`` hook asks what a started engine holds: ``Measure`` (the engine's pids and cards, its log,
a reader in; a ``Footprint`` or None out) and ``Steadiness`` (successive footprints of one hold in; the one
to send, or None before it is steady). ``producer.agent.footprint`` gives both: ``measure`` and ``Steady``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from worker.footprints import Footprint


class Measure(Protocol):
    def __call__(
        self, pids: Sequence[int], cards: tuple[int, ...], engine: str, log_text: str, reader: Any
    ) -> Footprint | None: ...


class Steadiness(Protocol):
    def update(self, footprint: Footprint | None) -> Footprint | None:
        """Take the latest reading; return the footprint to send (the same object until a real change),
        or None while there is nothing steady to send."""
        ...


SteadinessFactory = Callable[[], Steadiness]
