"""The published engine logs (``engine_logs/``) through the measured estimate: each row's took, the estimate
at the run's own settings and at the engine's defaults for its card, and a summary per engine.

``python -m tests.planner.published_table`` prints the tables that ``docs/ESTIMATES.md`` shows beside the
first fit's; ``test_published.py`` holds the estimate to them.
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.constants import GIB, MIB
from tests.planner import published_llamacpp as L
from tests.planner import published_vllm as V
from tests.planner.published_fit import LLAMACPP_EXCEPTIONS, VLLM_EXCEPTIONS, VLLM_OVER, holdouts, summary

Row = V.Published | L.PublishedBuffers


def _gib(n: int) -> str:
    return f"{n / GIB:.2f}"


def _mib(n: int) -> str:
    return f"{n / MIB:.0f}"


def _note(i: int, *named: dict[int, str]) -> str:
    return next((f"{d[i]}" for d in named if i in d), "")


def vllm_table(rows: Sequence[V.Published]) -> str:
    lines = [
        "| # | run | took GiB | own settings GiB | × | card defaults GiB | × | note |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for p in rows:
        if p.why_not:
            lines.append(f"| {p.index} | {p.label} | | | | | | {p.why_not} |")
            continue
        note = _note(p.index, VLLM_EXCEPTIONS, VLLM_OVER)
        lines.append(
            f"| {p.index} | {p.label} | {_gib(p.took)} | {_gib(p.own.total)} | {p.ratio:.3f} "
            f"| {_gib(p.default.total)} | {p.default_ratio:.3f} | {note} |"
        )
    return "\n".join(lines)


def llamacpp_table(rows: Sequence[L.PublishedBuffers]) -> str:
    lines = [
        "| # | run | took MiB | own settings MiB | × | llama-server defaults MiB | × | note |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for p in rows:
        if p.why_not:
            lines.append(f"| {p.index} | {p.label} | | | | | | {p.why_not} |")
            continue
        lines.append(
            f"| {p.index} | {p.label} | {_mib(p.took)} | {_mib(p.own)} | {p.ratio:.3f} "
            f"| {_mib(p.default)} | {p.default_ratio:.3f} | {_note(p.index, LLAMACPP_EXCEPTIONS)} |"
        )
    return "\n".join(lines)


def totals(name: str, rows: Sequence[Row], exceptions: dict[int, str]) -> list[str]:
    """The summary lines of one engine: every row with an estimate, and those not named as exceptions."""
    out = []
    held = [p for p in rows if not p.why_not]
    for which, group in (("all", held), ("less the named", [p for p in held if p.index not in exceptions])):
        ratios = [p.ratio for p in group]
        under = sum(x < 1 for x in ratios)
        within = sum(1 <= x <= 1.1 for x in ratios)
        out.append(
            f"| {name} | {which} | {len(ratios)} | {under} | {within} ({within / len(ratios):.0%}) "
            f"| {min(ratios):.3f} | {max(ratios):.3f} |"
        )
    return out


def summary_table(v: Sequence[V.Published], ll: Sequence[L.PublishedBuffers]) -> str:
    lines = [
        "| engine | rows | estimated | under | within 10% | lowest × | highest × |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += totals("vllm", v, VLLM_EXCEPTIONS)
    lines += totals("llamacpp", ll, LLAMACPP_EXCEPTIONS)
    return "\n".join(lines)


def tables() -> str:
    v, ll = list(V.rows()), list(L.rows())
    return "\n\n".join((vllm_table(v), llamacpp_table(ll), summary_table(v, ll), summary(holdouts())))


if __name__ == "__main__":
    print(tables())
