"""Plans drawn for a person: the ranked options as a table to read at a glance."""

from __future__ import annotations

from collections.abc import Sequence

from planner import Option
from worker.records import JobRecord
from worker.store import Snapshot

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


def job_text(rec: JobRecord) -> str:
    """A job's record as a few lines: state and why, the best option, then each replica with its nodes."""
    lines = [
        f"job {rec.job_id}: {rec.state.value} ({rec.summary})",
        f"  model:   {rec.request.model} (context {rec.request.context})",
    ]
    if rec.option is not None:
        lines.append(f"  best:    {rec.option.artifact} on {rec.option.label} ({rec.option.engine})")
    for rep in rec.replicas:
        where = f"{rep.option.artifact} on {rep.option.label}" if rep.option else "-"
        nodes = ", ".join(
            f"{r.node_id} ({r.gpus} card{'s' if r.gpus != 1 else ''})"
            if r.gpus
            else f"{r.node_id} ({r.host_gb:.1f} GiB RAM)"
            for r in rep.placement
        )
        line = f"  replica {rep.index}: {rep.state}" + (f", {where}: {nodes}" if rep.placement else "")
        if rep.wait is not None and rep.state != "placed":
            line += f" [{rep.wait.kind}]"
        lines.append(line)
    if rec.nomination is not None:
        held = ", ".join(f"{h.node_id} {h.gpus} of {rec.nomination.wanted}" for h in rec.nomination.holds)
        lines.append(f"  holding: {held} until {rec.nomination.until.isoformat(timespec='seconds')}")
    if rec.reason:
        lines.append(f"  reason:  {rec.reason}")
    lines.append(f"  updated: {rec.updated_at.isoformat()} (version {rec.version}, planned {rec.attempts}x)")
    return "\n".join(lines)


def status_text(snap: Snapshot, counts: dict[str, int], jobs: Sequence[JobRecord]) -> str:
    """The pool and the jobs at a glance."""
    out = [f"{len(snap.records)} node(s) in the pool"]
    if snap.records:
        rows = [("node", "class", "fabric", "cards free/all", "held", "free for plans", "RAM free/all GiB")]
        by_id = {n.id: n for n in snap.nodes}
        for node_id in sorted(snap.records):
            node = snap.records[node_id]
            held = sum(h.gpus for h in snap.held.get(node_id, {}).values())
            rows.append(
                (
                    node_id,
                    node.gpu_class or "(cpu)",
                    node.fabric or "-",
                    f"{node.free_gpus}/{node.gpus}",
                    str(held),
                    str(by_id[node_id].free_gpus),
                    f"{node.host_free_gb}/{node.host_mem_gb}",
                )
            )
        out.append(_table(rows))
    out.append("jobs: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n) if any(counts.values()) else "no jobs")
    for rec in jobs:
        where = rec.option.label if rec.option else "-"
        nodes = ",".join(r.node_id for r in rec.placement) or "-"
        out.append(f"  {rec.job_id}  {rec.state.value:8}  {where}  {nodes}  {rec.request.model}")
    return "\n".join(out)


def _table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows)
