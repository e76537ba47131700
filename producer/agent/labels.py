"""A card as read, its class label from the driver's name and memory, and which cards a node reports."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from producer import constants as K


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


_BRAND_WORDS = frozenset({"nvidia", "geforce", "tesla", "quadro", "generation"})
_NOT_MODEL = re.compile(
    r"\d+(?:gb|gib|g)"  # memory sizes: 80GB, 40GB (the label's own -<GiB>g says it)
    r"|hbm\d*e?|gddr\d*x?"  # memory types: HBM3, HBM2e, GDDR6X
    r"|pcie|sxm\d*",  # form factors: PCIe, SXM4
    re.ASCII,
)


def class_label(name: str, total_mib: int) -> str:
    """A card class label from the driver's name for the card and its memory: ``<model>-<GiB>g``.

    The GiB is ``total_mib // 1024`` (rounded down: what the card has, not its marketed size). The model
    is the name lower-cased and split at spaces, ``-``, ``_`` and ``/``, less the brand words (NVIDIA,
    GeForce, Tesla, Quadro, Generation), memory sizes (80GB), memory types (HBM3, GDDR6X) and form factors
    (PCIe, SXM4), its parts joined by ``-`` with only ``a-z`` and ``0-9`` kept; ``gpu`` when nothing is
    left. So ``NVIDIA H200`` with 143771 MiB is ``h200-140g``, ``NVIDIA A100-SXM4-80GB`` with 81920 MiB is
    ``a100-80g``, and ``NVIDIA GeForce RTX 4090`` with 24564 MiB is ``rtx-4090-23g``. Cards of one model
    with one memory size get one label whatever their form factor.
    """
    kept = []
    for token in re.split(r"[\s\-_/]+", name.lower()):
        token = re.sub(r"[^a-z0-9]", "", token)
        if token and token not in _BRAND_WORDS and not _NOT_MODEL.fullmatch(token):
            kept.append(token)
    model = "-".join(kept)[: K.CLASS_MODEL_MAX_CHARS].strip("-") or "gpu"
    return f"{model}-{total_mib // 1024}g"


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
