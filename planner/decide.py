"""From ranked options to a decision for each replica of a job: placed on named nodes, falling back, or
waiting for busy hardware; or the job failed.

The seed's rule: the best option decides. If it is free now, a replica is placed there; if its cards
exist but are busy, the replica waits for them; it neither drops to a worse option nor fails. A request
that allows fallbacks runs such a replica on the best option that is free now while it keeps waiting for
its best; it moves there when the best frees. Only a job for which nothing in the pool could ever hold it
fails.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import islice
from typing import Literal, overload

from planner.constants import HOST_SHARE, gib
from planner.estimate import DEFAULT_ESTIMATE, Estimate, engine_shape, llamacpp_host, llamacpp_split
from planner.index import PoolIndex
from planner.model import Artifact, Option, PoolNode, Shape
from planner.observed import QUORUM, Seen, observe
from planner.options import classes, gguf_kv_bytes, options, original_kv_bytes
from planner.parallel import vllm_kv_spread, vllm_tp_allowed
from planner.quantconfig import BNB_4BIT
from planner.settings import NO_SETTINGS, Settings, llamacpp_run, vllm_run
from planner.view import Nodes, PoolView, pool_view
from planner.vllmcost import vllm_split

Outcome = Literal["placed", "waiting", "failed"]
ReplicaState = Literal["placed", "fallback", "waiting"]
WaitKind = Literal["resources", "priority", "gone"]

CPU_CLASS = "cpu"
"""What a CPU option waits for: host memory, on any node."""

NODES_SHOWN = 5
"""How many nodes a waiting reason names, nearest to free first."""


@dataclass(frozen=True, slots=True)
class Hold:
    """What a placement takes on one node."""

    node_id: str
    gpus: int = 0
    host_gb: float = 0.0


@dataclass(frozen=True, slots=True)
class Wait:
    """Why a replica is not on its best option, as data and in words (after Slurm's reasons).

    ``resources``: the hardware exists but is busy; ``priority``: it would fit in cards held for a job
    ahead of it; ``gone``: nothing in the pool can hold it now.
    """

    kind: WaitKind
    option: Option | None
    nodes: tuple[str, ...]
    """The nodes that could hold it, nearest to free first."""
    missing: tuple[tuple[str, int], ...]
    """Cards (or for the CPU, GiB of RAM) each of those nodes lacks now."""
    text: str


@dataclass(frozen=True, slots=True)
class Running:
    """A replica as it stands before a plan."""

    index: int
    option: Option | None
    holds: tuple[Hold, ...] = ()
    on_target: bool = False
    """Placed on what was its best option: it stays, whatever frees later."""


@dataclass(frozen=True, slots=True)
class ReplicaPlan:
    index: int
    state: ReplicaState
    option: Option | None
    """Where it runs (None while waiting)."""
    holds: tuple[Hold, ...]
    moved: bool
    """Its holds change: placed anew, moved from a fallback to its best, or dropped."""
    wait: Wait | None


@dataclass(frozen=True, slots=True)
class JobPlan:
    outcome: Outcome
    target: Option | None
    """The best option: what every replica runs on or waits for."""
    alternatives: tuple[Option, ...]
    """Every option, best first."""
    replicas: tuple[ReplicaPlan, ...]
    dropped: tuple[Running, ...]
    """Replicas past the wanted count, to be freed."""
    reason: str

    @property
    def placed(self) -> int:
        return sum(1 for r in self.replicas if r.holds)


def class_key(o: Option) -> str:
    """What an option runs on, as pending jobs are indexed: its card class, or ``cpu``."""
    return CPU_CLASS if o.cpu else o.gpu_class


def same_layout(a: Option | None, b: Option | None) -> bool:
    if a is None or b is None:
        return a is b
    return (a.artifact, a.cpu, a.gpu_class, a.have_gb, a.fabric, a.gpus_per_node, a.nodes) == (
        b.artifact,
        b.cpu,
        b.gpu_class,
        b.have_gb,
        b.fabric,
        b.gpus_per_node,
        b.nodes,
    )


def choose_nodes(o: Option, nodes: Nodes) -> tuple[Hold, ...] | None:
    """The nodes to place ``o`` on now, or None if not enough are free.

    Best fit: among the nodes that can take it now, those with the least free room, so that whole free
    nodes stay whole for the jobs that need them. Ties go to the node id, for a stable choice. On the CPU,
    a node without cards comes first (a GPU node's RAM and cores serve its cards' engines: vLLM's swap
    space and loading, llama.cpp's host buffers); failing one, the GPU node with the most RAM free.
    ``nodes`` is indexed (``planner.index``) if it is a list: the choice reads only the kinds of node that
    could take ``o``, best fit first, as far as it needs.
    """
    view = pool_view(nodes)
    if o.cpu:
        best = view.cpu_fit(o)
        return None if best is None else (Hold(best.id, 0, o.need_gb),)
    count = max(o.nodes, 1)
    chosen = list(islice(view.fitting(o), count))
    if len(chosen) < count:
        return None
    return tuple(Hold(n.id, o.gpus_per_node, 0.0) for n in chosen)


@overload
def take(nodes: PoolIndex | PoolView, holds: Sequence[Hold]) -> PoolView: ...
@overload
def take(nodes: Sequence[PoolNode], holds: Sequence[Hold]) -> list[PoolNode]: ...
def take(nodes: Nodes, holds: Sequence[Hold]) -> PoolView | list[PoolNode]:
    """``nodes`` with ``holds`` taken from what is free: of an index, a view with the held nodes changed
    (in the size of ``holds``); of a list, a list."""
    by = {h.node_id: h for h in holds}
    if isinstance(nodes, PoolIndex | PoolView):
        view = pool_view(nodes)
        held = ((view.get(node_id), h) for node_id, h in by.items())
        return view.with_nodes(_taken(n, h) for n, h in held if n is not None)
    out = []
    for n in nodes:
        h = by.get(n.id)
        out.append(n if h is None else _taken(n, h))
    return out


def _taken(n: PoolNode, h: Hold) -> PoolNode:
    return replace(n, free_gpus=max(0, n.free_gpus - h.gpus), host_free_gb=max(0, int(n.host_free_gb - h.host_gb)))


def nominate(o: Option, nodes: Nodes) -> tuple[Hold, ...]:
    """The nodes to hold for a waiting job whose best option is ``o``: those nearest to having its cards
    free (then by id), with the cards free on each now, up to what it needs there."""
    if o.cpu:
        return ()
    wanted = max(o.nodes, 1)
    takers = [n for _, n in islice(pool_view(nodes).nearest(o), wanted)]
    if len(takers) < wanted:
        return ()
    return tuple(Hold(n.id, min(o.gpus_per_node, n.free_gpus), 0.0) for n in takers)


def wait_for(o: Option, nodes: Nodes, held_for_others: Mapping[str, int] | None = None) -> Wait:
    """Why ``o`` cannot be placed on ``nodes`` now, naming the nodes nearest to free."""
    view = pool_view(nodes)
    nearest = list(islice(view.nearest(o), NODES_SHOWN))
    missing = tuple((n.id, k) for k, n in nearest)
    kind: WaitKind = "resources"
    if held_for_others:
        held = ((view.get(node_id), cards) for node_id, cards in held_for_others.items())
        back = view.with_nodes(replace(n, free_gpus=n.free_gpus + cards) for n, cards in held if n is not None)
        if choose_nodes(o, back) is not None:
            kind = "priority"
    unit = "GiB of RAM" if o.cpu else "card(s)"
    lacking = ", ".join(f"{node} lacks {k}" for node, k in missing) or "none"
    if kind == "priority":
        why = "its cards are held for a job ahead of it"
    else:
        why = f"{view.takers(o)} node(s) could hold it; {lacking} {unit}"
    text = f"waiting for {o.label} for {o.artifact}: {why}"
    return Wait(kind, o, tuple(n.id for _, n in nearest), missing, text)


NO_NODE_YET = "no node has reported to the pool yet (or every node has gone silent); waiting for one"
"""Why a job that no plan found an option for waits, rather than fails, on an empty pool."""


def plan_job(
    artifacts: Sequence[Artifact],
    shape: Shape,
    nodes: Nodes,
    context: int,
    *,
    replicas: int = 1,
    fallback: bool = False,
    running: Sequence[Running] = (),
    ever_fit: bool = False,
    held_for_others: Mapping[str, int] | None = None,
    estimate: Estimate = DEFAULT_ESTIMATE,
    settings: Settings = NO_SETTINGS,
    seen: Sequence[Seen] = (),
    quorum: int = QUORUM,
) -> JobPlan:
    """Plan every replica of a job against ``nodes`` (what is free for this job): a list of nodes, indexed
    first, or an index or view of one (``planner.index``), on which a plan costs the kinds of node it
    reads rather than the nodes.

    Replicas placed on their best option stay. Past ``replicas``, the waiting ones go first, then those
    on a fallback, then the highest-numbered; new ones are numbered after the highest. Each other
    replica is placed on the best option if it is free now; else, with ``fallback``, it keeps (or takes)
    the best option that is free now; else it waits. ``ever_fit`` says an earlier plan found an option: such
    a job waits, rather than fails, when the pool no longer holds it; so does every job while the pool has
    no node (``NO_NODE_YET``), which a node joining wakes. ``estimate`` says how an engine's own
    cost is counted, ``settings`` what the engines are started with; ``seen`` what the engines of this
    model were measured to hold (``planner.observed``), which counts an option of a kind ``quorum`` nodes
    ran as.
    """
    kept, dropped = _scale(running, replicas)
    view = pool_view(nodes)
    ranked = tuple(options(artifacts, shape, view, context, estimate, settings))
    if seen and ranked:
        ranked = tuple(observe(ranked, seen, artifacts, shape, view, context, settings, quorum))
    if not ranked:
        why = why_unfit(artifacts, shape, view, context, estimate, settings)
        empty = not view  # no node to judge it by: an empty pool is not one that cannot hold it
        if not ever_fit and not empty and not any(r.holds for r in kept):
            return JobPlan("failed", None, (), (), dropped, why)
        said = f"no node in the pool can hold it now ({why}); waiting for one"
        gone = Wait("gone", None, (), (), NO_NODE_YET if empty and not ever_fit else said)
        plans = tuple(
            ReplicaPlan(r.index, _state_of(r), r.option, r.holds, False, None if r.on_target else gone) for r in kept
        )
        return JobPlan(_outcome(plans), None, (), plans, dropped, gone.text)

    target = ranked[0]
    plans_list: list[ReplicaPlan] = []
    for r in kept:
        if r.holds and r.on_target:
            plans_list.append(ReplicaPlan(r.index, "placed", r.option, r.holds, False, None))
            continue
        holds = choose_nodes(target, view)
        if holds is not None:
            view = take(view, holds)
            plans_list.append(ReplicaPlan(r.index, "placed", target, holds, True, None))
            continue
        wait = wait_for(target, view, held_for_others)
        if r.holds:
            plans_list.append(ReplicaPlan(r.index, "fallback", r.option, r.holds, False, wait))
            continue
        if fallback:
            for o in ranked[1:]:
                holds = choose_nodes(o, view) if o.free_now else None
                if holds is not None:
                    view = take(view, holds)
                    plans_list.append(ReplicaPlan(r.index, "fallback", o, holds, True, wait))
                    break
            else:
                plans_list.append(ReplicaPlan(r.index, "waiting", None, (), False, wait))
            continue
        plans_list.append(ReplicaPlan(r.index, "waiting", None, (), False, wait))
    plans = tuple(plans_list)
    return JobPlan(_outcome(plans), target, ranked, plans, dropped, _reason(target, plans))


def _scale(running: Sequence[Running], wanted: int) -> tuple[list[Running], tuple[Running, ...]]:
    current = sorted(running, key=lambda r: r.index)
    if len(current) > wanted:
        # waiting ones go first (the highest-numbered first), then those on a fallback, then those on their best
        waiting = [r for r in reversed(current) if not r.holds]
        on_hardware = sorted((r for r in current if r.holds), key=lambda r: (r.on_target, -r.index))
        drop = {r.index for r in (waiting + on_hardware)[: len(current) - wanted]}
        return [r for r in current if r.index not in drop], tuple(r for r in current if r.index in drop)
    start = max((r.index for r in current), default=-1) + 1
    return current + [Running(i, None) for i in range(start, start + wanted - len(current))], ()


def _state_of(r: Running) -> ReplicaState:
    if not r.holds:
        return "waiting"
    return "placed" if r.on_target else "fallback"


def _outcome(plans: Sequence[ReplicaPlan]) -> Outcome:
    return "placed" if plans and all(p.holds for p in plans) else "waiting"


def _reason(target: Option, plans: Sequence[ReplicaPlan]) -> str:
    on_target = sum(1 for p in plans if p.state == "placed")
    fallback = sum(1 for p in plans if p.state == "fallback")
    head = f"{target.artifact} on {target.label}"
    if on_target == len(plans):
        nodes = ", ".join(h.node_id for p in plans for h in p.holds)
        return f"placed {head}: {nodes}" if len(plans) == 1 else f"placed {len(plans)} of {len(plans)}: {head}"
    waiting = next((p.wait for p in plans if p.wait is not None), None)
    if len(plans) == 1 and waiting is not None:
        return ("on a fallback; " if fallback else "") + waiting.text
    parts = [f"placed {on_target} of {len(plans)} on {target.label}"]
    if fallback:
        parts.append(f"{fallback} on a fallback")
    return "; ".join(parts) + (f"; {waiting.text}" if waiting else "")


def why_unfit(
    artifacts: Sequence[Artifact],
    shape: Shape,
    nodes: Nodes,
    context: int,
    estimate: Estimate = DEFAULT_ESTIMATE,
    settings: Settings = NO_SETTINGS,
) -> str:
    """What was too large for what, for a request with no option at all."""
    if not nodes:
        return "no node in the pool"
    pools = classes(nodes)
    ram = max((n.host_mem_gb for n in nodes), default=0) * HOST_SHARE
    parts = []
    for a in artifacts:
        weights = a.weights_bytes
        gguf = a.format == "gguf"
        kv = gguf_kv_bytes(shape, context, settings) if gguf else original_kv_bytes(shape, context, settings)
        llama = llamacpp_run(settings.llamacpp)
        head = f"{a.name} ({gib(weights):.1f} GiB, KV cache {gib(kv):.1f} GiB at {context} tokens)"
        if pools:
            widest = max(pools, key=lambda c: (c.max_gpus * c.mem_gb, c.gpu_class))
            w = widest.max_gpus
            if a.format == "gguf":
                need = llamacpp_split(
                    weights, kv, w, engine_shape(shape, gguf=True), context=context, estimate=estimate, run=llama
                )
            else:
                w = 1 << (w.bit_length() - 1)
                while w > 1 and not vllm_tp_allowed(shape, w):
                    w //= 2
                spread = vllm_kv_spread(shape, kv, w)
                run = vllm_run(settings.vllm, widest.gpu_class, widest.mem_gb, context, widest.graphs)
                need = vllm_split(
                    weights,
                    spread,
                    engine_shape(shape),
                    tp=w,
                    context=context,
                    estimate=estimate,
                    run=run,
                    dequantised=a.quant == BNB_4BIT,
                )
            per = gib(need.total)
            cards = f"needs {per:.1f} GiB a card on {w} × {widest.gpu_class} of {widest.budget_gb:.1f}"
        else:
            cards = "no node has a card"
        part = f"{head}: {cards}"
        if a.format == "gguf":
            host = llamacpp_host(
                weights, kv, engine_shape(shape, gguf=True), context=context, estimate=estimate, run=llama
            )
            total = gib(host.total)
            part += f"; {total:.1f} GiB of RAM on the CPU, the largest node offers {ram:.1f}"
        parts.append(part)
    return "nothing in the pool can hold it: " + " | ".join(parts)
