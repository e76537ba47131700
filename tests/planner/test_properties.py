"""Rules that hold for every input, checked with hypothesis."""

from __future__ import annotations

import itertools
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from planner import Artifact, Option, PoolNode, Shape, layouts, options, rank, rank_key
from planner.constants import GIB

CLASSES = [("h100-80g", 80), ("a100-40g", 40), ("l40s-48g", 48), ("rtx4090-24g", 24), ("mi", 192)]
FABRICS = ["", "ib-a", "ib-b"]


@st.composite
def nodes(draw: st.DrawFn, node_id: str | None = None) -> PoolNode:
    kind = draw(st.integers(0, len(CLASSES)))
    host = draw(st.integers(0, 2048))
    host_free = draw(st.integers(0, host))
    nid = node_id or draw(st.text("abc123", min_size=1, max_size=6))
    if kind == len(CLASSES):
        return PoolNode(id=nid, host_mem_gb=host, host_free_gb=host_free)
    label, mem = CLASSES[kind]
    gpus = draw(st.sampled_from([1, 2, 3, 4, 6, 8, 16]))
    return PoolNode(
        id=nid,
        gpu_class=label,
        fabric=draw(st.sampled_from(FABRICS)),
        gpu_mem_gb=mem,
        gpus=gpus,
        free_gpus=draw(st.integers(0, gpus)),
        host_mem_gb=host,
        host_free_gb=host_free,
    )


artifacts = st.builds(
    Artifact,
    name=st.sampled_from(["a-Q4_K_M.gguf", "b-Q8_0.gguf", "c-F16.gguf", "d-IQ2_XS.gguf", "e.gguf", "original"]),
    format=st.sampled_from(["gguf", "safetensors"]),
    bytes=st.integers(1, 2000 * GIB),
    quant=st.sampled_from(["", "Q4_K_M", "Q8_0", "bf16", "F16", "IQ2_XS"]),
)
shapes = st.builds(
    Shape,
    kv_bytes_per_token=st.integers(0, 1 << 20),
    kv_heads=st.sampled_from([0, 1, 2, 4, 6, 8, 16, 32, 128]),
    params=st.sampled_from([0, 1_000_000_000, 8_000_000_000, 70_000_000_000, 671_000_000_000]),
)
contexts = st.integers(1, 131072)
pools = st.lists(nodes(), max_size=12)


def option_lists() -> st.SearchStrategy[list[Option]]:
    return st.lists(
        st.builds(
            Option,
            artifact=st.sampled_from("abc"),
            format=st.just("gguf"),
            engine=st.just("llamacpp"),
            cpu=st.booleans(),
            gpus_per_node=st.integers(0, 8),
            nodes=st.integers(0, 4),
            need_gb=st.floats(0, 200, allow_nan=False),
            have_gb=st.floats(0, 200, allow_nan=False),
            free_now=st.booleans(),
            bits_per_weight=st.sampled_from([0, 1.6, 4.8, 5.8, 8.5, 8.6, 16, 32]),
        ),
        max_size=20,
    )


@given(option_lists(), st.randoms())
def test_rank_is_a_consistent_total_order(opts: list[Option], rnd: random.Random) -> None:
    ranked = list(opts)
    rank(ranked)
    shuffled = list(opts)
    rnd.shuffle(shuffled)
    rank(shuffled)
    # whatever order it starts from, rank yields the same sequence up to options it holds equal
    assert [rank_key(o) for o in ranked] == [rank_key(o) for o in shuffled]
    assert sorted(ranked, key=id) == sorted(opts, key=id)
    for a, b in itertools.pairwise(ranked):
        assert not rank_key(b) < rank_key(a)
    # ranking a ranked list changes nothing
    again = list(ranked)
    rank(again)
    assert again == ranked


@given(st.lists(artifacts, max_size=4), shapes, pools, contexts)
@settings(max_examples=300)
def test_no_option_needs_more_than_it_has(arts: list[Artifact], shape: Shape, pool: list[PoolNode], ctx: int) -> None:
    for o in options(arts, shape, pool, ctx):
        assert 0 < o.need_gb <= o.have_gb
        assert o.hosts >= max(o.nodes, 1)
        if not o.cpu:
            # some node of the class has the cards, and card totals are powers of two for vLLM
            assert any(n.gpu_class == o.gpu_class and n.gpus >= o.gpus_per_node for n in pool)
            if o.engine == "vllm":
                assert o.gpus & (o.gpus - 1) == 0
                assert shape.kv_heads == 0 or shape.kv_heads % o.gpus_per_node == 0


@given(st.lists(artifacts, min_size=1, max_size=4), shapes, pools, nodes(node_id="added"), contexts)
@settings(max_examples=400)
def test_adding_a_node_never_removes_an_option(
    arts: list[Artifact], shape: Shape, pool: list[PoolNode], added: PoolNode, ctx: int
) -> None:
    before = options(arts, shape, pool, ctx)
    after = options(arts, shape, [*pool, added], ctx)
    for o in before:
        assert any(covers(p, o) for p in after), f"{o} lost when adding {added}"


def covers(p: Option, o: Option) -> bool:
    """``p`` runs ``o``'s artifact where ``o`` did, on no more cards, with no fewer hosts or free ones when it
    is the same layout. On the CPU the room said may shrink, still holding it: a node without cards that
    holds it is taken first, and its room is the one said."""
    same_place = (p.artifact, p.format, p.engine, p.cpu, p.gpu_class, p.have_gb) == (
        o.artifact,
        o.format,
        o.engine,
        o.cpu,
        o.gpu_class,
        o.have_gb if not o.cpu else p.have_gb,
    )
    if not same_place or p.gpus > o.gpus:
        return False
    if (p.gpus_per_node, p.nodes, p.fabric) == (o.gpus_per_node, o.nodes, o.fabric):
        room = p.have_gb >= p.need_gb if p.cpu else p.have_gb >= o.have_gb
        return p.hosts >= o.hosts and (p.free_now or not o.free_now) and room
    return True


def _cold_options(arts: list[Artifact], shape: Shape, pool: list[PoolNode], ctx: int) -> list[Option]:
    layouts.clear()
    return options(arts, shape, pool, ctx)


@given(st.lists(artifacts, max_size=4), shapes, st.lists(pools, min_size=2, max_size=6), contexts, contexts)
@settings(max_examples=300)
def test_sizings_kept_from_earlier_plans_give_what_a_fresh_count_gives(
    arts: list[Artifact], shape: Shape, pool_list: list[list[PoolNode]], ctx: int, other_ctx: int
) -> None:
    """Options are sized once per file, class and context and kept; the same files planned again on other
    pools, and at another context, give exactly what they give with nothing kept."""
    plans = [(arts, shape, pool, c) for pool in pool_list for c in (ctx, other_ctx)]
    warm = [options(*plan) for plan in plans + plans[::-1]]
    cold = [_cold_options(*plan) for plan in plans + plans[::-1]]
    assert warm == cold
