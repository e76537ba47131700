"""Engines that ended while their hold is still on the node: a node's heartbeat says so (``ended``, hold id
-> why), and the job's record says so too, in its reason, so that ``modelplan job`` and whoever watches the
job's stream see it. The replica keeps its cards: what to do about an engine that died (start it again,
release the job) is its owner's decision, not the planner's.

An agent speaks only for the holds on its own node: a hold that ``held:{node}`` does not hold is ignored and
counted with the footprints refused (``observations_refused``), as a footprint for it would be. Those are
said by node, once a sweep: one line for each node with how many and a few of them (``EXAMPLES``), for the
first ``NODES_LOGGED`` nodes, and one line for the rest; an agent listing thousands of made-up holds in
every heartbeat writes no more than that."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from worker import logs
from worker.ids import job_of_hold
from worker.mirrored import MirroredStore
from worker.operations import AGAIN, Again, with_retries
from worker.planning import readable_job
from worker.records import JobState, utcnow
from worker.refused import say_per_node
from worker.replies import Reply
from worker.reports import NodeRecord

log = logs.get_logger("modelplan.worker")

SEEN_KEPT = 100_000
"""How many (node, hold, why) a worker remembers having written, so that the same heartbeat again writes
nothing; past it, forgotten (a record that says so already is not written again either)."""


def reason_of(node_id: str, replica: int, why: str) -> str:
    return f"the engine of replica {replica} on {node_id} ended ({why}); its cards stay held until it is released"


def note(store: MirroredStore, records: Mapping[str, NodeRecord], seen: set[tuple[str, str, str]]) -> int:
    """Write into each job's record the engines ``records`` say ended, not written already. How many."""
    todo = [(n, h, why) for n, r in records.items() for h, why in r.ended.items() if (n, h, why) not in seen]
    if not todo:
        return 0
    if len(seen) > SEEN_KEPT:
        seen.clear()
    with store.redis.pipeline(transaction=False) as pipe:
        for node_id, hold_id, _ in todo:
            pipe.hexists(store.keys.held(node_id), hold_id)
        on_node = pipe.execute()
    written = 0
    refused: dict[str, list[str]] = {}
    for (node_id, hold_id, why), held in zip(todo, on_node, strict=True):
        seen.add((node_id, hold_id, why))
        if not held:
            refused.setdefault(node_id, []).append(hold_id)
            continue
        written += _write(store, node_id, hold_id, why)
    say_refused(refused)
    return written


def say_refused(refused: Mapping[str, Sequence[str]]) -> None:
    """Count the ends ``refused`` (hold ids by node) and log them, one line a node (``worker.refused``)."""
    why = "not holds on that node"
    say_per_node("engine_ended_refused", {n: [(h, why) for h in holds] for n, holds in refused.items()})


def _write(store: MirroredStore, node_id: str, hold_id: str, why: str) -> int:
    job_id = job_of_hold(hold_id)

    def attempt() -> int | Again:
        rec = readable_job(store, job_id)
        if rec is None or rec.state not in (JobState.PLACED, JobState.WAITING):
            return 0
        replica = next((r for r in rec.replicas if any(p.hold_id == hold_id for p in r.placement)), None)
        if replica is None:
            return 0
        reason = reason_of(node_id, replica.index, why)
        if rec.reason == reason:
            return 0
        new = rec.advance(rec.state, at=utcnow(), reason=reason)
        out = store.transition(rec, new, reason=reason)
        if out.ok:
            log.warning("engine_ended", job_id=job_id, hold_id=hold_id, node_id=node_id, why=why)
            return 1
        return 0 if out.code is Reply.GONE else AGAIN

    return with_retries(job_id, attempt)
