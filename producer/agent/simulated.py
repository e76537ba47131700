"""``modelplan agent --simulate 8xh100-80g``: a reader of cards that are not there, so that engine mode can
be tried on a machine without them. The cards are reported as nvidia-smi reports real ones of the class
(their name and memory: ``producer.constants.SIMULATED_CARDS``), each free unless a hold's engine was
handed it; the host's memory and processes are this machine's own. The log says so once
(``cards_source source=simulated``) and every heartbeat carries ``"simulated": true``. Engines started
under it get ``CUDA_VISIBLE_DEVICES`` as on a real node."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from planner.errors import InvalidInput
from producer import constants as K
from producer.agent.labels import Card
from producer.agent.memory import HostMemory, ProcessMemory
from producer.agent.probes import CardUse, SystemReader
from worker import logs

log = logs.get_logger("modelplan.agent")

_SPEC = re.compile(r"(?P<count>\d{1,3})x(?P<label>[a-z0-9][a-z0-9-]*)")


def parse_simulate(spec: str) -> tuple[int, str]:
    """``--simulate``'s value: ``8xh100-80g`` as 8 cards of class ``h100-80g``; ``cpu`` as no card.
    ``InvalidInput`` naming the classes offered where it is neither."""
    if spec == "cpu":
        return 0, ""
    m = _SPEC.fullmatch(spec)
    offered = ", ".join(sorted(K.SIMULATED_CARDS))
    if m is None:
        raise InvalidInput("arguments", "--simulate", f"{spec!r} is not COUNTxCLASS (8xh100-80g) or cpu")
    count, label = int(m["count"]), m["label"]
    if label not in K.SIMULATED_CARDS:
        raise InvalidInput("arguments", "--simulate", f"no simulated class {label!r}: one of {offered}, or cpu")
    if not 1 <= count <= K.SIMULATED_MAX_CARDS:
        raise InvalidInput("arguments", "--simulate", f"{count} cards: give 1 to {K.SIMULATED_MAX_CARDS}")
    return count, label


@dataclass
class SimulatedReader:
    """``count`` simulated cards of class ``label`` (none: a CPU node); host memory and processes from
    ``host`` (this machine)."""

    count: int
    label: str
    host: SystemReader = field(default_factory=SystemReader)
    simulated: bool = True
    """Read by the agent: its heartbeats say the cards are simulated."""
    _said: bool = False

    @classmethod
    def of(cls, spec: str, host: SystemReader | None = None) -> SimulatedReader:
        count, label = parse_simulate(spec)
        return cls(count, label, host or SystemReader())

    def cards(self) -> list[Card]:
        if not self._said:  # said once, as the real reader says where its cards come from
            log.warning("cards_source", source="simulated", cards=self.count, gpu_class=self.label or "cpu")
            self._said = True
        if not self.count:
            return []
        name, total_mib = K.SIMULATED_CARDS[self.label]
        return [
            Card(index=i, name=name, uuid=f"GPU-simulated-{i:04d}", total_mib=total_mib, used_mib=0, processes=0)
            for i in range(self.count)
        ]

    def memory(self) -> HostMemory:
        return self.host.memory()

    def parents(self) -> dict[int, int]:
        return self.host.parents()

    def process_memory(self, pid: int) -> ProcessMemory | None:
        return self.host.process_memory(pid)

    def card_use(self) -> tuple[str, list[CardUse]]:
        """Simulated cards hold nothing: no engine's figure is read from them."""
        if not self.count:
            return "none", []
        total = K.SIMULATED_CARDS[self.label][1] * K.MIB
        return "simulated", [CardUse(i, total, ()) for i in range(self.count)]

    def driver(self) -> str | None:
        """No driver: simulated cards are checked against none."""
        return None
