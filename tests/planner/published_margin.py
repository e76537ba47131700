"""The estimate's own error on the terms a plan cannot know, measured on the published logs
(``engine_logs/vllm_published.json``), at each run's own settings: the CUDA graphs the log printed over
the graph term (by what the log says of the driver), and the memory outside PyTorch it printed less the
term, by card. ``python -m tests.planner.published_margin`` prints both tables; the option's margin where
no node reported its driver (``planner.platform.GRAPHS_ERROR``) is the first one's range.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from planner.constants import GIB
from tests.planner import published_vllm as V


@dataclass(frozen=True, slots=True)
class TermError:
    index: int
    card: str
    driver: str
    """The driver the log prints, ``""`` where it does not."""
    logged_gib: float
    term_gib: float

    @property
    def ratio(self) -> float:
        return self.logged_gib / self.term_gib


def graph_errors() -> Iterator[TermError]:
    """Each estimated row whose log printed a positive graph figure (a negative one is memory freed during
    the capture) against the estimate's graph term at its own settings."""
    raw = V.load()["rows"]
    for p in V.rows():
        r = raw[p.index]
        term = dict(p.own.parts).get("CUDA graphs", 0)
        if p.why_not or not r["cuda_graph_gib"] or r["cuda_graph_gib"] <= 0 or not term:
            continue
        yield TermError(p.index, r["card"], r.get("nvidia_driver") or "", r["cuda_graph_gib"], term / GIB)


def non_torch_errors() -> Iterator[TermError]:
    """Each estimated row whose log printed its memory outside PyTorch, against the term."""
    raw = V.load()["rows"]
    for p in V.rows():
        r = raw[p.index]
        if p.why_not or r["non_torch_gib"] is None:
            continue
        term = dict(p.own.parts)["non-torch"]
        yield TermError(p.index, r["card"], r.get("nvidia_driver") or "", r["non_torch_gib"], term / GIB)


def main() -> None:
    print("| # | card | driver | graphs logged GiB | term GiB | logged / term |")
    print("| ---: | --- | --- | ---: | ---: | ---: |")
    for e in graph_errors():
        shown = e.driver or "not printed"
        print(f"| {e.index} | {e.card} | {shown} | {e.logged_gib:.2f} | {e.term_gib:.2f} | {e.ratio:.2f} |")
    print()
    print("| # | card | non-torch logged GiB | term GiB | logged − term GiB |")
    print("| ---: | --- | ---: | ---: | ---: |")
    for e in non_torch_errors():
        print(f"| {e.index} | {e.card} | {e.logged_gib:.2f} | {e.term_gib:.2f} | {e.logged_gib - e.term_gib:+.2f} |")


if __name__ == "__main__":
    main()
