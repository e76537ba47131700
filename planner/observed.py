"""The ``observed`` estimate: what the engines of a model were measured to hold on the nodes, as a floor
under the formula.

A worker keeps what the node agents measured of each started replica (``worker.observations``) and hands
a plan the runs of the request's own model as ``Seen`` values, one per kind of replica: the artifact, the
engine, the card class and width (or the CPU), the context and the engine's settings. An option of the
same kind is counted with them:

    need = max(largest footprint seen × (1 + MARGIN), formula × (1 − MARGIN))

so that a plan never counts less than an engine was seen to hold, and an observation makes a plan smaller
than the formula only within the margin. Where the KV cache's part of the footprint is known, the rest of
it stands for any context and the KV cache this request's context needs is added back (the formula's);
where it is not, only a run at the same context counts. An option that no longer fits its cards counted so
is dropped; a CPU option is counted on the nodes' RAM again. Pure: no Redis."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from planner.constants import GIB
from planner.model import Artifact, Engine, Option, Shape
from planner.options import gguf_kv_bytes, original_kv_bytes, rank
from planner.parallel import vllm_kv_spread
from planner.settings import Settings
from planner.view import Nodes, pool_view

MARGIN = 0.05
"""Above the largest footprint seen, and the most below the formula an observation may take a plan."""

CONTEXT_FLAGS = frozenset({"-c", "--ctx-size", "--max-model-len"})
"""The settings that name the context: a run at another context matches an option otherwise alike."""


@dataclass(frozen=True, slots=True)
class Seen:
    """The largest footprint seen of one kind of replica of a model, over its runs at one engine release."""

    artifact: str
    engine: Engine
    gpu_class: str
    """The card class, ``""`` on the CPU."""
    gpus_per_node: int
    nodes: int
    context: int
    settings: tuple[str, ...]
    """The engine's settings as the option named them (``Option.settings``)."""
    bytes: int
    """A card's figure (the largest of the replica's cards), or the RAM (its peak) on the CPU."""
    kv_bytes: int = 0
    """Of ``bytes``, the KV cache the engine allocated; 0 unknown."""
    runs: int = 1
    since: str = ""
    """When the first of the runs was seen (ISO 8601 date)."""

    @property
    def cpu(self) -> bool:
        return not self.gpu_class


def same_kind(o: Option, s: Seen) -> bool:
    """Whether option ``o`` runs as ``s``'s runs did, the context's setting aside."""
    return (o.artifact, o.engine, o.cpu, o.gpu_class, o.gpus_per_node, o.nodes) == (
        s.artifact,
        s.engine,
        s.cpu,
        s.gpu_class,
        s.gpus_per_node,
        s.nodes,
    ) and without_context(o.settings) == without_context(s.settings)


def without_context(settings: Sequence[str]) -> tuple[str, ...]:
    """``settings`` less the flag naming the context and its value."""
    out: list[str] = []
    skip = False
    for arg in settings:
        if skip:
            skip = False
        elif arg in CONTEXT_FLAGS:
            skip = True
        else:
            out.append(arg)
    return tuple(out)


def observed_bytes(s: Seen, context: int, kv_now: int) -> int | None:
    """What ``s`` says a card (or the RAM) holds for a request of ``context`` tokens whose KV cache takes
    ``kv_now`` bytes there by the formula; None when it says nothing for that context."""
    if s.kv_bytes:
        return max(0, s.bytes - s.kv_bytes) + kv_now
    return s.bytes if s.context == context else None


def observed_need_gb(formula_gb: float, seen_bytes: int) -> float:
    """The need counted for an option whose formula says ``formula_gb`` and whose engines held
    ``seen_bytes``."""
    return max(seen_bytes * (1 + MARGIN) / GIB, formula_gb * (1 - MARGIN))


HostRoom = Callable[[float], tuple[int, float, bool]]
"""For a CPU need in GiB: how many nodes' share of RAM holds it, the largest such share, and whether a
node has it free now."""


def with_observed(
    ranked: Sequence[Option],
    seen: Sequence[Seen],
    context: int,
    kv_of: Callable[[Option], int],
    host_room: HostRoom,
) -> list[Option]:
    """``ranked`` with each option of a kind ``seen`` has runs of counted ``observed`` (the module's rule);
    the others as they were. ``kv_of``: the KV cache an option's card (or RAM) holds by the formula."""
    out: list[Option] = []
    for o in ranked:
        match = [s for s in seen if same_kind(o, s)]
        figures = [(b, s) for s in match if (b := observed_bytes(s, context, kv_of(o))) is not None]
        if not figures:
            out.append(o)
            continue
        largest = max(b for b, _ in figures)
        need = round(observed_need_gb(o.need_gb, largest), 4)
        runs = sum(s.runs for _, s in figures)
        since = min((s.since for _, s in figures if s.since), default="")
        counted = replace(o, need_gb=need, estimate="observed", formula_gb=o.need_gb, runs=runs, since=since)
        if o.cpu:
            hosts, have, free = host_room(need)
            if not hosts:
                continue
            counted = replace(counted, hosts=hosts, have_gb=have, free_now=free)
        elif need > o.have_gb:
            continue  # the cards this option names do not hold what its engine was seen to take
        out.append(counted)
    return out


def kv_per_card(
    artifacts: Sequence[Artifact], shape: Shape, context: int, settings: Settings
) -> Callable[[Option], int]:
    """The KV cache one card of an option (or the RAM, on the CPU) holds by the formula, for a request of
    ``context`` tokens: its share as ``planner.estimate`` counts it (tensor parallel within a node)."""
    by = {a.name: a for a in artifacts}

    def kv(o: Option) -> int:
        a = by.get(o.artifact)
        if a is None:
            return 0
        weights = a.weights_bytes
        if o.engine == "llamacpp":
            total = gguf_kv_bytes(shape, context, settings)
            if o.cpu:
                return total
            return (weights + total) // o.gpus_per_node - weights // o.gpus_per_node
        spread = vllm_kv_spread(shape, original_kv_bytes(shape, context, settings), o.gpus_per_node)
        return (weights + spread) // o.gpus - weights // o.gpus

    return kv


def observe(
    ranked: Sequence[Option],
    seen: Sequence[Seen],
    artifacts: Sequence[Artifact],
    shape: Shape,
    nodes: Nodes,
    context: int,
    settings: Settings,
) -> list[Option]:
    """``with_observed`` for a request's ranked options on ``nodes``, ranked again."""
    hosts = pool_view(nodes).hosts()

    def room(need: float) -> tuple[int, float, bool]:
        count, have = hosts.holding(need)
        return count, have, hosts.best_free >= need

    out = with_observed(ranked, seen, context, kv_per_card(artifacts, shape, context, settings), room)
    rank(out)
    return out
