"""From ranked options to a decision: placed on named nodes, waiting for busy hardware, or failed.

The seed's rule: the best option decides. If it is free now, the job is placed there; if its cards exist
but are busy, the job waits for them; it neither drops to a worse option nor fails. Only a job for which
nothing in the pool could ever hold it fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from planner.constants import HOST_SHARE, card_budget_gb, gguf_overhead_bytes, gib, vllm_overhead_bytes
from planner.model import Artifact, Option, PoolNode, Shape
from planner.options import classes, options

Outcome = Literal["placed", "waiting", "failed"]

CPU_CLASS = "cpu"
"""What a CPU option waits for: host memory, on any node."""


@dataclass(frozen=True, slots=True)
class Hold:
    """What a placement takes on one node."""

    node_id: str
    gpus: int = 0
    host_gb: float = 0.0


@dataclass(frozen=True, slots=True)
class Decision:
    outcome: Outcome
    option: Option | None
    """The option placed on, or waited for."""
    holds: tuple[Hold, ...]
    alternatives: tuple[Option, ...]
    """Every option, best first (the chosen one included)."""
    reason: str


def class_key(o: Option) -> str:
    """What an option runs on, as waiting jobs are indexed: its card class, or ``cpu``."""
    return CPU_CLASS if o.cpu else o.gpu_class


def choose_nodes(o: Option, nodes: Sequence[PoolNode]) -> tuple[Hold, ...] | None:
    """The nodes to place ``o`` on now, or None if not enough are free.

    Best fit: among the nodes that can take it, those with the least free room, so that whole free
    nodes stay whole for the jobs that need them. Ties go to the node id, for a stable choice.
    """
    if o.cpu:
        fit = [n for n in nodes if n.host_mem_gb * HOST_SHARE >= o.need_gb and n.host_free_gb >= o.need_gb]
        if not fit:
            return None
        best = min(fit, key=lambda n: (n.host_free_gb, n.id))
        return (Hold(best.id, 0, o.need_gb),)
    width = o.gpus_per_node
    fit = [
        n
        for n in nodes
        if n.gpu_class == o.gpu_class
        and card_budget_gb(n.gpu_mem_gb) == o.have_gb
        and n.gpus >= width
        and n.free_gpus >= width
        and (o.nodes <= 1 or n.fabric == o.fabric)
    ]
    count = max(o.nodes, 1)
    if len(fit) < count:
        return None
    chosen = sorted(fit, key=lambda n: (n.free_gpus, n.id))[:count]
    return tuple(Hold(n.id, width, 0.0) for n in chosen)


def decide(
    artifacts: Sequence[Artifact], shape: Shape, nodes: Sequence[PoolNode], context: int, *, ever_fit: bool = False
) -> Decision:
    """Plan and decide. ``ever_fit`` says an earlier plan found an option: such a job waits for its
    hardware to come back rather than failing when the pool no longer holds it."""
    ranked = tuple(options(artifacts, shape, nodes, context))
    if not ranked:
        why = why_unfit(artifacts, shape, nodes, context)
        if ever_fit:
            return Decision("waiting", None, (), (), f"no node in the pool can hold it now ({why}); waiting for one")
        return Decision("failed", None, (), (), why)
    best = ranked[0]
    holds = choose_nodes(best, nodes) if best.free_now else None
    if holds is not None:
        where = ", ".join(
            f"{h.node_id} ({h.gpus} card{'s' if h.gpus > 1 else ''})"
            if h.gpus
            else f"{h.node_id} ({h.host_gb:.1f} GiB RAM)"
            for h in holds
        )
        return Decision("placed", best, holds, ranked, f"placed {best.artifact} on {best.label}: {where}")
    return Decision("waiting", best, (), ranked, waiting_reason(best, nodes))


def waiting_reason(o: Option, nodes: Sequence[PoolNode]) -> str:
    if o.cpu:
        return (
            f"waiting for {o.need_gb:.1f} GiB of RAM for {o.artifact}: {o.hosts} node(s) have it, none has it free now"
        )
    takers = [
        n
        for n in nodes
        if n.gpu_class == o.gpu_class and n.gpus >= o.gpus_per_node and (o.nodes <= 1 or n.fabric == o.fabric)
    ]
    free = sum(1 for n in takers if n.free_gpus >= o.gpus_per_node)
    need = max(o.nodes, 1)
    return (
        f"waiting for {o.label} for {o.artifact}: {o.hosts} node(s) have the cards, "
        f"{free} of the {need} needed have {o.gpus_per_node} free now"
    )


def why_unfit(artifacts: Sequence[Artifact], shape: Shape, nodes: Sequence[PoolNode], context: int) -> str:
    """What was too large for what, for a request with no option at all."""
    if not nodes:
        return "no node in the pool"
    kv = context * shape.kv_bytes_per_token
    pools = classes(nodes)
    ram = max((n.host_mem_gb for n in nodes), default=0) * HOST_SHARE
    parts = []
    for a in artifacts:
        bits = [f"{a.name} ({gib(a.bytes):.1f} GiB, KV cache {gib(kv):.1f} GiB at {context} tokens)"]
        if pools:
            widest = max(pools, key=lambda c: (c.max_gpus * c.mem_gb, c.gpu_class))
            w = widest.max_gpus
            if a.format == "gguf":
                per = gib((a.bytes + kv) // w + gguf_overhead_bytes(a.bytes // w))
            else:
                w = 1 << (w.bit_length() - 1)
                if shape.kv_heads:
                    while w > 1 and shape.kv_heads % w:
                        w //= 2
                per = gib((a.bytes + kv) // w + vllm_overhead_bytes(a.bytes // w))
            bits.append(f"needs {per:.1f} GiB a card on {w} × {widest.gpu_class} of {widest.budget_gb:.1f}")
        else:
            bits.append("no node has a card")
        if a.format == "gguf":
            total = gib(a.bytes + kv + gguf_overhead_bytes(a.bytes))
            bits.append(f"{total:.1f} GiB of RAM on the CPU, the largest node offers {ram:.1f}")
        parts.append(": ".join(bits[:2]) + ("; " + bits[2] if len(bits) > 2 else ""))
    return "nothing in the pool can hold it: " + " | ".join(parts)
