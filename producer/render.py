"""Plans drawn for a person: the ranked options as a table to read at a glance."""

from __future__ import annotations

from collections.abc import Sequence

from planner import Option

_HEADERS = ("#", "artifact", "bits", "engine", "where", "need / have GiB", "hosts", "now")


def options_table(opts: Sequence[Option]) -> str:
    """The options best first: where each runs, what one card (or, on the CPU, the node's RAM) must hold
    against what it offers, how many nodes could run it, and whether it could start now or is busy."""
    if not opts:
        return "no option: nothing in the pool can hold any artifact of this repository"
    rows = [
        (
            str(i),
            o.artifact,
            f"{o.bits_per_weight:.1f}" if o.bits_per_weight else "?",
            o.engine,
            o.label + (" RAM" if o.cpu else ""),
            f"{o.need_gb:.1f} / {o.have_gb:.1f}",
            str(o.hosts),
            "free" if o.free_now else "busy",
        )
        for i, o in enumerate(opts, 1)
    ]
    widths = [max(len(r[c]) for r in [_HEADERS, *rows]) for c in range(len(_HEADERS))]
    right = {0, 2, 5, 6}
    lines = []
    for r in [_HEADERS, *rows]:
        cells = [
            cell.rjust(w) if c in right else cell.ljust(w) for c, (cell, w) in enumerate(zip(r, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
