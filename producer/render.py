"""Plans drawn for a person: the ranked options as a table to read at a glance."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from planner import Estimate, Option
from producer.agent.engines import HEAD_SHOWN, MODELS_DIR_SHOWN, engine_command, replica_commands, shown
from producer.client import as_of_state
from producer.refusals import Recent, Refusal
from worker import observed
from worker.beats import Beat
from worker.conditions import EngineCondition
from worker.conflicts import ConflictRecord
from worker.observed import Kind, Run
from worker.pool import Snapshot
from worker.records import JobRecord, JobState, ServeRequest

_HEADERS = ("#", "artifact", "bits", "engine", "where", "need / have GiB", "hosts", "now")


def options_table(opts: Sequence[Option], why: str = "", longest: int | None = None) -> str:
    """The options best first: where each runs, what one card (or, on the CPU, the node's RAM) must hold
    against what it offers, how many nodes could run it, and whether it could start now or is busy.
    Where there is none: ``why`` (as a worker records it for a job that fails), and the ``longest``
    context that would fit, where a shorter one does."""
    if not opts:
        said = f"no option: {why or 'nothing in the pool can hold any artifact of this repository'}"
        if longest is not None:
            said += f"\nit fits at a context of up to {longest} tokens (--context {longest})"
        return said
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


def commands_text(request: ServeRequest, opts: Sequence[Option]) -> str:
    """The whole command line each option runs its engine with, as a shell takes it: ``#1 vllm serve ...``;
    then what stands for what only a node knows, where a command shows it."""
    lines = [f"#{i} {shown(engine_command(request, o))}" for i, o in enumerate(opts, 1)]
    return "\n".join(lines + placeholders_text(lines))


def placeholders_text(lines: Sequence[str]) -> list[str]:
    """What ``MODELS_DIR`` and ``HEAD_NODE`` stand for, for each that ``lines`` show."""
    said = []
    if any(MODELS_DIR_SHOWN + "/" in line for line in lines):
        said.append(
            f"{MODELS_DIR_SHOWN}: the node agent's --models-dir (the request names no --model-path and its model "
            "is no Hub id)"
        )
    if any(HEAD_SHOWN in line for line in lines):
        said.append(
            f"{HEAD_SHOWN}: the replica's first node; each other node runs the same line with its own "
            "--node-rank and --headless"
        )
    return said


def job_command_lines(rec: JobRecord) -> list[str]:
    """A job's engine command lines: its best option's, then, for each replica placed over several nodes,
    each node's own part."""
    if rec.option is None:
        return []
    lines = [f"  engine:  {shown(engine_command(rec.request, rec.option))}"]
    for rep in rec.replicas:
        if len(rep.placement) > 1:
            lines += [f"  replica {rep.index} on {node}: {shown(cmd)}" for node, cmd in replica_commands(rec, rep)]
    return lines + [f"  ({said})" for said in placeholders_text(lines)]


def observed_line(o: Option) -> str:
    """An ``observed`` option's need in words: what it counts, from how many runs since when, and the
    formula's figure beside it."""
    runs = f"{o.runs} run{'s' if o.runs != 1 else ''}"
    return f"{o.need_gb:.1f} GiB, observed ({runs} since {o.since}; the formula {o.formula_gb:.1f})"


def observed_text(opts: Sequence[Option]) -> str:
    """Each option counted from what its engines were seen to hold: ``#1 observed: ...``."""
    return "\n".join(f"#{i} {observed_line(o)}" for i, o in enumerate(opts, 1) if o.runs)


def off_line(model: str, kind: Kind, run: Run) -> str:
    """A model whose estimate was off: the run furthest from the formula, and where it ran."""
    where = f"{kind.gpus_per_node} × {kind.gpu_class}" if kind.gpu_class else "CPU"
    flagged = " (flagged: not planned with)" if run.flagged else ""
    nodes, quorum = kind.agreeing(run), observed.quorum()
    if not run.flagged and nodes < quorum:  # as this process reads MODELPLAN_OBSERVED_QUORUM
        flagged = f" (unconfirmed: {nodes} node{'s' if nodes != 1 else ''} of the {quorum} a plan needs)"
    seen, formula = run.bytes / 2**30, run.formula_bytes / 2**30
    release = f" {run.version}" if run.version else ""
    return (
        f"  {model}: {kind.artifact} on {where} ({kind.engine}{release}, context {kind.context}): "
        f"seen {seen:.1f} GiB, the formula {formula:.1f} (x{run.ratio:.2f}){flagged}"
    )


def estimates_text(by_estimate: Mapping[Estimate, Sequence[Option]], chosen: Estimate) -> str:
    """The best option under each estimate, so that a person sees what counting with the engines' own
    profiles saves against the seed's rule (or costs), and where the estimate keeps a margin."""
    lines = []
    for name, opts in by_estimate.items():
        mark = "*" if name == chosen else " "
        if not opts:
            lines.append(f"{mark} {name:<9} no option")
            continue
        o = opts[0]
        where = f"{o.artifact} on {o.label}" + (" RAM" if o.cpu else "")
        lines.append(f"{mark} {name:<9} {where}: {o.need_gb:.1f} / {o.have_gb:.1f} GiB")
    margins = sorted({o.margin for o in by_estimate.get(chosen, ()) if o.margin})
    text = "best by estimate (* the one above):\n" + "\n".join(lines)
    if margins:
        text += "\nmargin kept where the profiles are thin: " + "; ".join(margins)
    return text


NO_WORKER = "no worker is running: start one with `modelplan worker`"
"""Said where no worker is alive (``worker.alive``): a queued job is taken by none until one starts."""

NEEDS_A_WORKER = frozenset({JobState.QUEUED, JobState.PLANNING, JobState.WAITING})
"""The states a job leaves only through a worker: planned, or woken when capacity frees."""


def workers_text(workers: int) -> str:
    """How many workers are running, or that none is and how to start one."""
    return f"{workers} worker{'s' if workers != 1 else ''} alive" if workers else NO_WORKER


def job_text(rec: JobRecord, workers: int | None = None) -> str:
    """A job's record as a few lines: state and why (and that no worker is running to move it on, where
    ``workers`` is 0), the best option, then each replica with its nodes."""
    rec = as_of_state(rec)
    stuck = f"; {NO_WORKER}" if workers == 0 and rec.state in NEEDS_A_WORKER else ""
    lines = [
        f"job {rec.job_id}: {rec.state.value} ({rec.summary}){stuck}",
        f"  model:   {rec.request.model} (context {rec.request.context})",
    ]
    if rec.option is not None:
        lines.append(f"  best:    {rec.option.artifact} on {rec.option.label} ({rec.option.engine})")
        if rec.option.runs:
            lines.append(f"  need:    {observed_line(rec.option)}")
    for rep in rec.replicas:
        where = f"{rep.option.artifact} on {rep.option.label}" if rep.option else "-"
        nodes = ", ".join(
            f"{r.node_id} ({r.gpus} card{'s' if r.gpus != 1 else ''})"
            if r.gpus
            else f"{r.node_id} ({r.host_gb:.1f} GiB RAM)"
            for r in rep.placement
        )
        # a final record keeps where each replica was at the end: said in the past, its cards freed
        state = f"was {rep.state}" if rec.state.final else rep.state
        freed = " (freed)" if rec.state.final and rep.placement else ""
        line = f"  replica {rep.index}: {state}" + (f", {where}: {nodes}{freed}" if rep.placement else "")
        if rep.wait is not None and rep.state != "placed":
            line += f" [{rep.wait.kind}]"
        lines.append(line)
        if rep.engine is not None and rep.placement and not rec.state.final:
            lines.append(f"    engine: {engine_text(rep.engine)}")
    if rec.nomination is not None:
        held = ", ".join(f"{h.node_id} {h.gpus} of {rec.nomination.wanted}" for h in rec.nomination.holds)
        lines.append(f"  holding: {held} until {rec.nomination.until.isoformat(timespec='seconds')}")
    if rec.reason:
        lines.append(f"  reason:  {rec.reason}")
    lines.append(f"  updated: {rec.updated_at.isoformat()} (version {rec.version}, planned {rec.attempts}x)")
    lines += job_command_lines(rec)  # what the engines run, as the plan sized them
    return "\n".join(lines)


def engine_text(cond: EngineCondition) -> str:
    """A replica's engine in a few words: ``serving since ...: host:port (model)``, or why it is gone."""
    since = cond.since.isoformat(timespec="seconds")
    restarted = f", started again {cond.restarts}x" if cond.restarts else ""
    if cond.state == "serving":
        model = f" ({cond.model})" if cond.model else ""
        return f"serving since {since}: {cond.endpoint}{model}{restarted}"
    if cond.dead:
        return f"{cond.state} since {since} on {cond.node_id}: {cond.reason or 'no reason given'}{restarted}"
    return f"starting since {since} on {cond.node_id}"


CARD_GLYPHS = {"reserved": "█", "held": "▓", "busy": "▒", "free": "░", "unreadable": "×"}
"""How a card is drawn: reserved by a placed job, held for the waiting job at the head of its class,
busy with something outside modelplan, or free."""


def node_cards(snap: Snapshot, node_id: str) -> dict[str, int]:
    """A node's cards by what they are doing: reserved, held (for a waiting job), busy, free."""
    rec = snap.records[node_id]
    every = snap.held.get(node_id, {})
    holds = {hid: h for hid, h in every.items() if not h.unreadable}
    reserved = sum(h.gpus for h in holds.values() if not h.nominated)
    held = sum(h.gpus for h in holds.values() if h.nominated)
    started = sum(h.gpus for hid, h in holds.items() if hid in rec.started and not h.nominated)
    # what the agent reports in use, less what modelplan's started replicas account for
    busy = max(0, rec.gpus - rec.free_gpus - started)
    busy = min(busy, rec.gpus - reserved - held)
    free = max(0, rec.gpus - reserved - held - busy)
    if len(holds) < len(every):  # a hold that cannot be read keeps every card it might hold taken
        return {"reserved": reserved, "held": held, "busy": busy, "unreadable": free, "free": 0}
    return {"reserved": reserved, "held": held, "busy": busy, "free": free}


def pool_picture(snap: Snapshot) -> str:
    """Each node as a row of cards, with its RAM."""
    if not snap.records:
        return "no node in the pool"
    legend = "  ".join(f"{g} {name}" for name, g in CARD_GLYPHS.items() if name != "unreadable")
    rows = []
    for node_id in sorted(snap.records):
        rec = snap.records[node_id]
        cards = node_cards(snap, node_id)
        drawn = "".join(CARD_GLYPHS[k] * n for k, n in cards.items()) or "(no cards)"
        if cards.get("unreadable"):
            drawn += f"  ({CARD_GLYPHS['unreadable']} kept taken: a hold here does not parse)"
        ram = ram_text(snap, node_id)
        what = f"{rec.gpus} × {rec.gpu_class}" if rec.gpu_class else "CPU node"
        fabric = f" on {rec.fabric}" if rec.fabric else ""
        rows.append((node_id, what + fabric, drawn, ram))
    return _table(rows) + "\n" + legend


def ram_text(snap: Snapshot, node_id: str) -> str:
    """A node's RAM as the numbers are: what its last heartbeat reported unused, then what of that modelplan
    has reserved for replicas the node has not reported started (a plan counts it as taken), and what its
    started replicas hold (part of what the heartbeat counted as used)."""
    rec = snap.records[node_id]
    holds = {hid: h for hid, h in snap.held.get(node_id, {}).items() if not h.unreadable}
    waiting = sum(h.host_gb for hid, h in holds.items() if hid not in rec.started)
    running = sum(h.host_gb for hid, h in holds.items() if hid in rec.started)
    text = f"RAM {rec.host_free_gb} of {rec.host_mem_gb} GiB unused at the last heartbeat"
    text += f", {waiting:.1f} GiB of it reserved for replicas not yet started" if waiting else ""
    return text + (f"; {running:.1f} GiB used by started replicas" if running else "")


def job_row(rec: JobRecord) -> list[str]:
    """One job: its id, state, model, and where each replica runs (or what it waits for)."""
    parts = [rec.job_id, rec.state.value, rec.request.model]
    for rep in rec.replicas:
        if rep.placement:
            nodes = ",".join(r.node_id for r in rep.placement)
            where = rep.option.label if rep.option else "?"
            tag = " (fallback)" if rep.state == "fallback" else ""
            artifact = rep.option.artifact if rep.option else "?"
            if rec.state.final:
                parts.append(f"ran {artifact} on {where} at {nodes}{tag}")
            elif rep.engine is not None and rep.engine.dead:
                # its cards are held, but nothing answers: not "runs"
                parts.append(f"engine {rep.engine.state} at {nodes} ({artifact} on {where}{tag}; cards held)")
            else:
                serving = f", serving at {rep.engine.endpoint}" if rep.engine and rep.engine.state == "serving" else ""
                parts.append(f"runs {artifact} on {where} at {nodes}{tag}{serving}")
        elif rec.option is not None:
            parts.append(f"waits for {rec.option.label}" + (f" [{rep.wait.kind}]" if rep.wait else ""))
    if not rec.replicas and rec.reason:
        parts.append(rec.reason if len(rec.reason) <= 100 else rec.reason[:97] + "...")
    # replicas alike are said once, with how many: "3 replicas: runs original on 1 × h100-80g at gpu-1"
    alike = Counter(parts[3:])
    said = [f"{n} replicas: {where}" if n > 1 else where for where, n in alike.items()]
    return [parts[0], parts[1], parts[2], "; ".join(said)]


def conflict_line(c: ConflictRecord) -> str:
    """A node id two agents publish under, on one line: its boots, since when, how often the boot flipped."""
    boots = ", ".join(b.boot_id for b in c.boots)
    since = c.since.isoformat(timespec="seconds")
    flips = f"{c.flips} flip{'s' if c.flips != 1 else ''}"
    return f"node {c.node_id} claimed by {len(c.boots)} agents (boots {boots}) since {since}, {flips}: out of the pool"


def beat_text(beat: Beat, node_id: str, last: int | None = None, *, seq_given: bool = True) -> str:
    """What became of a heartbeat ``modelplan heartbeat`` published; a stale one with ``last``, the seq of
    the node's stored heartbeat of its boot, says what seq would be stored: above it, and the default (the
    clock in microseconds) too unless ``seq_given`` is False (the default was given, and is behind it)."""
    if beat is Beat.STALE and last is not None:
        said = f"stale: node {node_id}'s last seq was {last}"
        if seq_given:
            said += f" (the default seq is the clock in microseconds); give a seq above {last} or leave --seq out"
        else:
            said += f", ahead of the clock in microseconds (the default seq); give a seq above {last}"
        return said + "; nothing changed"
    return {
        Beat.OK: "stored",
        Beat.STALE: "stale: an older heartbeat than the one stored; nothing changed",
        Beat.CONFLICT: f"conflict: another agent publishes as node {node_id}; not stored (see modelplan status)",
    }.get(beat, "not stored: the record does not decode")


FAILED_SHOWN = 3
"""How many failed jobs ``modelplan status`` names, the latest first; the rest are counted."""


def nothing_text(prefix: str, where: str) -> str:
    """What ``modelplan status`` says of a prefix with nothing under it: no node, job or worker (a mistyped
    ``--prefix``, or a deployment not started yet)."""
    on = f" on {where}" if where else ""
    return (
        f"nothing under prefix {prefix!r}{on}: no node reports, no job was submitted and no worker runs under it; "
        "is --prefix (or $MODELPLAN_PREFIX) right?"
    )


def failed_lines(failed: Sequence[JobRecord], total: int) -> list[str]:
    """The latest failed jobs, each with why, and how many more failed (``total`` in all)."""
    lines = [f"failed {r.job_id}: {r.reason if len(r.reason) <= 100 else r.reason[:97] + '...'}" for r in failed]
    more = total - len(failed)
    return lines + ([f"{more} more failed: modelplan job JOB_ID says why"] if failed and more > 0 else [])


def status_text(
    snap: Snapshot,
    counts: dict[str, int],
    jobs: Sequence[JobRecord],
    quarantined: Mapping[str, Mapping[str, Any]] | None = None,
    conflicts: Sequence[ConflictRecord] = (),
    refused: Recent | Sequence[Refusal] = (),
    workers: int | None = None,
    off: Sequence[tuple[str, Kind, Run]] = (),
    failed: Sequence[JobRecord] = (),
) -> str:
    """The pool drawn as cards, then each node id two agents publish under and each kind of write the
    server's ACL refused a login (``Recent``: the latest only, said since when), then the jobs at a glance
    (the ``failed`` named, with why, and how many more) and the whole engine command line of each job's best
    option, as it was sized, then the models whose estimate was furthest from what their engines were seen to hold
    (``off``), then one line for each stored record that does not parse. ``workers``: how many workers are
    running, said below the pool."""
    n = len(snap.records)
    out = [f"{n} node{'' if n == 1 else 's'} in the pool", pool_picture(snap)] if n else [pool_picture(snap)]
    out += [workers_text(workers)] if workers is not None else []
    out += [conflict_line(c) for c in conflicts]
    out += refused.lines() if isinstance(refused, Recent) else [f.line() for f in refused]
    out.append("jobs: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n) if any(counts.values()) else "no jobs")
    out += failed_lines(failed, counts.get(JobState.FAILED.value, 0))
    out += [_table([job_row(r) for r in jobs])] if jobs else []
    # the engine command line of each job's best option, as the plan sized it
    commands = [f"{r.job_id}: {shown(engine_command(r.request, r.option))}" for r in jobs if r.option]
    out += commands + placeholders_text(commands)
    out += ["estimates furthest off what the engines held:", *(off_line(*o) for o in off)] if off else []
    for key, found in sorted((quarantined or {}).items()):
        action = f" ({found['action']})" if found.get("action") else ""
        out.append(f"unreadable record {key}: {found.get('what', '?')}{action}")
    return "\n".join(out)


def _table(rows: Sequence[Sequence[str]]) -> str:
    width = max(len(r) for r in rows)
    rows = [list(r) + [""] * (width - len(r)) for r in rows]
    widths = [max(len(r[c]) for r in rows) for c in range(width)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows)
