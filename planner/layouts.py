"""What each artifact needs on each class of card, sized once and kept.

A plan sizes every artifact of a request for every class of card in the pool, and a worker plans the same
repositories over and over (each job, each replica, each re-plan on a wake-up) against the same few
classes. What a file needs on a class is a pure function of values (the file, the model's shape, the
context, the estimate, the card), so it is worked out once and kept, to a bound; a plan then adds only
what the pool's counts say (how many nodes could take each option, and whether one could now).
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Any

from planner.constants import fits, gib
from planner.estimate import Need, Sizing, llamacpp_host, llamacpp_split
from planner.model import Artifact, Option, Shape
from planner.parallel import vllm_kv_spread
from planner.settings import VllmRun
from planner.vllmcost import vllm_split

SIZING_CACHE = 65_536
"""Sizings kept per function: a few hundred per repository served."""

LAYOUT_CACHE = 4096
"""Artifacts' layouts kept: one per file, context and set of classes planned for."""

COUNTED_KEPT = 256
"""Options as counted kept per layout: a busy pool moves a few counts at a time."""

Classes = tuple[tuple[str, int, int], ...]
"""A pool's classes of card as a layout reads them: label, card GiB, most cards on one node."""


@lru_cache(maxsize=SIZING_CACHE)
def host_need(weights: int, kv: int, s: Sizing) -> Need:
    """A llama.cpp replica in one node's RAM."""
    return llamacpp_host(weights, kv, s.shape, context=s.context, estimate=s.estimate, run=s.llamacpp)


@lru_cache(maxsize=SIZING_CACHE)
def gguf_width(weights: int, kv: int, mem_gb: int, max_gpus: int, s: Sizing) -> tuple[int, Need] | None:
    """The fewest of a node's cards of ``mem_gb`` GiB that hold a llama.cpp split, and what each holds
    (more cards than the fewest buy nothing here); None when even ``max_gpus`` do not."""
    for width in range(1, max_gpus + 1):
        run = s.llamacpp
        need = llamacpp_split(weights, kv, width, s.shape, context=s.context, estimate=s.estimate, run=run)
        if fits(gib(need.total), mem_gb):
            return width, need
    return None


@lru_cache(maxsize=SIZING_CACHE)
def vllm_need(
    weights: int,
    kv: int,
    shape: Shape,
    tp: int,
    pp: int,
    s: Sizing,
    run: VllmRun | None = None,
    *,
    dequantised: bool = False,
) -> Need:
    """One of ``tp × pp`` cards of a vLLM replica run with ``run`` (vLLM's defaults on an H100 where None),
    with the KV cache spread as vLLM shards it; ``dequantised``: bitsandbytes 4-bit weights."""
    spread = vllm_kv_spread(shape, kv, tp)
    return vllm_split(
        weights, spread, s.shape, tp=tp, pp=pp, context=s.context, estimate=s.estimate, run=run, dequantised=dequantised
    )


class GgufLayout:
    """A GGUF file's options on a pool's classes of card, but for the pool's counts: its replica in RAM
    (``host``), and on each class that can hold it (by the class's place in ``Classes``) split over the
    fewest cards that do. Each option as counted is kept too."""

    __slots__ = ("_counted", "cards", "host", "widths")

    def __init__(self, host: Option, cards: dict[int, Option]) -> None:
        self.host = host
        self.cards = cards
        self.widths = tuple((i, o.gpus_per_node) for i, o in cards.items())
        """``(class, cards)`` for each class that can hold it."""
        self._counted: dict[tuple[int, int, bool, float], Option] = {}

    def counted(self, i: int, hosts: int, free_now: bool, have_gb: float) -> Option:
        """The option on class ``i`` (-1: in RAM) with the pool's counts."""
        key = (i, hosts, free_now, have_gb)
        got = self._counted.get(key)
        if got is None:
            if len(self._counted) >= COUNTED_KEPT:
                self._counted.clear()
            template = self.host if i < 0 else self.cards[i]
            got = self._counted[key] = replace(template, hosts=hosts, free_now=free_now, have_gb=have_gb)
        return got


@lru_cache(maxsize=LAYOUT_CACHE)
def gguf_layout(a: Artifact, kv: int, bpw: float, s: Sizing, classes: Classes) -> GgufLayout:
    """``a``'s layout on ``classes``, with ``kv`` bytes of KV cache and ``bpw`` bits per weight."""

    args = s.llamacpp.args(s.context)

    def option(need: Need, **where: object) -> Option:
        return Option(
            artifact=a.name,
            format=a.format,
            engine="llamacpp",
            bits_per_weight=bpw,
            estimate=s.estimate,
            margin=s.margin(need),
            settings=args,
            **where,  # type: ignore[arg-type]
        )

    weights = a.weights_bytes
    in_ram = host_need(weights, kv, s)
    cards = {}
    for i, (gpu_class, mem_gb, max_gpus) in enumerate(classes):
        fewest = gguf_width(weights, kv, mem_gb, max_gpus, s)
        if fewest is not None:
            width, need = fewest
            cards[i] = option(need, gpu_class=gpu_class, gpus_per_node=width, nodes=1, need_gb=gib(need.total))
    return GgufLayout(option(in_ram, cpu=True, need_gb=gib(in_ram.total)), cards)


def clear() -> None:
    """Forget every kept sizing and layout (for tests that compare with a fresh count)."""
    for kept in (host_need, gguf_width, vllm_need, gguf_layout, *KEPT_ELSEWHERE):
        kept.cache_clear()


KEPT_ELSEWHERE: list[Any] = []
"""Caches built on these layouts in other modules (``planner.options``' requests), cleared with them."""
