"""What the node agent raises when a reading or its configuration does not add up."""

from __future__ import annotations

from planner.errors import ModelplanError
from planner.pool import LABELLED_SHARE


class CardsMissing(ModelplanError):
    """Raised by ``heartbeat_dict`` (and so ``Agent.tick``) when a card class is configured but no card is
    found: the node is not reported as a CPU node, so that it lapses and its jobs are planned again."""

    def __init__(self, node_id: str, gpu_class: str) -> None:
        self.node_id, self.gpu_class = node_id, gpu_class
        super().__init__(
            f"node {node_id!r}: --gpu-class {gpu_class!r} is given but no card was found (neither NVML nor "
            "nvidia-smi answered); no heartbeat published"
        )


class LabelPastCard(ModelplanError):
    """Raised by ``heartbeat_dict`` (and so ``Agent.tick``, and ``Agent.check_class`` as the agent starts)
    when ``--gpu-class`` names a size a card of the node does not have ``LABELLED_SHARE`` of: no heartbeat
    claims memory the cards do not have."""

    def __init__(self, node_id: str, gpu_class: str, named: int, index: int, name: str, mib: int, own: str) -> None:
        self.node_id, self.gpu_class = node_id, gpu_class
        most = int(mib / 1024 / LABELLED_SHARE)
        super().__init__(
            f"node {node_id!r}: --gpu-class {gpu_class!r} names cards of {named} GiB, but card {index} ({name}) has "
            f"{mib} MiB ({mib / 1024:.1f} GiB), and a card has at least {LABELLED_SHARE:.0%} of the size its class "
            f"names: name a class of at most {most} GiB (this card's own is {own}), or leave --gpu-class out"
        )


class CardReadingError(ModelplanError):
    """Raised by ``cards_from_smi`` and ``memory_from_meminfo`` when a reading is not in the format asked
    for: no heartbeat is better than a wrong one."""

    def __init__(self, source: str, problem: str) -> None:
        super().__init__(f"{source}: {problem}")
