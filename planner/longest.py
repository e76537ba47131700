"""The longest context a repository could be planned for on a pool, for a request that nothing can hold
at the context it asked for: where a shorter one fits, that is what the person can change."""

from __future__ import annotations

from collections.abc import Sequence

from planner.estimate import DEFAULT_ESTIMATE, Estimate
from planner.model import Artifact, Shape
from planner.options import options
from planner.settings import NO_SETTINGS, Settings
from planner.view import Nodes, pool_view


def longest_context(
    artifacts: Sequence[Artifact],
    shape: Shape,
    nodes: Nodes,
    context: int,
    estimate: Estimate = DEFAULT_ESTIMATE,
    settings: Settings = NO_SETTINGS,
) -> int | None:
    """The longest context below ``context`` at which some artifact has an option on ``nodes`` (busy or
    free: what could ever run), or None where not even one token's context fits.

    Found by halving the range: a replica's need grows with its context, so past the longest that fits
    nothing does. (vLLM's V0 profiles a step of up to the whole context for a short one, and fewer tokens
    past its chunking threshold; there the answer is a context that fits with one token more failing,
    which may not be the longest.)
    """
    view = pool_view(nodes)

    def fits(c: int) -> bool:
        return bool(options(artifacts, shape, view, c, estimate, settings))

    if context <= 1 or not fits(1):
        return None
    fitting, failing = 1, context  # fits(fitting), and ``context`` itself is the one asked for, unfit
    while failing - fitting > 1:
        mid = (fitting + failing) // 2
        if fits(mid):
            fitting = mid
        else:
            failing = mid
    return fitting
