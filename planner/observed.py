"""The ``observed`` estimate: what the engines of a model were measured to hold on the nodes, as a floor
under the formula once enough nodes agree.

A worker keeps what the node agents measured of each started replica (``worker.observations``) and hands
a plan the runs of the request's own model as ``Seen`` values, one per node and kind of replica: the
artifact, the engine, the card class and width (or the CPU), the context and the engine's settings, with
the node that reported it and the engine's release. An option of the same kind is counted with them:

    need = max(agreed figure × (1 + MARGIN), formula × (1 − MARGIN))

so that a plan never counts less than the engines were seen to hold, and an observation makes a plan
smaller than the formula only within the margin. Where the KV cache's part of the footprint is known, the
rest of it stands for any context and the KV cache this request's context needs is added back (the
formula's); where it is not, only a run at the same context counts.

What one node says moves no plan: a node's agent is the authority on its own node, and its login, or
its engine's odd run, must not steer every plan for the model (``agreed``). Each node counts once (its
largest figure); releases are kept apart; the figure is the one ``quorum`` nodes reached, with fewer the
option keeps the formula. And an observation never rules out an option the formula allows: where the
agreed need would not fit the option's cards (or any node's RAM), the option stays as the formula counted
it, the observation said in its ``margin``. Pure: no Redis."""

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
"""Above the agreed footprint, and the most below the formula an observation may take a plan."""

QUORUM = 2
"""Nodes that must have runs of a kind, at one engine release, before their figure counts in a plan: no
one node's agent moves the plans of the others (``agreed``). A deployment sets another
(``MODELPLAN_OBSERVED_QUORUM``): 1 takes one node's word, as a single node's must to learn at all."""

CONTEXT_FLAGS = frozenset({"-c", "--ctx-size", "--max-model-len"})
"""The settings that name the context: a run at another context matches an option otherwise alike."""


@dataclass(frozen=True, slots=True)
class Seen:
    """A footprint one node's engine was seen to hold, running one kind of replica of a model."""

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
    """When the run was seen (ISO 8601 date)."""
    node: str = ""
    """The node whose agent reported it ("" for runs kept before runs named their node: one node, unnamed)."""
    release: str = ""
    """The engine's release as its node reported it ("" where the engine did not say)."""

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
    """The need counted for an option whose formula says ``formula_gb`` and whose engines were agreed to
    hold ``seen_bytes``."""
    return max(seen_bytes * (1 + MARGIN) / GIB, formula_gb * (1 - MARGIN))


@dataclass(frozen=True, slots=True)
class Agreed:
    """What ``quorum`` nodes agree one kind of replica holds, at one engine release."""

    bytes: int
    nodes: int
    """The nodes with runs at that release: one run each."""
    release: str
    since: str
    """When the first of their runs was seen (ISO 8601 date)."""


def agreed(figures: Sequence[tuple[Seen, int]], quorum: int = QUORUM) -> Agreed | None:
    """The figure ``quorum`` nodes agree on, of runs (each with its figure for this request); None where
    too few nodes ran it.

    - One node, one figure: its largest, however many runs it sent (a node's agent may say anything of its
      own node, and no more than once).
    - Releases apart: a release is a label, never ordered (an agent can name one from the future), so
      runs of different releases are never compared or pooled. Each release with ``quorum`` nodes is a
      candidate; the plan takes the one most nodes run, and of those the larger figure (the careful one).
    - The ``quorum``-th largest of the nodes' figures: the most that ``quorum`` nodes all saw. With fewer
      than ``quorum`` nodes lying, it is no more than an honest node's figure, and a node that says less
      lowers it only toward the formula's floor (``MARGIN``). Not the largest, which one node decides; not
      the median, which counts less than half the nodes saw, where the estimate is a floor under what an
      engine takes (with 2, the default, it is the smaller of two, and of more, the second-largest)."""
    quorum = max(quorum, 1)
    by_release: dict[str, dict[str, int]] = {}
    since: dict[str, str] = {}
    for s, figure in figures:
        nodes = by_release.setdefault(s.release, {})
        nodes[s.node] = max(figure, nodes.get(s.node, 0))
        if s.since:
            since[s.release] = min(since.get(s.release, s.since), s.since)
    best: Agreed | None = None
    for release, nodes in by_release.items():
        if len(nodes) < quorum:
            continue  # one node's word (or too few nodes'): the formula stands
        figure = sorted(nodes.values(), reverse=True)[quorum - 1]
        if best is None or (len(nodes), figure) > (best.nodes, best.bytes):
            best = Agreed(figure, len(nodes), release, since.get(release, ""))
    return best


HostRoom = Callable[[float], tuple[int, float, bool]]
"""For a CPU need in GiB: how many nodes' share of RAM holds it, the largest such share, and whether a
node has it free now."""


def with_observed(
    ranked: Sequence[Option],
    seen: Sequence[Seen],
    context: int,
    kv_of: Callable[[Option], int],
    host_room: HostRoom,
    quorum: int = QUORUM,
) -> list[Option]:
    """``ranked`` with each option of a kind whose runs ``quorum`` nodes agree on counted ``observed`` (the
    module's rule); the others as they were. ``kv_of``: the KV cache an option's card (or RAM) holds by the
    formula. An option whose cards (or whose nodes' RAM) would not hold the observed need stays as the
    formula counted it, the observation said in its ``margin``: a plan never loses an option the formula
    allows on what the engines were seen to hold."""
    out: list[Option] = []
    for o in ranked:
        figures = [(s, b) for s in seen if same_kind(o, s) and (b := observed_bytes(s, context, kv_of(o))) is not None]
        found = agreed(figures, quorum)
        if found is None:
            out.append(o)
            continue
        need = round(observed_need_gb(o.need_gb, found.bytes), 4)
        counted = replace(
            o, need_gb=need, estimate="observed", formula_gb=o.need_gb, runs=found.nodes, since=found.since
        )
        if o.cpu:
            hosts, have, free = host_room(need)
            if not hosts:
                out.append(_noted(o, found, need, "any node's share of RAM"))
                continue
            counted = replace(counted, hosts=hosts, have_gb=have, free_now=free)
        elif need > o.have_gb:
            out.append(_noted(o, found, need, f"the {o.have_gb:.1f} GiB its cards offer"))
            continue
        out.append(counted)
    return out


def _noted(o: Option, found: Agreed, need: float, room: str) -> Option:
    """``o`` as the formula counted it, saying that its engines were seen to need more than ``room``."""
    nodes = f"{found.nodes} node{'s' if found.nodes != 1 else ''}"
    said = f"seen to need {need:.1f} GiB on {nodes}, past {room}: counted by the formula"
    return replace(o, margin=f"{o.margin}; {said}" if o.margin else said)


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
    quorum: int = QUORUM,
) -> list[Option]:
    """``with_observed`` for a request's ranked options on ``nodes``, ranked again."""
    hosts = pool_view(nodes).hosts()

    def room(need: float) -> tuple[int, float, bool]:
        count, have = hosts.holding(need)
        return count, have, hosts.best_free >= need

    out = with_observed(ranked, seen, context, kv_per_card(artifacts, shape, context, settings), room, quorum)
    rank(out)
    return out
