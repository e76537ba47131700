"""vLLM's layouts of an original: tensor parallel on one node's cards, or pipeline parallel over several
nodes of one fabric, each sized on a class of card with vLLM's settings as that card runs them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache

from planner.constants import gib
from planner.estimate import Need, Sizing
from planner.groups import FabricGroup, Group
from planner.layouts import vllm_need
from planner.model import Artifact, Option, Shape
from planner.parallel import vllm_tp_allowed
from planner.quantconfig import BNB_4BIT
from planner.settings import VllmRun, vllm_run


def fits_share(need_gb: float, card_gb: float, share: float) -> bool:
    """Whether ``need_gb`` fits in ``share`` of a card of ``card_gb`` GiB (vLLM's
    ``--gpu-memory-utilization``)."""
    return need_gb <= card_gb * share


def vllm_options(
    a: Artifact, kv: int, shape: Shape, pools: Sequence[Group], bpw: float, sizing: Sizing | None = None
) -> list[Option]:
    """vLLM: tensor parallel over the narrowest power of two of one node's cards that holds it; failing
    that, a node's full width on each of several nodes of one fabric, pipeline parallel between them.
    Widths are those vLLM accepts (``planner.parallel.vllm_tp_allowed``), and each card holds its share
    of the KV cache as vLLM shards it (replicated KV heads, the whole MLA latent)."""
    layout = VllmLayout(a, kv, shape, bpw, sizing or Sizing())
    return [o for c in pools for o in layout.on(c)]


class VllmLayout:
    """One original's vLLM layouts, made a class of card at a time (``on``)."""

    __slots__ = ("a", "bpw", "key", "need", "shape", "sizing")

    def __init__(self, a: Artifact, kv: int, shape: Shape, bpw: float, sizing: Sizing, key: int | None = None) -> None:
        self.a, self.shape, self.bpw, self.sizing = a, shape, bpw, sizing
        self.key = key
        """What the layouts are kept by in the pool's groups (``Group.kept``); None: not kept."""

        @cache  # a layout's need is the same on every fabric, and a pool may have hundreds of fabrics
        def need(tp: int, pp: int, run: VllmRun) -> Need:
            return vllm_need(a.weights_bytes, kv, shape, tp, pp, sizing, run, dequantised=a.quant == BNB_4BIT)

        self.need = need

    def run(self, c: Group) -> VllmRun:
        """vLLM's settings on class ``c``: the request's, and vLLM's defaults on that card for the rest, with
        what its nodes' vendor and driver make of the graphs."""
        return vllm_run(self.sizing.settings.vllm, c.gpu_class, c.mem_gb, self.sizing.context, c.graphs)

    def per_card_gb(self, tp: int, pp: int, run: VllmRun) -> float:
        return gib(self.need(tp, pp, run).total)

    def divides(self, w: int) -> bool:
        return vllm_tp_allowed(self.shape, w)

    def option(self, c: Group, per_node: int, n: int, fabric: str, hosts: int, free_now: bool) -> Option:
        a, s = self.a, self.sizing
        run = self.run(c)
        return Option(
            artifact=a.name,
            format=a.format,
            engine="vllm",
            gpu_class=c.gpu_class,
            fabric=fabric,
            gpus_per_node=per_node,
            nodes=n,
            need_gb=self.per_card_gb(per_node, n, run),
            # the class's budget names the class (the pool's index finds its nodes by it); the fit above
            # was against the share the settings give
            have_gb=c.budget_gb,
            hosts=hosts,
            free_now=free_now,
            bits_per_weight=self.bpw,
            estimate=s.estimate,
            margin=s.margin(self.need(per_node, n, run)),
            settings=run.args(),
        )

    def on(self, c: Group) -> list[Option]:
        """The layouts on class ``c``: one on a node's cards, or failing that one on each fabric."""
        run = self.run(c)
        w = 1
        while w <= c.max_gpus and self.divides(w):
            if fits_share(self.per_card_gb(w, 1, run), c.mem_gb, run.gpu_memory_utilization):
                hosts, free = c.takers(w)
                return [self.option(c, w, 1, "", hosts, free > 0)]
            w *= 2
        out: list[Option] = []
        for fab in c.fabrics:
            if fab.name:
                o = self.across(c, fab)
                if o is not None:
                    out.append(o)
        return out

    def across(self, c: Group, fab: FabricGroup) -> Option | None:
        """The layout over several of ``fab``'s nodes, if one holds the original; kept with the fabric's
        counts when this layout is kept."""
        key = self.key
        if key is not None:
            o = fab.kept.get(key, _UNKNOWN)
            if o is not _UNKNOWN:
                return o  # type: ignore[return-value]
        run = self.run(c)
        multi = across_nodes(
            fab, self.divides, lambda w, n: self.per_card_gb(w, n, run), c.mem_gb, run.gpu_memory_utilization
        )
        o = None
        if multi is not None:
            width, n, hosts, free = multi
            o = self.option(c, width, n, fab.name, hosts, free >= n)
        if key is not None:
            keep(fab.kept, key, o)
        return o

    def kept_on(self, pools: Sequence[Group]) -> tuple[Kept, ...]:
        """``on`` each class, kept in the class's counts: worked out again only for a class that changed,
        and then only on the fabrics that changed."""
        key = self.key
        assert key is not None
        out: list[Kept] = []
        for c in pools:
            got = c.kept.get(key)
            if got is None:
                got = Kept(tuple(self.on(c)))
                keep(c.kept, key, got)
            out.append(got)  # type: ignore[arg-type]
        return tuple(out)


_UNKNOWN = object()
KEPT_PER_GROUP = 64
"""Layouts a group keeps at most, one per original planned lately: more, and it forgets them all."""


def keep(kept: dict[int, object], key: int, value: object) -> None:
    if len(kept) >= KEPT_PER_GROUP:
        kept.clear()
    kept[key] = value


class Kept:
    """A class's options for one original, hashed once: part of the key a request's rankings are kept by."""

    __slots__ = ("_hash", "options")

    def __init__(self, options: tuple[Option, ...]) -> None:
        self.options = options
        self._hash = hash(options)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Kept) and (self.options is other.options or self.options == other.options)


def across_nodes(
    fab: FabricGroup,
    divides: Callable[[int], bool],
    per_card_gb: Callable[[int, int], float],
    mem_gb: int,
    share: float,
) -> tuple[int, int, int, int] | None:
    """The pipeline-parallel layout on one fabric: ``(cards per node, nodes, hosts, free hosts)``.

    Each node gives its full width (the largest power of two of its cards), and the layout takes the
    fewest cards in all, then the fewest nodes. On a fabric of like nodes that is the seed's rule
    exactly. Where node widths differ, the seed took the widest node of the class for everyone, so
    adding one wide node could leave narrower nodes without a layout; here each width present in the
    fabric is tried with the nodes that have that many cards, so a new node only ever adds layouts.
    """
    best: tuple[int, int, int, int] | None = None
    for width in sorted({full_width(gpus) for gpus, _ in fab.cards}, reverse=True):
        if not divides(width):
            continue
        takers, free = fab.takers(width)
        n = 2
        while n <= takers:
            if fits_share(per_card_gb(width, n), mem_gb, share):
                if best is None or width * n < best[0] * best[1]:
                    best = (width, n, takers, free)
                break
            n *= 2
    return best


def full_width(gpus: int) -> int:
    """The largest power of two not above ``gpus``."""
    return 1 << (gpus.bit_length() - 1)
