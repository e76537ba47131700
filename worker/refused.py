"""Refusals of what node records carry (ended engines, footprints), said one line per node per sweep.

A node's agent chooses how many entries its record lists, so a line per entry would let one login fill
the workers' logs. Each sweep says, for each node, how many it refused, a few ids and why; past
``NODES_LOGGED`` nodes the rest are one line together. Every entry is still counted in the metrics.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from worker import logs, metrics

log = logs.get_logger("modelplan.worker")

EXAMPLES = 3
"""The hold ids a refusal's line names, of those its node listed."""

NODES_LOGGED = 20
"""The nodes a sweep says its refusals for, one line each; the rest are one line together."""


def say_per_node(event: str, refused: Mapping[str, Sequence[tuple[str, str]]]) -> None:
    """Count the entries ``refused`` lists ((hold id, why) by node) and log them as ``event``: a line for
    each node, the nodes with the most first, up to ``NODES_LOGGED``, and ``{event}_elsewhere`` for the
    rest. A node's line gives the first entry's reason."""
    if not refused:
        return
    metrics.count("observations_refused", sum(len(r) for r in refused.values()))
    nodes = sorted(refused, key=lambda n: (-len(refused[n]), n))
    for node_id in nodes[:NODES_LOGGED]:
        entries = refused[node_id]
        log.warning(
            event,
            node_id=node_id,
            refused=len(entries),
            holds=[hold for hold, _ in entries[:EXAMPLES]],
            why=entries[0][1],
        )
    rest = nodes[NODES_LOGGED:]
    if rest:
        log.warning(
            f"{event}_elsewhere",
            nodes=len(rest),
            refused=sum(len(refused[n]) for n in rest),
            node_ids=rest[:EXAMPLES],
        )
