"""Options: the ways the files a repository actually has could run on the cluster as it is.

Each artifact may run on one card, on several of a node's cards, on several nodes' cards over a fabric,
or on a CPU node, with what each card would hold, and whether the cards are free now or only exist.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from planner.constants import (
    CPU_QUALITY_CAP,
    HOST_SHARE,
    PAST_CAP_PENALTY,
    QUALITY_CAP,
    card_budget_gb,
    fits,
    gguf_overhead_bytes,
    gib,
    vllm_overhead_bytes,
)
from planner.model import Artifact, Option, PoolNode, Shape
from planner.quant import bits_of


def options(artifacts: Iterable[Artifact], shape: Shape, nodes: Sequence[PoolNode], context: int) -> list[Option]:
    """Every way each artifact could run, best first.

    ``context`` is the token pool: llama.cpp's ``--ctx-size``, or vLLM's ``--max-model-len`` for one
    sequence.
    """
    pools = classes(nodes)
    out: list[Option] = []
    for a in artifacts:
        bpw = bits_of(a.quant)
        if shape.params > 0:
            bpw = a.bytes * 8 / shape.params
        kv = context * shape.kv_bytes_per_token
        if a.format == "gguf":
            out += gguf_options(a, kv, nodes, pools, bpw)
        elif a.format == "safetensors":
            out += vllm_options(a, kv, shape, pools, bpw)
    rank(out)
    return out


def gguf_options(
    a: Artifact, kv: int, nodes: Sequence[PoolNode], pools: Sequence[ClassPool], bpw: float
) -> list[Option]:
    """llama.cpp: the whole replica in one node's RAM, or split by layer over the fewest of one node's
    cards that hold it."""
    out: list[Option] = []
    total = gib(a.bytes + kv + gguf_overhead_bytes(a.bytes))
    hosts, have, free_now = 0, 0.0, False
    for n in nodes:
        node_have = n.host_mem_gb * HOST_SHARE
        if n.host_mem_gb <= 0 or total > node_have:
            continue
        hosts += 1
        have = max(have, node_have)
        free_now = free_now or n.host_free_gb >= total
    if hosts:
        out.append(
            Option(
                artifact=a.name,
                format=a.format,
                engine="llamacpp",
                cpu=True,
                need_gb=total,
                have_gb=have,
                hosts=hosts,
                free_now=free_now,
                bits_per_weight=bpw,
            )
        )
    for c in pools:
        for width in range(1, c.max_gpus + 1):
            per = gib((a.bytes + kv) // width + gguf_overhead_bytes(a.bytes // width))
            if not fits(per, c.mem_gb):
                continue
            takers = [n for n in c.nodes if n.gpus >= width]
            out.append(
                Option(
                    artifact=a.name,
                    format=a.format,
                    engine="llamacpp",
                    gpu_class=c.gpu_class,
                    gpus_per_node=width,
                    nodes=1,
                    need_gb=per,
                    have_gb=c.budget_gb,
                    hosts=len(takers),
                    free_now=any(n.free_gpus >= width for n in takers),
                    bits_per_weight=bpw,
                )
            )
            break  # more cards than the fewest that hold it buys nothing here
    return out


def vllm_options(a: Artifact, kv: int, shape: Shape, pools: Sequence[ClassPool], bpw: float) -> list[Option]:
    """vLLM: tensor parallel over the narrowest power of two of one node's cards that holds it; failing
    that, a node's full width on each of several nodes of one fabric, pipeline parallel between them."""

    def per_card_gb(width: int) -> float:
        return gib((a.bytes + kv) // width + vllm_overhead_bytes(a.bytes // width))

    def divides(w: int) -> bool:
        # Tensor parallel within a node must divide the KV heads.
        return shape.kv_heads == 0 or (w <= shape.kv_heads and shape.kv_heads % w == 0)

    def option(c: ClassPool, per_node: int, n: int, fabric: str, hosts: int, free_now: bool) -> Option:
        return Option(
            artifact=a.name,
            format=a.format,
            engine="vllm",
            gpu_class=c.gpu_class,
            fabric=fabric,
            gpus_per_node=per_node,
            nodes=n,
            need_gb=per_card_gb(per_node * n),
            have_gb=c.budget_gb,
            hosts=hosts,
            free_now=free_now,
            bits_per_weight=bpw,
        )

    out: list[Option] = []
    for c in pools:
        single = None
        w = 1
        while w <= c.max_gpus and divides(w):
            if fits(per_card_gb(w), c.mem_gb):
                takers = [nd for nd in c.nodes if nd.gpus >= w]
                single = option(c, w, 1, "", len(takers), any(nd.free_gpus >= w for nd in takers))
                break
            w *= 2
        if single is not None:
            out.append(single)
            continue
        for fab in c.fabrics:
            if fab.name:
                multi = _across_nodes(fab, divides, per_card_gb, c.mem_gb)
                if multi is not None:
                    width, n, hosts, free = multi
                    out.append(option(c, width, n, fab.name, hosts, free >= n))
    return out


def _across_nodes(
    fab: FabricPool, divides: Callable[[int], bool], per_card_gb: Callable[[int], float], mem_gb: int
) -> tuple[int, int, int, int] | None:
    """The pipeline-parallel layout on one fabric: ``(cards per node, nodes, hosts, free hosts)``.

    Each node gives its full width (the largest power of two of its cards), and the layout takes the
    fewest cards in all, then the fewest nodes. On a fabric of like nodes that is the seed's rule
    exactly. Where node widths differ, the seed took the widest node of the class for everyone, so
    adding one wide node could leave narrower nodes without a layout; here each width present in the
    fabric is tried with the nodes that have that many cards, so a new node only ever adds layouts.
    """
    best: tuple[int, int, int, int] | None = None
    for width in sorted({_full_width(nd.gpus) for nd in fab.nodes}, reverse=True):
        if not divides(width):
            continue
        takers = [nd for nd in fab.nodes if nd.gpus >= width]
        n = 2
        while n <= len(takers):
            if fits(per_card_gb(width * n), mem_gb):
                if best is None or width * n < best[0] * best[1]:
                    free = sum(1 for nd in takers if nd.free_gpus >= width)
                    best = (width, n, len(takers), free)
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


def classes(nodes: Iterable[PoolNode]) -> list[ClassPool]:
    """GPU nodes grouped by card, and each by fabric (in the order first seen), classes sorted by label.

    A class is its label and its card size together: the seed took the first node's size for the whole
    label, which made the plan depend on the order of heartbeats if two nodes disagreed.
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
