"""A node's heartbeat from its cards, its host memory and the holds it has started."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from planner.quant import mem_from_class
from producer.agent.errors import CardsMissing
from producer.agent.labels import Card, check_label
from producer.agent.memory import HostMemory
from worker.conditions import EngineReport
from worker.footprints import Footprint


def heartbeat_dict(
    node_id: str,
    cards: Sequence[Card],
    memory: HostMemory,
    *,
    seq: int,
    boot_id: str,
    gpu_class: str | None = None,
    fabric: str = "",
    started: Sequence[str] = (),
    taken: Iterable[int] = (),
    started_host_gb: float = 0.0,
    footprints: Mapping[str, Footprint] | None = None,
    ended: Mapping[str, str] | None = None,
    simulated: bool = False,
    engines: Mapping[str, EngineReport] | None = None,
    gpu_vendor: str = "",
    gpu_driver: str = "",
) -> dict[str, Any]:
    """The heartbeat of a node with ``cards`` (all of one class) and ``memory``.

    The class is ``gpu_class`` (``--gpu-class``) or the cards' own label; ``gpu_mem_gb`` what the smallest
    card has, in GiB rounded down (never more than the label names), which is what plans count.
    ``LabelPastCard`` where ``gpu_class`` names a size the cards do not have (``check_label``).

    ``started`` are the holds already handed to the engine starter; ``taken`` the card indices given to
    them and ``started_host_gb`` the RAM they reserve. A taken card is not free even while it still reads
    idle (its engine is loading, or the start hook runs nothing), so the heartbeat counts it as the
    workers do once the hold is listed in ``started``. Free RAM is what is available less what started
    holds reserve and do not use yet: at most the total less their reservations. ``footprints`` are what
    some started holds' engines were measured to hold, ``ended`` why some of their engines ended,
    ``engines`` what each of their engines is doing (``worker.conditions``); each key is left out when there
    is none. ``simulated``: the cards are ``modelplan agent --simulate``'s, said as ``"simulated": true``
    (left out for real cards). ``gpu_vendor`` and ``gpu_driver`` are the cards' maker and driver (which
    size vLLM's graphs in a plan, ``planner.platform``): sent for a node that reports cards, each where
    known.
    """
    given = set(taken)
    label = gpu_class if gpu_class is not None else (cards[0].label if cards else "")
    if label and not cards:
        raise CardsMissing(node_id, label)
    if not label:
        cards = []  # --gpu-class "": the node is reported as a CPU node, whatever cards it has
    check_label(node_id, label, cards)
    # what the cards have, which plans count, whatever size the label names (the size a card is sold as)
    card_gb = min(c.has_gb for c in cards) if cards else 0
    if cards and mem_from_class(label):
        card_gb = min(card_gb, mem_from_class(label))
    host_free = max(0, min(memory.free_gb, int(memory.total_gb - started_host_gb)))
    data: dict[str, Any] = {
        "node_id": node_id,
        "gpu_class": label,
        "fabric": fabric,
        "gpu_mem_gb": card_gb,
        "gpus": len(cards),
        "free_gpus": sum(1 for c in cards if c.idle and c.index not in given),
        "host_mem_gb": memory.total_gb,
        "host_free_gb": host_free,
        "seq": seq,
        "boot_id": boot_id,
        "started": list(started),
    }
    if cards and gpu_vendor:
        data["gpu_vendor"] = gpu_vendor
        if gpu_driver:
            data["gpu_driver"] = gpu_driver
    if footprints:
        data["footprints"] = {h: fp.model_dump(mode="json") for h, fp in footprints.items()}
    if ended:
        data["ended"] = {h: _said(why) for h, why in ended.items()}
    if simulated:
        data["simulated"] = True
    if engines:
        data["engines"] = {h: e.model_dump(mode="json", exclude_defaults=True) for h, e in engines.items()}
    return data


def _said(why: str) -> str:
    """Why an engine ended, as a heartbeat may carry it: no quote, backslash or control character, at most
    200 characters (``worker.reports.ENDED_PATTERN``)."""
    kept = "".join(c if c.isprintable() and c not in '"\\' else " " for c in why).strip()
    return kept[:200] or "ended"
