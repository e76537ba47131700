"""Options: the ways the files a repository actually has could run on the cluster as it is.

Each artifact may run on one card, on several of a node's cards, on several nodes' cards over a fabric,
or on a CPU node, with what each card would hold, and whether the cards are free now or only exist.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache
from operator import attrgetter

from planner import layouts
from planner.constants import (
    CPU_QUALITY_CAP,
    PAST_CAP_PENALTY,
    QUALITY_CAP,
    card_budget_gb,
    fits,
    gib,
)
from planner.estimate import (
    DEFAULT_ESTIMATE,
    Estimate,
    Need,
    Sizing,
    engine_shape,
)
from planner.groups import FabricGroup, Group, HostPool, counted_groups
from planner.index import PoolIndex
from planner.layouts import LAYOUT_CACHE, Classes, GgufLayout, gguf_layout, vllm_need
from planner.model import Artifact, Option, PoolNode, Shape
from planner.parallel import llamacpp_kv_bytes, vllm_kv_bytes, vllm_tp_allowed
from planner.quant import bits_of
from planner.view import Nodes, PoolView, pool_view


def options(
    artifacts: Iterable[Artifact],
    shape: Shape,
    nodes: Nodes,
    context: int,
    estimate: Estimate = DEFAULT_ESTIMATE,
) -> list[Option]:
    """Every way each artifact could run, best first.

    ``context`` is the token pool: llama.cpp's ``--ctx-size``, or vLLM's ``--max-model-len`` for one
    sequence. ``estimate`` says how an engine's own cost is counted (``planner.estimate``). ``nodes``: a
    list is counted (one pass); an index (``planner.index``) has the counts already.

    What each file needs on each class is sized once and kept (``planner.layouts``), and so is the
    ranking a request's options come to for the pool's counts: a worker planning the same repository
    again, on a pool whose counts moved only where no option's do, ranks nothing anew.
    """
    if isinstance(nodes, PoolIndex | PoolView):
        view = pool_view(nodes)
        pools = view.groups()
        hosts: Callable[[], HostPool] = view.hosts
    else:
        pools = grouped(nodes)
        hosts = lambda: HostPool.of(nodes)  # noqa: E731 (counted only for a request with a GGUF)
    request = _request(
        tuple(artifacts), shape, context, estimate, tuple((c.gpu_class, c.mem_gb, c.max_gpus) for c in pools)
    )
    host_pool = hosts() if request.in_ram else None
    originals = tuple(layout.kept_on(pools) for layout in request.originals)
    counts = (
        tuple(_counted(pools[i], width) for i, width in request.widths),
        tuple((*host_pool.holding(need), host_pool.best_free >= need) for need in request.in_ram) if host_pool else (),
        originals,
    )
    ranked = request.ranked.get(counts)
    if ranked is None:
        if len(request.ranked) >= RANKINGS_KEPT:
            request.ranked.clear()
        ranked = request.ranked[counts] = _ranked(request, pools, host_pool, originals)
    return list(ranked)


def _counted(c: Group, width: int) -> tuple[int, bool]:
    hosts, free = c.takers(width)
    return hosts, free > 0


@dataclass(slots=True)
class _Request:
    """A request's files as sized on a pool's classes: each GGUF's layout, each original's sizing, and the
    rankings made so far, by the pool's counts that options read."""

    gguf: tuple[GgufLayout, ...]
    originals: tuple[_VllmLayout, ...]
    order: tuple[tuple[bool, int], ...]
    """Each artifact in the request's order: ``(is GGUF, its place in gguf or originals)``."""
    widths: tuple[tuple[int, int], ...]
    """Every ``(class, cards)`` a GGUF option takes: what a ranking depends on of the cards."""
    in_ram: tuple[float, ...]
    """Every GGUF's need in RAM: what a ranking depends on of the hosts."""
    ranked: dict[object, tuple[Option, ...]] = field(default_factory=dict)


RANKINGS_KEPT = 64
"""Rankings kept per request: one per set of counts seen lately."""


@lru_cache(maxsize=LAYOUT_CACHE)
def _request(
    artifacts: tuple[Artifact, ...], shape: Shape, context: int, estimate: Estimate, classes: Classes
) -> _Request:
    gguf: list[GgufLayout] = []
    originals: list[_VllmLayout] = []
    order: list[tuple[bool, int]] = []
    for a in artifacts:
        bpw = bits_of(a.quant)
        params = shape.params - shape.vision_params if a.format == "gguf" else shape.params
        if params > 0:
            bpw = a.weights_bytes * 8 / params
        if a.format == "gguf":
            sizing = Sizing(estimate, engine_shape(shape, gguf=True), context)
            order.append((True, len(gguf)))
            gguf.append(gguf_layout(a, llamacpp_kv_bytes(shape, context), bpw, sizing, classes))
        elif a.format in ("safetensors", "pytorch"):
            order.append((False, len(originals)))
            sizing = Sizing(estimate, engine_shape(shape), context)
            originals.append(_VllmLayout(a, vllm_kv_bytes(shape, context), shape, bpw, sizing, next(_KEYS)))
    widths = sorted({w for layout in gguf for w in layout.widths})
    in_ram = sorted({layout.host.need_gb for layout in gguf})
    return _Request(tuple(gguf), tuple(originals), tuple(order), tuple(widths), tuple(in_ram))


_KEYS = itertools.count()
"""A key for each original's layouts as a request sized them, for the pool's groups to keep them by."""

layouts.KEPT_ELSEWHERE.append(_request)


def _ranked(
    request: _Request, pools: Sequence[Group], host_pool: HostPool | None, originals: tuple[tuple[_Kept, ...], ...]
) -> tuple[Option, ...]:
    out: list[Option] = []
    for is_gguf, at in request.order:
        if is_gguf:
            assert host_pool is not None
            out += gguf_options(request.gguf[at], host_pool, pools)
        else:
            for kept in originals[at]:
                out += kept.options
    rank(out)
    return tuple(out)


def gguf_options(layout: GgufLayout, host_pool: HostPool, pools: Sequence[Group]) -> list[Option]:
    """llama.cpp: the whole replica in one node's RAM, or split by layer over the fewest of one node's
    cards that hold it (``layout``, made for ``pools``' classes), with the pool's counts."""
    out: list[Option] = []
    need = layout.host.need_gb
    hosts, have = host_pool.holding(need)
    if hosts:
        # a node could take it now if its RAM share and its free RAM both hold it: that is, if the smaller
        # of the two does, and the largest such smaller is the pool's best
        out.append(layout.counted(-1, hosts, host_pool.best_free >= need, have))
    for i, width in layout.widths:
        hosts, free = pools[i].takers(width)
        out.append(layout.counted(i, hosts, free > 0, pools[i].budget_gb))
    return out


def vllm_options(
    a: Artifact, kv: int, shape: Shape, pools: Sequence[Group], bpw: float, sizing: Sizing | None = None
) -> list[Option]:
    """vLLM: tensor parallel over the narrowest power of two of one node's cards that holds it; failing
    that, a node's full width on each of several nodes of one fabric, pipeline parallel between them.
    Widths are those vLLM accepts (``planner.parallel.vllm_tp_allowed``), and each card holds its share
    of the KV cache as vLLM shards it (replicated KV heads, the whole MLA latent)."""
    layout = _VllmLayout(a, kv, shape, bpw, sizing or Sizing())
    return [o for c in pools for o in layout.on(c)]


class _VllmLayout:
    """One original's vLLM layouts, made a class of card at a time (``on``)."""

    __slots__ = ("a", "bpw", "key", "need", "shape", "sizing")

    def __init__(self, a: Artifact, kv: int, shape: Shape, bpw: float, sizing: Sizing, key: int | None = None) -> None:
        self.a, self.shape, self.bpw, self.sizing = a, shape, bpw, sizing
        self.key = key
        """What the layouts are kept by in the pool's groups (``Group.kept``); None: not kept."""

        @cache  # a layout's need is the same on every fabric, and a pool may have hundreds of fabrics
        def need(tp: int, pp: int = 1) -> Need:
            return vllm_need(a.weights_bytes, kv, shape, tp, pp, sizing)

        self.need = need

    def per_card_gb(self, tp: int, pp: int = 1) -> float:
        return gib(self.need(tp, pp).total)

    def divides(self, w: int) -> bool:
        return vllm_tp_allowed(self.shape, w)

    def option(self, c: Group, per_node: int, n: int, fabric: str, hosts: int, free_now: bool) -> Option:
        a, s = self.a, self.sizing
        return Option(
            artifact=a.name,
            format=a.format,
            engine="vllm",
            gpu_class=c.gpu_class,
            fabric=fabric,
            gpus_per_node=per_node,
            nodes=n,
            need_gb=self.per_card_gb(per_node, n),
            have_gb=c.budget_gb,
            hosts=hosts,
            free_now=free_now,
            bits_per_weight=self.bpw,
            estimate=s.estimate,
            margin=s.margin(self.need(per_node, n)),
        )

    def on(self, c: Group) -> list[Option]:
        """The layouts on class ``c``: one on a node's cards, or failing that one on each fabric."""
        w = 1
        while w <= c.max_gpus and self.divides(w):
            if fits(self.per_card_gb(w), c.mem_gb):
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
        multi = _across_nodes(fab, self.divides, self.per_card_gb, c.mem_gb)
        o = None
        if multi is not None:
            width, n, hosts, free = multi
            o = self.option(c, width, n, fab.name, hosts, free >= n)
        if key is not None:
            _keep(fab.kept, key, o)
        return o

    def kept_on(self, pools: Sequence[Group]) -> tuple[_Kept, ...]:
        """``on`` each class, kept in the class's counts: worked out again only for a class that changed,
        and then only on the fabrics that changed."""
        key = self.key
        assert key is not None
        out: list[_Kept] = []
        for c in pools:
            got = c.kept.get(key)
            if got is None:
                got = _Kept(tuple(self.on(c)))
                _keep(c.kept, key, got)
            out.append(got)  # type: ignore[arg-type]
        return tuple(out)


_UNKNOWN = object()
KEPT_PER_GROUP = 64
"""Layouts a group keeps at most, one per original planned lately: more, and it forgets them all."""


def _keep(kept: dict[int, object], key: int, value: object) -> None:
    if len(kept) >= KEPT_PER_GROUP:
        kept.clear()
    kept[key] = value


class _Kept:
    """A class's options for one original, hashed once: part of the key a request's rankings are kept by."""

    __slots__ = ("_hash", "options")

    def __init__(self, options: tuple[Option, ...]) -> None:
        self.options = options
        self._hash = hash(options)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Kept) and (self.options is other.options or self.options == other.options)


def _across_nodes(
    fab: FabricGroup, divides: Callable[[int], bool], per_card_gb: Callable[[int, int], float], mem_gb: int
) -> tuple[int, int, int, int] | None:
    """The pipeline-parallel layout on one fabric: ``(cards per node, nodes, hosts, free hosts)``.

    Each node gives its full width (the largest power of two of its cards), and the layout takes the
    fewest cards in all, then the fewest nodes. On a fabric of like nodes that is the seed's rule
    exactly. Where node widths differ, the seed took the widest node of the class for everyone, so
    adding one wide node could leave narrower nodes without a layout; here each width present in the
    fabric is tried with the nodes that have that many cards, so a new node only ever adds layouts.
    """
    best: tuple[int, int, int, int] | None = None
    for width in sorted({_full_width(gpus) for gpus, _ in fab.cards}, reverse=True):
        if not divides(width):
            continue
        takers, free = fab.takers(width)
        n = 2
        while n <= takers:
            if fits(per_card_gb(width, n), mem_gb):
                if best is None or width * n < best[0] * best[1]:
                    best = (width, n, takers, free)
                break
            n *= 2
    return best


def _full_width(gpus: int) -> int:
    """The largest power of two not above ``gpus``."""
    return 1 << (gpus.bit_length() - 1)


@dataclass(slots=True)
class FabricPool:
    """One card class's nodes on one fabric: a replica spans nodes only within one."""

    name: str
    nodes: list[PoolNode] = field(default_factory=list)


@dataclass(slots=True)
class ClassPool:
    """The GPU nodes of one card class (one label, one card size), by fabric."""

    gpu_class: str
    mem_gb: int
    max_gpus: int = 0
    fabrics: list[FabricPool] = field(default_factory=list)

    @property
    def budget_gb(self) -> float:
        return card_budget_gb(self.mem_gb)

    @property
    def nodes(self) -> list[PoolNode]:
        return [n for f in self.fabrics for n in f.nodes]


CARDS = attrgetter("gpu_class", "gpu_mem_gb", "fabric", "gpus", "free_gpus")
_NAME = attrgetter("name")


def grouped(nodes: Iterable[PoolNode]) -> list[Group]:
    """``classes(nodes)`` with like nodes counted rather than listed: the same classes in the same order,
    each with the same fabrics in the same order (by name). Counting the nodes by what a plan reads of them
    is one pass in C; everything after is in the number of kinds of node (a few hundred in a pool of
    100,000)."""
    by, _ = counted_groups(Counter(map(CARDS, nodes)))
    return [by[k] for k in sorted(by)]


def classes(nodes: Iterable[PoolNode]) -> list[ClassPool]:
    """GPU nodes grouped by card, and each by fabric, classes sorted by label and fabrics by name.

    A class is its label and its card size together: the seed took the first node's size for the whole
    label, which made the plan depend on the order of heartbeats if two nodes disagreed. Fabrics are in
    order of name for the same reason: ``rank`` is stable, so their order breaks ties between otherwise
    equal layouts on two fabrics, and the order in which nodes were first seen is the order of heartbeats.
    """
    by: dict[tuple[str, int], ClassPool] = {}
    fabrics: dict[tuple[str, int, str], FabricPool] = {}
    for n in nodes:
        if not n.gpu_class or n.gpus <= 0 or n.gpu_mem_gb <= 0:
            continue
        key = (n.gpu_class, n.gpu_mem_gb)
        c = by.get(key)
        if c is None:
            c = by[key] = ClassPool(gpu_class=n.gpu_class, mem_gb=n.gpu_mem_gb)
        c.max_gpus = max(c.max_gpus, n.gpus)
        fab = fabrics.get((*key, n.fabric))
        if fab is None:
            fab = fabrics[(*key, n.fabric)] = FabricPool(name=n.fabric)
            c.fabrics.append(fab)
        fab.nodes.append(n)
    for c in by.values():
        c.fabrics.sort(key=_NAME)
    return [by[k] for k in sorted(by)]


def quality(o: Option) -> float:
    """An option's precision score: rising with bits per weight up to the cap, falling past it."""
    if o.bits_per_weight == 0:
        return 0.0
    limit = CPU_QUALITY_CAP if o.cpu else QUALITY_CAP
    if o.bits_per_weight <= limit:
        return o.bits_per_weight
    return limit - (o.bits_per_weight - limit) * PAST_CAP_PENALTY


def rank_key(o: Option) -> tuple[bool, int, int, float, bool, float]:
    """What ``rank`` sorts by, smallest first."""
    return (o.cpu, o.gpus, o.nodes, -quality(o), not o.free_now, -(o.have_gb - o.need_gb))


def rank(opts: list[Option]) -> None:
    """Order options best first, in place, by what the hardware is, not by what it is doing: on a card
    before the CPU; the fewest cards, then nodes; then the better precision, up to eight bits. Whether
    the cards are free now only breaks a tie, then the most room left.

    Busy is not unfit. Ranking what was free first made every file of every repository come out on the
    CPU on a cluster whose one card was in use, which turned down the very file the card was there for.
    A model served onto cards that are busy waits for one, or with its fallbacks runs elsewhere until
    then.
    """
    opts.sort(key=rank_key)
