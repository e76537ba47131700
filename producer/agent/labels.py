"""A card as read, its class label from the driver's name and memory, and which cards a node reports."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from planner.pool import LABELLED_SHARE
from planner.quant import mem_from_class
from producer import constants as K
from producer.agent.errors import LabelPastCard


@dataclass(frozen=True, slots=True)
class Card:
    """One card as read now."""

    index: int
    """The driver's index (PCI bus order, as nvidia-smi numbers them)."""
    name: str
    uuid: str
    total_mib: int
    used_mib: int
    processes: int
    """Compute processes on it."""

    @property
    def idle(self) -> bool:
        """No compute process holds it and its used memory is under ``FREE_CARD_USED_MIB``."""
        return self.processes == 0 and self.used_mib < K.FREE_CARD_USED_MIB

    @property
    def label(self) -> str:
        return class_label(self.name, self.total_mib)

    @property
    def has_gb(self) -> int:
        """The GiB it has, rounded down: what a plan counts of it."""
        return self.total_mib // 1024


_BRAND_WORDS = frozenset({"nvidia", "geforce", "tesla", "quadro", "generation"})
_NOT_MODEL = re.compile(
    r"\d+(?:gb|gib|g)"  # memory sizes: 80GB, 40GB (the label's own -<GiB>g says it)
    r"|hbm\d*e?|gddr\d*x?"  # memory types: HBM3, HBM2e, GDDR6X
    r"|pcie|sxm\d*",  # form factors: PCIe, SXM4
    re.ASCII,
)

SOLD_GIB: dict[str, tuple[int, ...]] = {
    "h200": (140,),  # sold as 141 GB; reports 143771 MiB (140.4 GiB), named h200-140g
    "h100": (80, 94, 96),  # the 80 GB reports 81559 MiB (79.6 GiB)
    "a100": (40, 80),  # 40960 and 81920 MiB
    "l40s": (48,),  # 46068 MiB (45.0 GiB), as the A40 and the RTX 6000 Ada
    "l40": (48,),
    "a40": (48,),
    "rtx-6000-ada": (48,),
    "l4": (24,),
    "a10": (24,),  # 23028 MiB (22.5 GiB) with ECC on, as the A10G
    "a10g": (24,),
    "rtx-4090": (24,),  # 24564 MiB
    "v100": (16, 32),
}
"""The sizes, in GiB, that the cards of each model (as ``class_label`` names it) are sold as, and so named
in their class labels: the labels the examples and docs use (``h100-80g``, ``l40s-48g``), which a pool
written by hand uses too."""


def class_label(name: str, total_mib: int) -> str:
    """A card class label from the driver's name for the card and its memory: ``<model>-<GiB>g``.

    The model is the name lower-cased and split at spaces, ``-``, ``_`` and ``/``, less the brand words
    (NVIDIA, GeForce, Tesla, Quadro, Generation), memory sizes (80GB), memory types (HBM3, GDDR6X) and form
    factors (PCIe, SXM4), its parts joined by ``-`` with only ``a-z`` and ``0-9`` kept; ``gpu`` when nothing
    is left. The GiB is the size a card of that model is sold as (``sold_gib``), else, for a model not known
    here, what the card has, rounded down. So ``NVIDIA H100 80GB HBM3`` with 81559 MiB is ``h100-80g``,
    ``NVIDIA L40S`` with 46068 MiB ``l40s-48g`` and ``NVIDIA GeForce RTX 4090`` with 24564 MiB
    ``rtx-4090-24g``. Cards of one model and size get one label whatever their form factor. What a plan
    counts is what the card has, which the heartbeat carries beside the label (``gpu_mem_gb``).
    """
    kept = []
    for token in re.split(r"[\s\-_/]+", name.lower()):
        token = re.sub(r"[^a-z0-9]", "", token)
        if token and token not in _BRAND_WORDS and not _NOT_MODEL.fullmatch(token):
            kept.append(token)
    model = "-".join(kept)[: K.CLASS_MODEL_MAX_CHARS].strip("-") or "gpu"
    return f"{model}-{sold_gib(model, total_mib)}g"


def sold_gib(model: str, total_mib: int) -> int:
    """The size in GiB a card of ``model`` reporting ``total_mib`` is sold as: of the sizes ``SOLD_GIB``
    gives the model, the one nearest what it has among those it could be (it has at least
    ``LABELLED_SHARE`` of the size, and less than a GiB past it); else what it has, rounded down."""
    has = total_mib / 1024
    fits = [size for size in SOLD_GIB.get(model, ()) if size * LABELLED_SHARE <= has < size + 1]
    return min(fits, key=lambda size: abs(size - has)) if fits else total_mib // 1024


def check_label(node_id: str, gpu_class: str, cards: Sequence[Card]) -> None:
    """``LabelPastCard`` where ``gpu_class`` names a size its smallest card does not have
    ``LABELLED_SHARE`` of: a label past the cards, whose plans would count memory no card has."""
    named = mem_from_class(gpu_class)
    if not named or not cards:
        return
    least = min(cards, key=lambda c: (c.total_mib, c.index))
    if named * LABELLED_SHARE > least.total_mib / 1024:
        raise LabelPastCard(node_id, gpu_class, named, least.index, least.name, least.total_mib, least.label)


def node_cards(cards: Sequence[Card]) -> tuple[list[Card], list[Card]]:
    """The cards a node reports and the ones it leaves out: those of the most common class label, a tie
    going to the label of the lowest-indexed card."""
    ordered = sorted(cards, key=lambda c: c.index)
    if not ordered:
        return [], []
    # Counter keeps first-seen order among equal counts, and most_common is stable: ties go to the
    # label seen first, which is the lowest index's
    top, _ = Counter(c.label for c in ordered).most_common(1)[0]
    return [c for c in ordered if c.label == top], [c for c in ordered if c.label != top]
