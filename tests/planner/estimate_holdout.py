"""Does the form of vLLM's estimate hold beyond the rows its constants were fitted on?

The models of ``vllm_profiles.json`` are split in two halves; each half refits every constant of
``VllmFit`` by the same rule (the smallest constants that leave no fitted row under, term by term), and
the other half is estimated with them. ``python -m tests.planner.estimate_holdout`` prints the result;
``test_estimates.py`` holds it to the same bar as the full fit.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from planner.constants import GIB, MIB
from planner.vllmcost import VllmFit, vllm_activation, vllm_card, vllm_graphs
from tests.planner.estimate_table import load, shape_of

KIB = 1 << 10


@dataclass(frozen=True, slots=True)
class Profile:
    """One vLLM row: the settings it profiled with and the figures it logged, in bytes."""

    model: str
    tp: int
    pp: int
    float32: bool
    batched_tokens: int
    max_seqs: int
    weights: int
    non_torch: int
    activation: int
    graphs: int

    @property
    def took(self) -> int:
        return self.weights + self.non_torch + self.activation + self.graphs


def profiles() -> list[Profile]:
    def b(gib: float) -> int:
        return round(gib * GIB)

    return [
        Profile(
            model=r["model"],
            tp=r["tp"],
            pp=r["pp"],
            float32=r["dtype"] == "float32",
            batched_tokens=r["max_num_batched_tokens"],
            max_seqs=r["max_num_seqs"],
            weights=b(r["weights_gib"]),
            non_torch=b(r["non_torch_gib"]),
            activation=b(r["activation_peak_gib"]),
            graphs=b(r["cuda_graph_gib"]),
        )
        for r in load("vllm_profiles.json")
    ]


def halves(rows: Sequence[Profile]) -> tuple[list[Profile], list[Profile]]:
    """The rows split by model, alternating in the order of the models' names."""
    models = sorted({r.model for r in rows}, key=str.lower)
    first = set(models[::2])
    return [r for r in rows if r.model in first], [r for r in rows if r.model not in first]


def _shape(r: Profile) -> Any:
    return shape_of(r.model, float32=r.float32)


def _smallest(
    grid: Iterable[dict[str, int]],
    rows: Sequence[Profile],
    estimate: Callable[[VllmFit, Profile], int],
    logged: Callable[[Profile], int],
    base: VllmFit,
) -> VllmFit:
    """Of the grid's fits, the one leaving no row under whose largest excess is least."""
    best: tuple[int, VllmFit] | None = None
    for point in grid:
        fit = replace(base, **point)
        excess = [estimate(fit, r) - logged(r) for r in rows]
        if excess and min(excess) >= 0 and (best is None or max(excess) < best[0]):
            best = (max(excess), fit)
    if best is None:
        raise ValueError("no fit in the grid covers these rows")
    return best[1]


def _grid(**axes: Iterable[int]) -> Iterable[dict[str, int]]:
    names = list(axes)
    for values in itertools.product(*(list(v) for v in axes.values())):
        yield dict(zip(names, values, strict=True))


def refit(rows: Sequence[Profile]) -> VllmFit:
    """Every constant of ``VllmFit`` refitted on ``rows`` alone."""
    dense = [r for r in rows if not _shape(r).moe]
    moe = [r for r in rows if _shape(r).moe]

    def act(fit: VllmFit, r: Profile) -> int:
        return vllm_activation(_shape(r), batched_tokens=r.batched_tokens, max_seqs=r.max_seqs, fit=fit)

    def graphs(fit: VllmFit, r: Profile) -> int:
        return vllm_graphs(_shape(r), r.tp, r.pp, fit=fit)

    fit = _smallest(
        _grid(sampler_bytes=range(12, 19), forward_peak_bytes=range(8, 32, 2), forward_bytes=range(0, 14, 2)),
        dense,
        act,
        lambda r: r.activation,
        VllmFit(moe_forward_bytes=0),
    )
    fit = _smallest(_grid(moe_forward_bytes=range(0, 64, 2)), moe, act, lambda r: r.activation, fit)
    fit = _smallest(
        _grid(
            graphs_fixed=range(0, 768 * MIB, 64 * MIB),
            graphs_per_layer=range(8 * MIB, 26 * MIB, 2 * MIB),
            graphs_per_hidden=range(0, 200 * KIB, 20 * KIB),
        ),
        dense,
        graphs,
        lambda r: r.graphs,
        replace(fit, graphs_moe=0),
    )
    fit = _smallest(_grid(graphs_moe=range(0, 2048 * MIB, 64 * MIB)), moe, graphs, lambda r: r.graphs, fit)

    def most(select: Callable[[Profile], bool], minus: Callable[[Profile], int] = lambda r: 0) -> int:
        seen = [r.non_torch - minus(r) for r in rows if select(r)]
        return -(-max(seen) // (64 * MIB)) * 64 * MIB if seen else 0

    one = most(lambda r: r.tp == 1 and r.pp == 1)
    return replace(
        fit,
        non_torch_one_card=one,
        non_torch_stage=most(lambda r: r.tp == 1 and r.pp > 1) or one,
        non_torch_tp=most(lambda r: r.tp > 1, lambda r: r.tp * fit.non_torch_tp_per_card),
    )


def ratio(r: Profile, fit: VllmFit) -> float:
    need = vllm_card(
        r.weights, 0, _shape(r), tp=r.tp, pp=r.pp, batched_tokens=r.batched_tokens, max_seqs=r.max_seqs, fit=fit
    )
    return need.total / r.took


@dataclass(frozen=True, slots=True)
class Holdout:
    fitted_on: int
    held_out: int
    ratios: tuple[float, ...]
    """estimate / took of each held-out row."""


def holdouts() -> list[Holdout]:
    a, b = halves(profiles())
    out = []
    for fit_rows, test_rows in ((a, b), (b, a)):
        fit = refit(fit_rows)
        out.append(Holdout(len({r.model for r in fit_rows}), len(test_rows), tuple(ratio(r, fit) for r in test_rows)))
    return out


def summary(results: Sequence[Holdout]) -> str:
    lines = ["| fitted on (models) | held-out rows | under | within 10% | lowest × | highest × |"]
    lines.append("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for h in results:
        under = sum(x < 1 for x in h.ratios)
        within = sum(1 <= x <= 1.1 for x in h.ratios)
        lines.append(
            f"| {h.fitted_on} | {h.held_out} | {under} | {within} | {min(h.ratios):.3f} | {max(h.ratios):.3f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(holdouts()))
