"""What the engines of started holds are doing, from their node's heartbeat (``engines``: hold id -> an
``EngineReport``; an older agent's ``ended``: hold id -> why), written into the job's record as a condition
of the replica (``Replica.engine``: starting, serving with its endpoint and model, ended, failed to start),
beside the job's own state, which it leaves as it is. Each change goes on the job's event stream with the
commit, so whoever watches the job sees the engine start to serve, or die.

- An engine that ended, or failed to start, keeps its cards: what to do about it (release the job, retry
  it) is its owner's decision, not the planner's; the record's reason says so.
- An engine that ran out of memory as it started is the exception: the plan counted too little. It is kept
  as an observation that raises the need (``worker.startfailures``), and the replica is planned again at
  once, its dead engine's cards freed in the same step (``moves.lose_replicas``), up to
  ``OOM_REPLANS_MAX`` times.
- A replica over several nodes (pipeline parallel) serves from its first node: only that node's agent
  speaks for its starting and serving; any of its nodes may say that it died.

An agent speaks only for the holds on its own node: a hold that ``held:{node}`` does not hold is ignored and
counted with the footprints refused (``observations_refused``), as a footprint for it would be. Those are
said by node, once a sweep: one line for each node with how many and a few of them (``EXAMPLES``), for the
first ``NODES_LOGGED`` nodes, and one line for the rest; an agent listing thousands of made-up holds in
every heartbeat writes no more than that."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from worker import logs, moves, startfailures
from worker.classes import waits_on
from worker.conditions import EngineCondition, EngineReport, condition_of
from worker.ids import job_of_hold
from worker.mirrored import MirroredStore
from worker.operations import AGAIN, Again, with_retries
from worker.planning import readable_job, waiting_score
from worker.records import JobRecord, JobState, Replica, utcnow
from worker.refused import say_per_node
from worker.replies import Reply
from worker.reports import NodeRecord

log = logs.get_logger("modelplan.worker")

SEEN_KEPT = 100_000
"""How many (node, hold, report) a worker remembers having written, so that the same heartbeat again
writes nothing; past it, forgotten (a record that says so already is not written again either)."""

ENGINE_SAID = "the engine of replica "
"""How every reason this module writes begins: a later one about the same replica replaces it."""


def reason_of(node_id: str, replica: int, why: str) -> str:
    return f"{ENGINE_SAID}{replica} on {node_id} ended ({why}); its cards stay held until it is released"


def condition_text(cond: EngineCondition, replica: int) -> str:
    """A replica's engine in words, as the record's reason and the job's stream say it."""
    head = f"{ENGINE_SAID}{replica} on {cond.node_id}"
    if cond.state == "ended":
        return reason_of(cond.node_id, replica, cond.reason or "ended")
    if cond.state == "failed to start":
        why = cond.reason or "it exited before it served"
        return f"{head} failed to start ({why}); its cards stay held until it is released"
    if cond.state == "serving":
        restarted = f" (started again {cond.restarts}x)" if cond.restarts else ""
        return f"{head} serves {cond.model or 'its model'} at {cond.endpoint}{restarted}"
    return f"{head} is starting"


def reports_of(record: NodeRecord) -> dict[str, EngineReport]:
    """What ``record`` says of its engines: ``engines``, and an older agent's ``ended`` for the rest."""
    out = {h: EngineReport(condition="ended", reason=why) for h, why in record.ended.items()}
    out.update(record.engines)
    return out


def note(store: MirroredStore, records: Mapping[str, NodeRecord], seen: set[tuple[str, str, str]]) -> int:
    """Write into each job's record what ``records`` say its engines do, not written already. How many."""
    todo = [
        (n, h, rep, rep.model_dump_json())
        for n, r in records.items()
        for h, rep in reports_of(r).items()
        if (n, h, rep.model_dump_json()) not in seen
    ]
    if not todo:
        return 0
    if len(seen) > SEEN_KEPT:
        seen.clear()
    with store.redis.pipeline(transaction=False) as pipe:
        for node_id, hold_id, _, _ in todo:
            pipe.hexists(store.keys.held(node_id), hold_id)
        on_node = pipe.execute()
    written = 0
    refused: dict[str, list[str]] = {}
    for (node_id, hold_id, report, said), held in zip(todo, on_node, strict=True):
        seen.add((node_id, hold_id, said))
        if not held:
            refused.setdefault(node_id, []).append(hold_id)
            continue
        written += _write(store, node_id, hold_id, report)
    say_refused(refused)
    return written


def say_refused(refused: Mapping[str, Sequence[str]]) -> None:
    """Count the reports ``refused`` (hold ids by node) and log them, one line a node (``worker.refused``)."""
    why = "not holds on that node"
    say_per_node("engine_ended_refused", {n: [(h, why) for h in holds] for n, holds in refused.items()})


def _replica(rec: JobRecord, node_id: str, hold_id: str) -> Replica | None:
    return next(
        (r for r in rec.replicas if any(p.hold_id == hold_id and p.node_id == node_id for p in r.placement)), None
    )


def _write(store: MirroredStore, node_id: str, hold_id: str, report: EngineReport) -> int:
    job_id = job_of_hold(hold_id)

    def attempt() -> int | Again:
        rec = readable_job(store, job_id)
        if rec is None or rec.state not in (JobState.PLACED, JobState.WAITING):
            return 0
        replica = _replica(rec, node_id, hold_id)
        if replica is None:
            return 0
        cond = EngineCondition(
            state=condition_of(report),
            since=utcnow(),
            node_id=node_id,
            hold_id=hold_id,
            endpoint=report.endpoint,
            model=report.model,
            reason=report.reason,
            restarts=report.restarts,
        )
        if not cond.dead and replica.placement[0].node_id != node_id:
            return 0  # a later stage of a pipeline: its first node speaks for it
        if cond.same(replica.engine):
            return 0
        if report.out_of_memory and replica.start_failures < startfailures.OOM_REPLANS_MAX:
            return -1  # planned again, outside this attempt (it reads and commits on its own)
        said = condition_text(cond, replica.index)
        reason = said if cond.dead or rec.reason.startswith(ENGINE_SAID) else rec.reason
        replicas = tuple(r.model_copy(update={"engine": cond}) if r is replica else r for r in rec.replicas)
        new = rec.advance(rec.state, at=utcnow(), replicas=replicas, reason=reason)
        pending = (waits_on(new, new.alternatives), waiting_score(new)) if new.pending else None
        score = waiting_score(new) if new.state is JobState.WAITING else None
        out = store.transition(rec, new, reason=said, score=score, pending=pending)
        if out.ok:
            event = {"serving": "engine_serving", "starting": "engine_starting"}.get(cond.state, "engine_ended")
            log.info(event, job_id=job_id, hold_id=hold_id, node_id=node_id, state=cond.state, why=report.reason)
            return 1
        return 0 if out.code is Reply.GONE else AGAIN

    done = with_retries(job_id, attempt)
    if done >= 0:
        return done
    return int(_out_of_memory(store, job_id, node_id, hold_id, report))


def _out_of_memory(store: MirroredStore, job_id: str, node_id: str, hold_id: str, report: EngineReport) -> bool:
    """Raise the need of the replica's kind, then plan the replica again (freeing its dead engine's cards)."""
    rec = readable_job(store, job_id)
    replica = _replica(rec, node_id, hold_id) if rec is not None else None
    if rec is None or replica is None:
        return False
    startfailures.observe(store, rec, replica, node_id, hold_id, report)
    index = replica.index
    tries = replica.start_failures + 1
    why = report.reason or "out of memory"
    said = f"{ENGINE_SAID}{index} on {node_id} ran out of memory at start ({why}); planned again with more"

    def lost_of(now: JobRecord) -> set[int]:
        return {index} if _replica(now, node_id, hold_id) is not None else set()

    def touch(new: JobRecord) -> JobRecord:
        replicas = tuple(
            r.model_copy(update={"start_failures": tries}) if r.index == index else r for r in new.replicas
        )
        return new.model_copy(update={"replicas": replicas})

    return moves.lose_replicas(store, job_id, said, lost_of, touch, node_id=node_id, hold_id=hold_id)
