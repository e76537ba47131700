"""Options: the ways the files a repository actually has could run on the cluster as it is.

Each artifact may run on one card, on several of a node's cards, on several nodes' cards over a fabric,
or on a CPU node, with what each card would hold, and whether the cards are free now or only exist.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from operator import attrgetter

from planner import layouts
from planner.constants import (
    CPU_QUALITY_CAP,
    LLAMACPP_STATE_WIDENING,
    PAST_CAP_PENALTY,
    QUALITY_CAP,
    card_budget_gb,
)
from planner.estimate import DEFAULT_ESTIMATE, Estimate, Sizing, engine_shape
from planner.groups import Group, HostPool, counted_groups, grouped_key
from planner.index import PoolIndex
from planner.layouts import LAYOUT_CACHE, Classes, GgufLayout, gguf_layout
from planner.model import Artifact, Option, PoolNode, Shape
from planner.parallel import llamacpp_kv_bytes, vllm_kv_bytes
from planner.platform import Graphs, graphs_of, worst
from planner.quant import bits_of
from planner.settings import NO_SETTINGS, Settings, llamacpp_run
from planner.view import Nodes, PoolView, pool_view
from planner.vllmlayout import Kept, VllmLayout, vllm_options

__all__ = ["options", "vllm_options"]


def options(
    artifacts: Iterable[Artifact],
    shape: Shape,
    nodes: Nodes,
    context: int,
    estimate: Estimate = DEFAULT_ESTIMATE,
    settings: Settings = NO_SETTINGS,
) -> list[Option]:
    """Every way each artifact could run, best first.

    ``context`` is the tokens one request may hold: llama.cpp's ``--ctx-size`` for each slot, or vLLM's
    ``--max-model-len``. ``estimate`` says how an engine's own cost is counted (``planner.estimate``), and
    ``settings`` what the engines are started with (``planner.settings``: the rest at each engine's
    defaults for the card). ``nodes``: a list is counted (one pass); an index (``planner.index``) has the
    counts already.

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
        tuple(artifacts),
        shape,
        context,
        estimate,
        tuple((c.gpu_class, c.mem_gb, c.max_gpus) for c in pools),
        settings,
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
    originals: tuple[VllmLayout, ...]
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
    artifacts: tuple[Artifact, ...],
    shape: Shape,
    context: int,
    estimate: Estimate,
    classes: Classes,
    settings: Settings = NO_SETTINGS,
) -> _Request:
    gguf: list[GgufLayout] = []
    originals: list[VllmLayout] = []
    order: list[tuple[bool, int]] = []
    for a in artifacts:
        bpw = bits_of(a.quant)
        params = shape.params - shape.vision_params if a.format == "gguf" else shape.params
        if params > 0:
            bpw = a.weights_bytes * 8 / params
        if a.format == "gguf":
            sizing = Sizing(estimate, engine_shape(shape, gguf=True), context, settings)
            order.append((True, len(gguf)))
            gguf.append(gguf_layout(a, gguf_kv_bytes(shape, context, settings), bpw, sizing, classes))
        elif a.format in ("safetensors", "pytorch"):
            order.append((False, len(originals)))
            sizing = Sizing(estimate, engine_shape(shape), context, settings)
            kv = original_kv_bytes(shape, context, settings)
            originals.append(VllmLayout(a, kv, shape, bpw, sizing, next(_KEYS)))
    widths = sorted({w for layout in gguf for w in layout.widths})
    in_ram = sorted({layout.host.need_gb for layout in gguf})
    return _Request(tuple(gguf), tuple(originals), tuple(order), tuple(widths), tuple(in_ram))


def gguf_kv_bytes(shape: Shape, context: int, settings: Settings = NO_SETTINGS) -> int:
    """The KV cache llama-server allocates for a context of ``context`` tokens a request: every slot's
    where the slots have their own, in the cache types set; and a hybrid's recurrent state for every slot,
    in f32 (``llama_memory_recurrent`` keeps one per sequence, ``n_seq_max``), twice the 16 bits
    ``state_bytes_per_sequence`` counts."""
    run = llamacpp_run(settings.llamacpp)
    f16 = llamacpp_kv_bytes(
        shape, run.cache_tokens(context), sequences=run.slots, ubatch=run.ubatch, unified=run.unified
    )
    return run.kv_bytes(f16) + run.slots * shape.state_bytes_per_sequence * LLAMACPP_STATE_WIDENING


def original_kv_bytes(shape: Shape, context: int, settings: Settings = NO_SETTINGS) -> int:
    """The KV cache vLLM allocates for one sequence of ``context`` tokens, in the ``kv_cache_dtype`` set
    (an fp8 cache takes one byte an element where the model's dtype takes two), and a hybrid's state for
    that sequence, which vLLM keeps in the same pool (a block a sequence for its Mamba-like layers)."""
    v = settings.vllm
    kv = vllm_kv_bytes(shape, context, v.max_num_batched_tokens)
    kv = kv // 2 if (v.kv_cache_dtype or "auto").startswith("fp8") else kv
    return kv + shape.state_bytes_per_sequence


_KEYS = itertools.count()
"""A key for each original's layouts as a request sized them, for the pool's groups to keep them by."""

layouts.KEPT_ELSEWHERE.append(_request)


def _ranked(
    request: _Request, pools: Sequence[Group], host_pool: HostPool | None, originals: tuple[tuple[Kept, ...], ...]
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

    @property
    def graphs(self) -> Graphs:
        """What vLLM's graphs take on the class's cards: the most any of its nodes' take."""
        return worst(graphs_of(n.gpu_vendor, n.gpu_driver) for n in self.nodes)


_NAME = attrgetter("name")


def grouped(nodes: Iterable[PoolNode]) -> list[Group]:
    """``classes(nodes)`` with like nodes counted rather than listed: the same classes in the same order,
    each with the same fabrics in the same order (by name). Counting the nodes by what a plan reads of them
    is one pass in C; everything after is in the number of kinds of node (a few hundred in a pool of
    100,000)."""
    by, _ = counted_groups(Counter(filter(None, map(grouped_key, nodes))))
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
