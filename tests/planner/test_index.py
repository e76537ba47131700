"""The indexed pool answers exactly as a list of the same nodes did: the counts options are made from, the
nodes a layout is placed on, held for and waits for, and whole plans; and an index kept up to date node by
node is the index built anew from the nodes it ends with.

The reference is the planner as it was before the index, kept here whole: it walked and copied the list.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.pool import pool, pool_nodes, repository
from planner import Artifact, Option, PoolNode, Shape
from planner.constants import HOST_SHARE, card_budget_gb, fits, gib
from planner.decide import (
    NO_NODE_YET,
    NODES_SHOWN,
    Hold,
    JobPlan,
    ReplicaPlan,
    Running,
    Wait,
    WaitKind,
    _outcome,
    _reason,
    _scale,
    _state_of,
    choose_nodes,
    nominate,
    plan_job,
    take,
    wait_for,
    why_unfit,
)
from planner.estimate import Sizing, llamacpp_host, llamacpp_split
from planner.groups import Group, HostPool
from planner.index import PoolIndex
from planner.options import grouped, options, rank, vllm_options
from planner.view import PoolView, pool_view
from tests.planner.helpers import gpu_node, original
from tests.planner.test_properties import artifacts, contexts, shapes
from tests.planner.test_seed_rules import NO_KV, four_card_nodes

# --- the reference: the list-based planner ------------------------------------------------------------------


def ref_gguf_options(
    a: Artifact, kv: int, host_pool: HostPool, pools: Sequence[Group], bpw: float, s: Sizing
) -> list[Option]:
    weights = a.weights_bytes
    host_need = llamacpp_host(weights, kv, s.shape, context=s.context, estimate=s.estimate)
    total = gib(host_need.total)
    hosts, have, bare = 0, 0.0, 0.0
    for host_mem_gb, count in host_pool.sizes.items():
        node_have = host_mem_gb * HOST_SHARE
        if host_mem_gb <= 0 or total > node_have:
            continue
        hosts += count
        have = max(have, node_have)
        if host_pool.bare.get(host_mem_gb):  # a node without cards, taken first, holds it
            bare = max(bare, node_have)
    have = bare or have
    out: list[Option] = []
    common: dict[str, Any] = {"artifact": a.name, "format": a.format, "engine": "llamacpp", "bits_per_weight": bpw}
    common["estimate"] = s.estimate
    common["settings"] = s.llamacpp.args(s.context)
    if hosts:
        free_now = host_pool.best_free >= total
        margin = s.margin(host_need)
        out.append(
            Option(**common, cpu=True, need_gb=total, have_gb=have, hosts=hosts, free_now=free_now, margin=margin)
        )
    for c in pools:
        for width in range(1, c.max_gpus + 1):
            need = llamacpp_split(weights, kv, width, s.shape, context=s.context, estimate=s.estimate)
            per = gib(need.total)
            if not fits(per, c.mem_gb):
                continue
            hosts, free = c.takers(width)
            where: dict[str, Any] = {"gpu_class": c.gpu_class, "gpus_per_node": width, "nodes": 1, "need_gb": per}
            out.append(
                Option(**common, **where, have_gb=c.budget_gb, hosts=hosts, free_now=free > 0, margin=s.margin(need))
            )
            break
    return out


def ref_options(arts: Sequence[Artifact], shape: Shape, nodes: Sequence[PoolNode], context: int) -> list[Option]:
    from planner.estimate import DEFAULT_ESTIMATE, engine_shape
    from planner.parallel import llamacpp_kv_bytes, vllm_kv_bytes
    from planner.quant import bits_of

    pools = grouped(nodes)
    hosts: HostPool | None = None
    out: list[Option] = []
    for a in arts:
        bpw = bits_of(a.quant)
        params = shape.params - shape.vision_params if a.format == "gguf" else shape.params
        if params > 0:
            bpw = a.weights_bytes * 8 / params
        if a.format == "gguf":
            hosts = hosts or HostPool.of(nodes)
            sizing = Sizing(DEFAULT_ESTIMATE, engine_shape(shape, gguf=True), context)
            out += ref_gguf_options(a, llamacpp_kv_bytes(shape, context), hosts, pools, bpw, sizing)
        elif a.format in ("safetensors", "pytorch"):
            sizing = Sizing(DEFAULT_ESTIMATE, engine_shape(shape), context)
            out += vllm_options(a, vllm_kv_bytes(shape, context), shape, pools, bpw, sizing)
    rank(out)
    return out


def ref_takers(o: Option, nodes: Sequence[PoolNode]) -> list[PoolNode]:
    if o.cpu:
        return [n for n in nodes if n.host_mem_gb * HOST_SHARE >= o.need_gb]
    return [
        n
        for n in nodes
        if n.gpu_class == o.gpu_class
        and card_budget_gb(n.gpu_mem_gb) == o.have_gb
        and n.gpus >= o.gpus_per_node
        and (o.nodes <= 1 or n.fabric == o.fabric)
    ]


def ref_lack(o: Option, n: PoolNode) -> int:
    if o.cpu:
        return max(0, int(-(-(o.need_gb - n.host_free_gb) // 1)))
    return max(0, o.gpus_per_node - n.free_gpus)


def ref_choose_nodes(o: Option, nodes: Sequence[PoolNode]) -> tuple[Hold, ...] | None:
    fit = [n for n in ref_takers(o, nodes) if ref_lack(o, n) == 0]
    if o.cpu:
        if not fit:
            return None
        best = min(fit, key=lambda n: (n.gpus > 0, -n.host_free_gb if n.gpus else n.host_free_gb, n.id))
        return (Hold(best.id, 0, o.need_gb),)
    count = max(o.nodes, 1)
    if len(fit) < count:
        return None
    chosen = sorted(fit, key=lambda n: (n.free_gpus, n.id))[:count]
    return tuple(Hold(n.id, o.gpus_per_node, 0.0) for n in chosen)


def ref_take(nodes: Sequence[PoolNode], holds: Sequence[Hold]) -> list[PoolNode]:
    by = {h.node_id: h for h in holds}
    out = []
    for n in nodes:
        h = by.get(n.id)
        if h is not None:
            n = replace(n, free_gpus=max(0, n.free_gpus - h.gpus), host_free_gb=max(0, int(n.host_free_gb - h.host_gb)))
        out.append(n)
    return out


def ref_nominate(o: Option, nodes: Sequence[PoolNode]) -> tuple[Hold, ...]:
    if o.cpu:
        return ()
    takers = sorted(ref_takers(o, nodes), key=lambda n: (ref_lack(o, n), n.id))[: max(o.nodes, 1)]
    if len(takers) < max(o.nodes, 1):
        return ()
    return tuple(Hold(n.id, min(o.gpus_per_node, n.free_gpus), 0.0) for n in takers)


def ref_wait_for(o: Option, nodes: Sequence[PoolNode], held_for_others: Mapping[str, int] | None = None) -> Wait:
    takers = sorted(ref_takers(o, nodes), key=lambda n: (ref_lack(o, n), n.id))
    missing = tuple((n.id, ref_lack(o, n)) for n in takers[:NODES_SHOWN])
    kind: WaitKind = "resources"
    if held_for_others:
        back = [replace(n, free_gpus=n.free_gpus + held_for_others.get(n.id, 0)) for n in nodes]
        if ref_choose_nodes(o, back) is not None:
            kind = "priority"
    unit = "GiB of RAM" if o.cpu else "card(s)"
    lacking = ", ".join(f"{node} lacks {k}" for node, k in missing) or "none"
    if kind == "priority":
        why = "its cards are held for a job ahead of it"
    else:
        why = f"{len(takers)} node(s) could hold it; {lacking} {unit}"
    text = f"waiting for {o.label} for {o.artifact}: {why}"
    return Wait(kind, o, tuple(n.id for n in takers[:NODES_SHOWN]), missing, text)


def ref_plan_job(
    arts: Sequence[Artifact],
    shape: Shape,
    nodes: Sequence[PoolNode],
    context: int,
    *,
    replicas: int = 1,
    fallback: bool = False,
    running: Sequence[Running] = (),
    ever_fit: bool = False,
    held_for_others: Mapping[str, int] | None = None,
) -> JobPlan:
    kept, dropped = _scale(running, replicas)
    ranked = tuple(ref_options(arts, shape, nodes, context))
    if not ranked:
        why = why_unfit(arts, shape, nodes, context)
        if not ever_fit and nodes and not any(r.holds for r in kept):
            return JobPlan("failed", None, (), (), dropped, why)
        said = f"no node in the pool can hold it now ({why}); waiting for one"
        gone = Wait("gone", None, (), (), NO_NODE_YET if not nodes and not ever_fit else said)
        plans = tuple(
            ReplicaPlan(r.index, _state_of(r), r.option, r.holds, False, None if r.on_target else gone) for r in kept
        )
        return JobPlan(_outcome(plans), None, (), plans, dropped, gone.text)
    target = ranked[0]
    view = list(nodes)
    out: list[ReplicaPlan] = []
    for r in kept:
        if r.holds and r.on_target:
            out.append(ReplicaPlan(r.index, "placed", r.option, r.holds, False, None))
            continue
        holds = ref_choose_nodes(target, view)
        if holds is not None:
            view = ref_take(view, holds)
            out.append(ReplicaPlan(r.index, "placed", target, holds, True, None))
            continue
        wait = ref_wait_for(target, view, held_for_others)
        if r.holds:
            out.append(ReplicaPlan(r.index, "fallback", r.option, r.holds, False, wait))
            continue
        if fallback:
            for o in ranked[1:]:
                holds = ref_choose_nodes(o, view) if o.free_now else None
                if holds is not None:
                    view = ref_take(view, holds)
                    out.append(ReplicaPlan(r.index, "fallback", o, holds, True, wait))
                    break
            else:
                out.append(ReplicaPlan(r.index, "waiting", None, (), False, wait))
            continue
        out.append(ReplicaPlan(r.index, "waiting", None, (), False, wait))
    plans = tuple(out)
    return JobPlan(_outcome(plans), target, ranked, plans, dropped, _reason(target, plans))


# --- pools --------------------------------------------------------------------------------------------------

CLASSES = [("h100-80g", 80), ("h100-80g", 94), ("a100-40g", 40), ("l4-24g", 24), ("mystery", 0), ("", 80)]
FABRICS = ["", "ib-a", "ib-b", "roce"]


@st.composite
def node_fields(draw: st.DrawFn) -> dict[str, Any]:
    """Any node's fields but its id: GPU nodes of a few classes (one label at two card sizes, one without
    a size, cards without a label), CPU nodes, and zero and negative fields among them."""
    host = draw(st.sampled_from([-1, 0, 1, 64, 256, 512, 2048]))
    host_free = draw(st.integers(-1, max(host, 0) + 1))
    if draw(st.integers(0, 4)) == 0:
        gpus = draw(st.sampled_from([-1, 0, 0, 0]))
        return {"host_mem_gb": host, "host_free_gb": host_free, "gpus": gpus, "free_gpus": max(gpus, 0)}
    gpu_class, mem = draw(st.sampled_from(CLASSES))
    gpus = draw(st.sampled_from([0, 1, 2, 3, 4, 8, 8, 16]))
    return {
        "gpu_class": gpu_class,
        "gpu_mem_gb": mem,
        "fabric": draw(st.sampled_from(FABRICS)),
        "gpus": gpus,
        "free_gpus": draw(st.integers(-1, gpus + 1)),
        "host_mem_gb": host,
        "host_free_gb": host_free,
    }


@st.composite
def pools(draw: st.DrawFn, max_size: int = 24) -> list[PoolNode]:
    """Nodes with ids unique, in no order."""
    ids = draw(st.lists(st.sampled_from([f"n{i:02d}" for i in range(40)]), unique=True, max_size=max_size))
    return [PoolNode(id=i, **draw(node_fields())) for i in ids]


@st.composite
def overridden(draw: st.DrawFn, nodes: list[PoolNode]) -> list[PoolNode]:
    """Some of ``nodes`` seen otherwise: mostly their free cards and RAM, sometimes anything."""
    if not nodes:
        return []
    out = []
    for n in draw(st.lists(st.sampled_from(nodes), max_size=6)):
        if draw(st.booleans()):
            out.append(PoolNode(id=n.id, **draw(node_fields())))
        else:
            free = draw(st.integers(-1, max(n.gpus, 0) + 2))
            out.append(replace(n, free_gpus=free, host_free_gb=draw(st.integers(-1, max(n.host_mem_gb, 0) + 1))))
    return out


def substituted(nodes: Sequence[PoolNode], over: Sequence[PoolNode]) -> list[PoolNode]:
    by = {n.id: n for n in over}
    return [by.get(n.id, n) for n in nodes]


def layouts(nodes: Sequence[PoolNode], found: Sequence[Option], need_gb: float) -> list[Option]:
    """Layouts to place: those ``options`` found, and for each kind of node on the list a one-card, a
    whole-node and a two-node layout on its fabric, and a CPU layout."""
    out = list(found)
    for n in nodes[:8]:
        have = card_budget_gb(n.gpu_mem_gb)
        for width, count in ((1, 1), (max(n.gpus, 1), 1), (max(n.gpus // 2, 1), 2)):
            layout = Option("x", "gguf", "llamacpp", gpu_class=n.gpu_class, fabric=n.fabric, have_gb=have)
            out.append(replace(layout, gpus_per_node=width, nodes=count, need_gb=1.0))
    out.append(Option("x", "gguf", "llamacpp", cpu=True, need_gb=need_gb))
    return out


# --- what a plan reads --------------------------------------------------------------------------------------


@given(pools(), st.data())
@settings(max_examples=300)
def test_a_view_iterates_as_the_list_with_its_nodes_substituted(nodes: list[PoolNode], data: st.DataObject) -> None:
    over = data.draw(overridden(nodes))
    strangers = [PoolNode(id="not-in-the-pool", gpus=1)]
    view = PoolView(PoolIndex(nodes), [*over, *strangers])
    assert list(view) == substituted(nodes, over)
    assert len(view) == len(nodes)
    assert "not-in-the-pool" not in view and view.get("not-in-the-pool") is None
    assert list(pool_view(nodes)) == nodes and list(PoolIndex(nodes)) == nodes


@given(pools(), st.data())
@settings(max_examples=400)
def test_counts_are_those_of_the_list(nodes: list[PoolNode], data: st.DataObject) -> None:
    over = data.draw(overridden(nodes))
    index = PoolIndex(nodes)
    for got, listed in ((PoolView(index), nodes), (PoolView(index, over), substituted(nodes, over))):
        assert got.groups() == grouped(listed)
        assert got.hosts() == HostPool.of(listed)
    assert index.groups() == grouped(nodes)  # a view does not change the index's own counts


@given(st.lists(artifacts, max_size=4), shapes, pools(), contexts, st.data())
@settings(max_examples=300)
def test_options_are_those_of_the_list(
    arts: list[Artifact], shape: Shape, nodes: list[PoolNode], ctx: int, data: st.DataObject
) -> None:
    listed = substituted(nodes, over := data.draw(overridden(nodes)))
    want = ref_options(arts, shape, listed, ctx)
    assert options(arts, shape, listed, ctx) == want
    assert options(arts, shape, PoolView(PoolIndex(nodes), over), ctx) == want
    assert options(arts, shape, PoolIndex(listed), ctx) == want


@given(st.lists(artifacts, max_size=3), shapes, pools(), contexts, st.data())
@settings(max_examples=400)
def test_nodes_chosen_held_and_waited_for_are_those_of_the_list(
    arts: list[Artifact], shape: Shape, nodes: list[PoolNode], ctx: int, data: st.DataObject
) -> None:
    over = data.draw(overridden(nodes))
    listed = substituted(nodes, over)
    view = PoolView(PoolIndex(nodes), over)
    ids = [n.id for n in nodes] or ["none"]
    holds = data.draw(
        st.lists(st.builds(Hold, st.sampled_from(ids), st.integers(0, 4), st.sampled_from([0.0, 1.5, 64.0])))
    )
    others = data.draw(st.dictionaries(st.sampled_from([*ids, "elsewhere"]), st.integers(0, 8), max_size=4))
    taken, ref = take(view, holds), ref_take(listed, holds)
    assert list(taken) == ref
    assert take(listed, holds) == ref
    need = data.draw(st.sampled_from([0.0, 0.5, 1.0, 10.0, 100.5, 300.0, 2000.0]))
    for o in layouts(ref, ref_options(arts, shape, listed, ctx), need):
        assert choose_nodes(o, taken) == ref_choose_nodes(o, ref), o
        assert nominate(o, taken) == ref_nominate(o, ref), o
        assert wait_for(o, taken, others) == ref_wait_for(o, ref, others), o
        assert wait_for(o, taken) == ref_wait_for(o, ref), o


@given(st.lists(artifacts, min_size=1, max_size=3), shapes, pools(), contexts, st.data())
@settings(max_examples=300)
def test_plans_are_those_of_the_list(
    arts: list[Artifact], shape: Shape, nodes: list[PoolNode], ctx: int, data: st.DataObject
) -> None:
    listed = substituted(nodes, over := data.draw(overridden(nodes)))
    ids = [n.id for n in nodes] or ["none"]
    ranked = ref_options(arts, shape, listed, ctx)
    running = []
    for index in data.draw(st.lists(st.integers(0, 4), unique=True, max_size=3)):
        option = data.draw(st.sampled_from([None, *ranked[:3]]))
        holds = tuple(data.draw(st.lists(st.builds(Hold, st.sampled_from(ids), st.integers(0, 2)), max_size=2)))
        running.append(Running(index, option, holds if option else (), data.draw(st.booleans())))
    kw: dict[str, Any] = {
        "replicas": data.draw(st.integers(1, 4)),
        "fallback": data.draw(st.booleans()),
        "running": running,
        "ever_fit": data.draw(st.booleans()),
        "held_for_others": data.draw(st.dictionaries(st.sampled_from(ids), st.integers(0, 8), max_size=3)),
    }
    want = ref_plan_job(arts, shape, listed, ctx, **kw)
    assert plan_job(arts, shape, listed, ctx, **kw) == want
    assert plan_job(arts, shape, PoolView(PoolIndex(nodes), over), ctx, **kw) == want


@pytest.mark.parametrize("busy", [True, False])
@pytest.mark.parametrize("n", [300, 3000])
def test_plans_on_the_benchmark_pools_are_those_of_the_list(n: int, busy: bool) -> None:
    """Many fabrics (islands of 128 nodes) and every kind of node the benchmark has, with every artifact."""
    nodes = pool_nodes(pool(n, busy=busy))
    repo = repository(30)
    index = PoolIndex(nodes)
    for replicas, fallback in ((1, False), (3, True), (40, True)):
        want = ref_plan_job(repo.artifacts, repo.shape, nodes, 8192, replicas=replicas, fallback=fallback)
        assert plan_job(repo.artifacts, repo.shape, index, 8192, replicas=replicas, fallback=fallback) == want
    for o in ref_options(repo.artifacts, repo.shape, nodes, 8192):
        assert nominate(o, index) == ref_nominate(o, nodes)
        assert wait_for(o, index) == ref_wait_for(o, nodes)


def test_a_view_costs_its_overrides_not_the_pool() -> None:
    """A view shares the index's lists: taking cards copies only the nodes taken from."""
    nodes = pool_nodes(pool(1000, busy=True))
    index = PoolIndex(nodes)
    view = take(index, [Hold(nodes[0].id, 1), Hold(nodes[1].id, 0, 8.0)])
    assert isinstance(view, PoolView) and view.index is index
    assert set(view.over) <= {nodes[0].id, nodes[1].id}
    assert take(view, []).over == view.over


# --- kept up to date ----------------------------------------------------------------------------------------


def state(index: PoolIndex) -> dict[str, Any]:
    """Everything an index holds, in order where order counts."""
    out = {name: getattr(index, name) for name in PoolIndex.__slots__ if name != "_group_list"}
    out["_nodes"] = list(index._nodes.items())
    out["groups"] = index.groups()
    return out


changes: st.SearchStrategy[list[tuple[str, str, dict[str, Any]]]] = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from([f"n{i:02d}" for i in range(16)]), node_fields()),
        st.tuples(st.just("drop"), st.sampled_from([f"n{i:02d}" for i in range(18)]), st.just({})),
    ),
    max_size=60,
)


@given(pools(max_size=12), changes)
@settings(max_examples=400)
def test_an_index_kept_up_to_date_is_the_index_built_anew(
    nodes: list[PoolNode], steps: list[tuple[str, str, dict[str, Any]]]
) -> None:
    index = PoolIndex(nodes)
    now = {n.id: n for n in nodes}  # a dict keeps a replaced key in its place, as a pool does
    for what, node_id, fields in steps:
        if what == "put":
            node = PoolNode(id=node_id, **fields)
            index.put(node)
            now[node_id] = node
        else:
            index.drop(node_id)
            now.pop(node_id, None)
        assert index.hosts() == HostPool.of(list(now.values()))
    built = PoolIndex(now.values())
    assert state(index) == state(built)
    assert index.groups() == grouped(list(now.values()))


@given(st.lists(artifacts, min_size=1, max_size=3), shapes, pools(max_size=12), changes, contexts, st.data())
@settings(max_examples=300)
def test_options_planned_between_changes_are_those_of_the_list(
    arts: list[Artifact],
    shape: Shape,
    nodes: list[PoolNode],
    steps: list[tuple[str, str, dict[str, Any]]],
    ctx: int,
    data: st.DataObject,
) -> None:
    """The layouts an index's groups keep from one plan to the next are made again where a change touches
    them, and only there: planned after every change, on the index and on a view of it, options are what
    the list gives."""
    index = PoolIndex(nodes)
    now = {n.id: n for n in nodes}
    for what, node_id, fields in [("plan", "", {}), *steps]:
        if what == "put":
            node = PoolNode(id=node_id, **fields)
            index.put(node)
            now[node_id] = node
        elif what == "drop":
            index.drop(node_id)
            now.pop(node_id, None)
        listed = list(now.values())
        assert options(arts, shape, index, ctx) == ref_options(arts, shape, listed, ctx)
        over = data.draw(overridden(listed))
        assert options(arts, shape, PoolView(index, over), ctx) == ref_options(
            arts, shape, substituted(listed, over), ctx
        )


def test_layouts_across_nodes_are_made_again_on_the_fabric_that_changed() -> None:
    """A fabric's layout over several nodes is kept with its counts: a node busy, joining or leaving on
    one fabric changes that fabric's option, and the other fabric's stays as it was."""
    big = [original(400)]  # two nodes of four 80 GiB cards
    nodes = {n.id: n for f in ("ib-a", "ib-b") for n in four_card_nodes(2, f)}
    index = PoolIndex(nodes.values())

    def layouts() -> dict[str, tuple[int, bool]]:
        got = options(big, NO_KV, index, 1, estimate="seed")
        assert got == options(big, NO_KV, list(nodes.values()), 1, estimate="seed")
        return {o.fabric: (o.hosts, o.free_now) for o in got}

    assert layouts() == {"ib-a": (2, True), "ib-b": (2, True)}
    seen = []
    for node in (
        gpu_node("ib-a-0", "h100-80g", gpus=4, free=3, fabric="ib-a"),
        *four_card_nodes(3, "ib-b")[2:],
        gpu_node("ib-a-0", "h100-80g", gpus=4, free=4, fabric="ib-a", host=64, host_free=7),
    ):
        index.put(node)
        nodes[node.id] = node
        seen.append(layouts())
    assert seen == [
        {"ib-a": (2, False), "ib-b": (2, True)},
        {"ib-a": (2, False), "ib-b": (3, True)},
        {"ib-a": (2, True), "ib-b": (3, True)},
    ]
    assert layouts() == {"ib-a": (2, True), "ib-b": (3, True)}
    index.drop("ib-b-0")
    del nodes["ib-b-0"]
    assert layouts() == {"ib-a": (2, True), "ib-b": (2, True)}


@given(pools(max_size=12), changes)
@settings(max_examples=200)
def test_a_copy_changes_apart_from_its_original(
    nodes: list[PoolNode], steps: list[tuple[str, str, dict[str, Any]]]
) -> None:
    index = PoolIndex(nodes)
    index.groups()
    before = state(PoolIndex(nodes))
    copy = index.copy()
    for what, node_id, fields in steps:
        if what == "put":
            copy.put(PoolNode(id=node_id, **fields))
        else:
            copy.drop(node_id)
    assert state(index) == before
    assert state(copy) == state(PoolIndex(list(copy)))


def test_an_empty_pool() -> None:
    index = PoolIndex()
    assert list(index) == [] and index.groups() == [] and index.hosts() == HostPool({}, -math.inf)
    assert choose_nodes(Option("x", "gguf", "llamacpp", cpu=True, need_gb=1.0), index) is None
