"""The agent: one ``tick()`` reads, hands holds over and publishes; ``run`` ticks at an interval."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from planner.errors import InvalidInput, ModelplanError
from planner.platform import DRIVER_VERSION_REGEX, graphs_of
from planner.pool import ID_REGEX
from producer.agent.engines import replica_of
from producer.agent.heartbeat import heartbeat_dict
from producer.agent.hooks import StartHook, StopHook, log_start, log_stop
from producer.agent.labels import Card, check_label, node_cards
from producer.agent.memory import HostMemory
from producer.agent.probes import Reader, read_boot_id
from producer.agent.supervise import Supervisor
from producer.client import BeatLog, Client
from worker import logs
from worker.conditions import EngineReport
from worker.footprints import Footprint
from worker.ids import job_of_hold
from worker.pool import Held
from worker.reports import Heartbeat, parse_heartbeat

log = logs.get_logger("modelplan.agent")


@dataclass(frozen=True, slots=True)
class Started:
    """A hold handed to the start hook: the cards it was given and the RAM it reserves."""

    cards: tuple[int, ...]
    host_gb: float


def _checked(value: str, field: str, allow_empty: bool = False) -> str:
    if (allow_empty and value == "") or re.fullmatch(ID_REGEX, value):
        return value
    raise InvalidInput(
        "arguments", field, f"{value!r}: only letters, digits, '.', '_' and '-' (up to 128, starting with one)"
    )


class Agent:
    """One node's agent. ``client`` None: a dry run (it reads and builds heartbeats, and hands over nothing).

    With a ``supervisor`` (``--engines run``) its ``start`` and ``stop`` are the hooks, a hold whose engine
    it already runs (adopted after a restart) keeps that engine's cards, ``poll`` runs each tick after the
    hand-off, and the heartbeat carries the footprints it measured of the started holds."""

    def __init__(
        self,
        node_id: str,
        reader: Reader,
        client: Client | None = None,
        *,
        gpu_class: str | None = None,
        fabric: str = "",
        boot_id: str | None = None,
        start_hook: StartHook = log_start,
        stop_hook: StopHook = log_stop,
        first_seq: int | None = None,
        supervisor: Supervisor | None = None,
    ) -> None:
        self.node_id = _checked(node_id, "--node-id")
        self.gpu_class = _checked(gpu_class, "--gpu-class", allow_empty=True) if gpu_class is not None else None
        self.fabric = _checked(fabric, "--fabric", allow_empty=True)
        self.reader = reader
        self.client = client
        self.boot_id = _checked(boot_id, "boot_id") if boot_id is not None else read_boot_id()
        self.supervisor = supervisor
        self.start_hook: StartHook = supervisor.start if supervisor is not None else start_hook
        self.stop_hook: StopHook = supervisor.stop if supervisor is not None else stop_hook
        # the clock in microseconds at start: an agent started again on the same boot goes on rising
        self._seq = first_seq if first_seq is not None else time.time_ns() // 1000
        self.started: dict[str, Started] = {}
        """The holds handed to the start hook (by hold id), in the order they were, with their cards."""
        self._noted: set[str] = set()
        self._seen: tuple[tuple[str, int], tuple[tuple[int, str], ...]] | None = None
        self._beats = BeatLog()
        self._driver_checked = False
        self.driver = ""
        """The cards' driver as read once the node has cards (``""`` unread or unreadable): published with
        every heartbeat, so that plans size vLLM's graphs for it (``planner.platform``)."""

    @property
    def log(self) -> Any:
        # bound at each use, not once: logging may be configured after the agent is made
        return log.bind(node_id=self.node_id, boot_id=self.boot_id)

    def read(self) -> tuple[list[Card], HostMemory]:
        """The cards the node reports (logged when they change) and its host memory."""
        # --gpu-class "" reports a CPU node: its cards are neither read nor given to jobs
        cards, ignored = node_cards(self.reader.cards()) if self.gpu_class != "" else ([], [])
        seen = ((cards[0].label if cards else "", len(cards)), tuple((c.index, c.label) for c in ignored))
        if seen != self._seen:
            self._seen = seen
            self.log.info("cards_found", gpu_class=seen[0][0], gpus=len(cards), cards=[c.index for c in cards])
            if ignored:
                self.log.warning(
                    "cards_ignored",
                    reported=seen[0][0],
                    ignored=[{"index": c.index, "name": c.name, "class": c.label} for c in ignored],
                    why="a node reports one card class: the most common one",
                )
        if cards and not self._driver_checked:
            self._driver_checked = True
            self._check_driver()
        return cards, self.reader.memory()

    def check_class(self) -> None:
        """Raise ``LabelPastCard`` where ``--gpu-class`` names a size the cards read now do not have, so
        that the agent refuses to start rather than fail every tick; a reading that fails is left to the
        ticks, which log it and go on."""
        if not self.gpu_class:
            return
        try:
            cards, _ = node_cards(self.reader.cards())
        except (ModelplanError, OSError):
            return
        check_label(self.node_id, self.gpu_class, cards)

    def _check_driver(self) -> None:
        """Read the cards' driver once, to publish it; say so once where it is older than the 550 branch,
        under which vLLM's CUDA graphs take about three times the memory (the plans count it for this
        node's cards). A version the agent cannot read as one is not published, and said once."""
        read = getattr(self.reader, "driver", None)
        version = read() if callable(read) else None
        if version is None:
            return
        if not re.fullmatch(DRIVER_VERSION_REGEX, version):
            self.log.warning("driver_unreadable", driver=version[:60], why="not a version such as 535.230.02")
            return
        self.driver = version
        if graphs_of("nvidia", version) == "old-driver":
            self.log.warning(
                "old_driver",
                driver=version,
                why="before the 550 branch vLLM's CUDA graphs take about three times the memory",
                counted="published with each heartbeat: plans count the larger graphs on this node's cards",
            )

    def heartbeat(self, cards: Sequence[Card], memory: HostMemory) -> Heartbeat:
        """The next heartbeat (its ``seq`` one past the last) from readings and the started holds."""
        self._seq += 1
        data = heartbeat_dict(
            self.node_id,
            cards,
            memory,
            seq=self._seq,
            boot_id=self.boot_id,
            gpu_class=self.gpu_class,
            fabric=self.fabric,
            started=list(self.started),
            taken=[i for s in self.started.values() for i in s.cards],
            started_host_gb=sum(s.host_gb for s in self.started.values()),
            footprints=self.footprints(),
            ended=self.ended(),
            simulated=bool(getattr(self.reader, "simulated", False)),  # modelplan agent --simulate
            engines=self.engines(),
            gpu_vendor="nvidia",
            gpu_driver=self.driver,
        )
        return parse_heartbeat(data, f"heartbeat of {self.node_id}")

    def footprints(self) -> dict[str, Footprint]:
        """The footprints measured of the started holds' engines (none without a supervisor)."""
        if self.supervisor is None:
            return {}
        return {h: fp for h, fp in self.supervisor.footprints().items() if h in self.started}

    def ended(self) -> dict[str, str]:
        """The started holds whose engine ended while the hold is on the node, with why (none without a
        supervisor)."""
        if self.supervisor is None:
            return {}
        return {h: why for h, why in self.supervisor.ended().items() if h in self.started}

    def engines(self) -> dict[str, EngineReport]:
        """What the engines of the started holds are doing (none without a supervisor)."""
        if self.supervisor is None:
            return {}
        return {h: e for h, e in self.supervisor.engines().items() if h in self.started}

    def _note(self, hold_id: str, event: str, **kw: Any) -> None:
        """Log why a hold is not handed over, once per hold rather than every tick."""
        if hold_id not in self._noted:
            self._noted.add(hold_id)
            self.log.warning(event, hold_id=hold_id, **kw)

    def hand_off(self, cards: Sequence[Card], client: Client) -> None:
        """Stop the holds no longer on the node; start the ones on it not started yet, each on cards that
        read idle and are not given to another."""
        held: dict[str, Held] = client.held_on(self.node_id)
        # nominations are cards kept idle for a waiting job: nothing runs on them. A reservation made on
        # an earlier boot is for the workers to plan again, not to start here.
        mine = sorted(h for h, v in held.items() if not v.nominated and v.boot_id in ("", self.boot_id))
        if self.supervisor is not None:
            self.supervisor.api_keys = {h: held[h].api_key for h in mine if held[h].api_key}
        for hold in [h for h in self.started if h not in mine]:
            gone = self.started.pop(hold)
            try:
                self.stop_hook(hold, gone.cards)
            except Exception:
                # its cards read busy while its engine lives, so dropping it from started is safe
                self.log.exception("engine_stop_failed", hold_id=hold)
            self.log.info("hold_stopped", hold_id=hold, cards=list(gone.cards))
        self._noted &= set(mine)
        new = [h for h in mine if h not in self.started]
        if new:
            self._start_new(new, cards, client)
        if self.supervisor is not None:
            self.supervisor.poll(set(mine))

    def _start_new(self, new: list[str], cards: Sequence[Card], client: Client) -> None:
        job_ids = sorted({job_of_hold(h) for h in new})
        records = dict(zip(job_ids, client.records(job_ids), strict=True))
        taken = {i for s in self.started.values() for i in s.cards}
        free = [c.index for c in cards if c.idle and c.index not in taken]
        for hold in new:
            rec = records[job_of_hold(hold)]
            replica = replica_of(rec, hold) if rec is not None else None
            mine_here = [r for r in replica.placement if r.hold_id == hold] if replica else []
            reservation = next((r for r in mine_here if r.node_id == self.node_id), None)
            if rec is None or rec.state.final or replica is None or replica.option is None or reservation is None:
                self._note(hold, "hold_not_startable", state=rec.state.value if rec else "missing")
                continue
            kept = self.supervisor.cards_of(hold) if self.supervisor is not None else None
            if kept is not None and len(kept) == reservation.gpus:
                # its engine runs already (the agent restarted): on its own cards, which read busy
                self.start_hook(rec, reservation, kept)
                self.started[hold] = Started(kept, reservation.host_gb)
                self.log.info("hold_started", hold_id=hold, cards=list(kept), host_gb=reservation.host_gb, adopted=True)
                continue
            if reservation.gpus > len(free):
                # something outside modelplan took cards since the workers planned: wait for them
                self._note(hold, "engine_start_deferred", needs=reservation.gpus, free=list(free))
                continue
            given, free = tuple(free[: reservation.gpus]), free[reservation.gpus :]
            try:
                self.start_hook(rec, reservation, given)
            except Exception:
                self.log.exception("engine_start_failed", hold_id=hold, cards=list(given))
                free = sorted([*free, *given])
                continue
            self.started[hold] = Started(given, reservation.host_gb)
            self._noted.discard(hold)
            self.log.info("hold_started", hold_id=hold, cards=list(given), host_gb=reservation.host_gb)

    def tick(self) -> Heartbeat:
        """One round: read, hand holds over, publish (dry run: build only). Returns the heartbeat."""
        cards, memory = self.read()
        if self.client is not None:
            try:
                self.hand_off(cards, self.client)
            except Exception:
                if self.supervisor is not None:
                    self.supervisor.poll()  # without Redis, stops still end and deaths are still seen
                raise
        hb = self.heartbeat(cards, memory)
        if self.client is not None:
            self._beats.note(self.log, hb, self.client.publish(hb))
        return hb

    def run(
        self, interval: float, stop_event: threading.Event, each: Callable[[Heartbeat], None] | None = None
    ) -> None:
        """Tick every ``interval`` seconds until ``stop_event`` is set; ``each`` sees every heartbeat. A
        failed tick is logged and the next one comes on time: the agent outlives Redis and driver
        hiccups. Engines keep running when the agent stops."""
        self.log.info("agent_started", interval=interval, dry_run=self.client is None)
        while not stop_event.is_set():
            began = time.monotonic()
            try:
                hb = self.tick()
            except ModelplanError as e:
                self.log.error("heartbeat_failed", error=str(e))
            except Exception:
                self.log.exception("heartbeat_failed")
            else:
                if each is not None:
                    each(hb)
            stop_event.wait(max(0.0, interval - (time.monotonic() - began)))
        self.log.info("agent_stopped")
