"""Card classes: what a job's holds free when they go, and which classes a pending job waits on (whose freed
capacity wakes it: ``take_wake.lua`` picks the jobs for a pass by them). Pure."""

from __future__ import annotations

from collections.abc import Sequence

from planner import Option
from planner.decide import class_key
from planner.options import rank_key
from worker.keys import ANY_CLASS, CPU_CLASS
from worker.records import JobRecord


def class_of(rec: JobRecord) -> str:
    """The class a job's holds free, and what a pending job waits for: its best option's card class, or
    ``cpu``; ``any`` when it has no option now (woken by any class: ``ANY_CLASS``)."""
    if rec.option is None:
        return ANY_CLASS
    return CPU_CLASS if rec.option.cpu else rec.option.gpu_class


def clear_all(rec: JobRecord) -> list[tuple[str, str, str]]:
    """Every hold of a job, as ``transition``'s ``clear`` list."""
    cls = class_of(rec)
    return [(r.node_id, r.hold_id, cls) for r in rec.holds]


def hardware_rank(o: Option) -> tuple[object, ...]:
    """What the ranking puts first, the hardware: CPU or card, cards, nodes, precision. Whether it is free
    now, and the room left, only break ties within it."""
    return rank_key(o)[:4]


def waits_on(rec: JobRecord, alternatives: Sequence[Option]) -> str:
    """The classes whose freed capacity a pending job is woken by, comma-joined as ``pending:for`` holds
    them: every class of an option ranked equal to its best on the hardware, since freed capacity there
    makes that option the best (free now breaks the tie); with a fallback, every class it can run on;
    ``any`` when it has no option."""
    best = rec.option
    if best is None:
        return ANY_CLASS
    if rec.request.fallback:
        same = list(alternatives)
    else:
        # ranked best first, and the hardware leads the ranking: the options equal to the best on it are
        # one run, which ends at the first option ranked below it (a pool has hundreds of options)
        key = hardware_rank(best)
        same = []
        for o in alternatives:
            rank = hardware_rank(o)
            if rank == key:
                same.append(o)
            elif rank > key:
                break
    return ",".join(sorted({class_key(o) for o in (best, *same)}))
