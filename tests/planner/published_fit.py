"""The terms fitted on the published logs, fitted again on half of them and checked on the other half.

The rule, set before fitting: the rows at even places in each file fit, the rows at odd places are held
out. Each term is the least that leaves no fitting row under (the sampler's bytes where the release sorts
its logits; from 8 cards up, memory outside PyTorch; the vision encoder's bytes; over PCIe, memory outside
PyTorch; llama.cpp's compute buffer without flash attention, per unit of width; and with it, per unit of
width), fitted in that order; a row that a term still to come moves too is left to that term, so that one
term's shortfall is not read as another's (a vision model's at TP 2 as its sampler's bytes). Over PCIe,
memory outside PyTorch comes last, as what is left beside the rest (no TP 8 row has an encoder). The constants in
``planner.constants`` and ``planner.vllmrelease`` are the same fit on every row, rounded up; the rows no
term can reach without distorting the rest are named in ``EXCEPTIONS`` and left out of both, and the rows
out of scope (``published_vllm.out_of_scope``) are in neither.

``python -m tests.planner.published_fit`` prints the held-out summary that ``docs/ESTIMATES.md`` shows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from planner.constants import GIB, LLAMACPP_FA_HIDDEN_BYTES, LLAMACPP_NO_FA_HIDDEN_BYTES
from planner.vllmcost import VLLM_FIT, VllmFit
from tests.planner import published_llamacpp as L
from tests.planner import published_vllm as V

VLLM_EXCEPTIONS = {
    28: "CUDA graphs: 2.85 GiB logged, where the estimate counts 1.00 at a current driver and 3.19 under one "
    "before the 550 branch (nvidia_driver; vLLM issue 5517: graphs 3.3 times larger under 12.2/12.3 drivers). "
    "The log does not print its driver and the table reads it as a current one; the capture is the old "
    "drivers' figure (the one published 0.11 log on a 535 driver took 3.1 times the term), where this model took "
    "0.50 on an A100 80GB under 0.17.1 and 0.38 under 0.11.0 at 128 sequences. At a driver before 550: × 1.043",
}
VLLM_OVER = {
    22: "a 2B embedding model on a T4, eager: 0.44 GiB beside its weights, of which the estimate's 0.5 GiB "
    "outside PyTorch for one card is already more",
    11: "CUDA graphs: 0.46 GiB logged for Phi-3-mini, where the first fit's per-layer figure gives 0.9 for "
    "its 32 layers",
    33: "two T4s at TP 2, eager: nothing outside PyTorch logged, where the PCIe figure is 1.375 GiB; their cards "
    "had peer access (custom all-reduce first in the log's dispatch order, no P2P warning)",
    52: "four A800s at TP 4 (sm80, NVLink): 0.3 GiB outside PyTorch beside the sorted sampler's 4.8 GiB of "
    "activation, where the TP 4 figure fitted on H100s is 2.25; the A100 80GB at TP 2 under 0.27.1 (row 57) "
    "left 0.5. NCCL's buffers on these cards are smaller, but the H100 rows range from 0.5 to 2.9 GiB, so "
    "the card's class alone does not say which",
}
"""Rows past 10% over that no term brings in without putting others under, with why (over, never under)."""

LLAMACPP_EXCEPTIONS = {
    2: "an embedding run whose vocabulary the file does not give: the estimate counts the largest known",
}
"""Rows below or past the targets that no term reaches without distorting the rest, with why."""


def _scaled(rows: Callable[[VllmFit], Iterable[V.Published]], fit: VllmFit, field: str) -> dict[int, float]:
    """Each row's need of one more unit of ``field``: the bytes its estimate moves when ``field`` does."""
    base = {p.index: p for p in rows(fit)}
    bumped = {p.index: p for p in rows(dataclasses.replace(fit, **{field: getattr(fit, field) + 1}))}
    return {i: bumped[i].own.total - base[i].own.total for i in base}


def fit_vllm(indices: Iterable[int]) -> VllmFit:
    """The published terms fitted on the rows at ``indices``: each the least that leaves none of them under."""
    chosen = set(indices) - set(VLLM_EXCEPTIONS)
    # from 8 cards up: at least what TP 4's rule would give there, more where a fitting row needs it
    # the sorted sampler: at least the unsorted one's bytes, more where a fitting row of a sorting release
    # needs it; fitted first, as the TP 8 rows' memory outside PyTorch is what is left beside it
    fit = dataclasses.replace(VLLM_FIT, non_torch_tp8=0, vision_bytes=0, sort_sampler_bytes=VLLM_FIT.sampler_bytes)
    fit = dataclasses.replace(fit, non_torch_tp8=fit.non_torch_tp + 8 * fit.non_torch_tp_per_card)
    fit = dataclasses.replace(fit, non_torch_tp_pcie=0)
    fields = ("sort_sampler_bytes", "non_torch_tp8", "vision_bytes", "non_torch_tp_pcie")
    for k, field in enumerate(fields):
        per_unit = _scaled(V.rows, fit, field)
        # a row that a term still to come moves too is left to that term: its shortfall is not this one's
        later = [_scaled(V.rows, fit, f) for f in fields[k + 1 :]]
        need = getattr(fit, field)
        for p in V.rows(fit):
            shared = any(moved[p.index] for moved in later)
            if p.index in chosen and not p.why_not and per_unit[p.index] and not shared and p.own.total < p.took:
                need = max(need, getattr(fit, field) + -(-(p.took - p.own.total) // per_unit[p.index]))
        fit = dataclasses.replace(fit, **{field: need})
    return fit


@dataclass(frozen=True, slots=True)
class LlamacppFit:
    fa_hidden_bytes: int = LLAMACPP_FA_HIDDEN_BYTES
    no_fa_hidden_bytes: int = LLAMACPP_NO_FA_HIDDEN_BYTES


def llamacpp_rows(fit: LlamacppFit) -> list[L.PublishedBuffers]:
    return list(L.rows(fa_hidden_bytes=fit.fa_hidden_bytes, no_fa_hidden_bytes=fit.no_fa_hidden_bytes))


def fit_llamacpp(indices: Iterable[int]) -> LlamacppFit:
    chosen = set(indices) - set(LLAMACPP_EXCEPTIONS)
    fit = LlamacppFit(fa_hidden_bytes=0, no_fa_hidden_bytes=0)
    for field in ("fa_hidden_bytes", "no_fa_hidden_bytes"):
        base = {p.index: p for p in llamacpp_rows(fit)}
        bumped = {p.index: p for p in llamacpp_rows(dataclasses.replace(fit, **{field: getattr(fit, field) + 1}))}
        need = 0
        for i, p in base.items():
            unit = bumped[i].own - p.own
            if i in chosen and not p.why_not and unit and p.own < p.took:
                need = max(need, -(-(p.took - p.own) // unit))
        fit = dataclasses.replace(fit, **{field: need})
    return fit


@dataclass(frozen=True, slots=True)
class Holdout:
    engine: str
    fitted: str
    ratios: tuple[float, ...]

    def line(self) -> str:
        r = self.ratios
        under = sum(x < 1 for x in r)
        within = sum(1 <= x <= 1.1 for x in r)
        return f"| {self.engine} | {self.fitted} | {len(r)} | {under} | {within} | {min(r):.3f} | {max(r):.3f} |"


def _held(rows: Sequence[V.Published] | Sequence[L.PublishedBuffers], exceptions: dict[int, str]) -> tuple[float, ...]:
    return tuple(p.ratio for p in rows if p.index % 2 and not p.why_not and p.index not in exceptions)


def holdouts() -> list[Holdout]:
    v_rows = [p for p in V.rows() if not p.why_not]
    l_rows = [p for p in L.rows() if not p.why_not]
    vfit = fit_vllm(p.index for p in v_rows if p.index % 2 == 0)
    lfit = fit_llamacpp(p.index for p in l_rows if p.index % 2 == 0)
    return [
        Holdout(
            "vllm",
            f"sorted sampler {vfit.sort_sampler_bytes} B; non-torch TP 8 {vfit.non_torch_tp8 / GIB:.2f} GiB, "
            f"over PCIe {vfit.non_torch_tp_pcie / GIB:.2f} GiB; vision {vfit.vision_bytes} B",
            _held(list(V.rows(vfit)), VLLM_EXCEPTIONS),
        ),
        Holdout(
            "llamacpp",
            f"width {lfit.fa_hidden_bytes} B, no-FA width {lfit.no_fa_hidden_bytes} B",
            _held(llamacpp_rows(lfit), LLAMACPP_EXCEPTIONS),
        ),
    ]


def summary(hs: list[Holdout]) -> str:
    lines = [
        "| engine | fitted on the even rows | held-out rows | under | within 10% | lowest × | highest × |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    return "\n".join(lines + [h.line() for h in hs])


if __name__ == "__main__":
    print(summary(holdouts()))
