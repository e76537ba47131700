"""Replicas whose holds are gone: a replica a job's record places on a node whose ``held:{node}`` no longer
holds its hold (deleted by hand, or a write Redis lost) runs on cards nothing reserves, and a plan would
hand them to another job. The sweep looks at a batch of the placed and waiting jobs each time, round after
round over them, and plans such replicas again as a node's loss does (``moves.lose_replicas``): in one
commit against the version it read, which clears what else they held and places them only where the room
is there now, so a card is never booked twice; the job's other replicas keep theirs. (Holds no record
names are the other half: ``worker.orphans``.)

A commit writes a record and its holds in one step (``transition.lua``), so a hold the record names at
the version read, missing when looked at after that read, is gone, unless the record moved on meanwhile:
then its commit is stale, and the job is read and judged again. The hold is also put on ``pool:changes``
as cleared, so that each worker's mirror of the pool reads that node's holds again: nothing told them it
went."""

from __future__ import annotations

from typing import Any

from worker import constants as C
from worker import logs, moves
from worker.mirrored import MirroredStore
from worker.records import JobRecord, JobState
from worker.store import Store

log = logs.get_logger("modelplan.maintenance")

JOBS_A_SWEEP = 250
"""The jobs one sweep looks at: a batch of one round over the placed and waiting ones."""

LOGGED = 5
"""The holds a sweep's line names, of those it found gone."""


class Round:
    """What one worker's sweeps carry from one to the next: the jobs not yet looked at in this round."""

    def __init__(self) -> None:
        self.to_look_at: list[str] = []


def missing(store: Store, records: list[JobRecord]) -> dict[str, list[tuple[int, str, str]]]:
    """For each of ``records`` (read before this), its replicas' holds that their nodes do not hold, as
    (replica, node, hold id), in one round trip. A ``held`` key of another type is the quarantine's to
    report, not a hold gone."""
    asked = [(rec.job_id, r.index, p.node_id, p.hold_id) for rec in records for r in rec.replicas for p in r.placement]
    if not asked:
        return {}
    with store.redis.pipeline(transaction=False) as pipe:
        for _, _, node_id, hold_id in asked:
            pipe.hexists(store.keys.held(node_id), hold_id)
        there: list[Any] = pipe.execute(raise_on_error=False)
    out: dict[str, list[tuple[int, str, str]]] = {}
    for (job_id, index, node_id, hold_id), found in zip(asked, there, strict=True):
        if not isinstance(found, Exception) and not found:
            out.setdefault(job_id, []).append((index, node_id, hold_id))
    return out


def repair(store: MirroredStore, seen: Round) -> int:
    """One sweep's part: look at the next ``JOBS_A_SWEEP`` jobs and plan again the replicas whose holds are
    gone. How many jobs had some planned again."""
    k, r = store.keys, store.redis
    if not seen.to_look_at:
        ids: set[str] = set()
        for state in (JobState.PLACED, JobState.WAITING):
            ids.update(store.valid_ids(r.zrange(k.jobs(state), 0, -1), k.jobs(state), "a job id", "skipped"))
        seen.to_look_at = sorted(ids, reverse=True)
    batch = [seen.to_look_at.pop() for _ in range(min(JOBS_A_SWEEP, len(seen.to_look_at)))]
    records = [rec for rec in store.jobs(batch) if isinstance(rec, JobRecord) and not rec.state.final]
    found = missing(store, records)
    if not found:
        return 0
    with r.pipeline(transaction=False) as pipe:
        for holds in found.values():
            for _, node_id, hold_id in holds:
                pipe.xadd(k.pool_changes, {"n": node_id, "h": hold_id, "v": ""}, maxlen=C.POOL_CHANGES_MAXLEN)
        pipe.execute()
    log.warning(
        "holds_missing",
        jobs=len(found),
        holds=sum(len(h) for h in found.values()),
        shown=[f"{node}/{hold}" for holds in found.values() for _, node, hold in holds][:LOGGED],
    )
    return sum(_again(store, job_id, holds) for job_id, holds in sorted(found.items()))


def _again(store: MirroredStore, job_id: str, holds: list[tuple[int, str, str]]) -> bool:
    said = "; ".join(f"the hold of replica {i} on {node} is gone" for i, node, _ in holds)

    def lost_now(rec: JobRecord) -> set[int]:
        return {index for index, _, _ in missing(store, [rec]).get(rec.job_id, [])}

    return moves.lose_replicas(store, job_id, said, lost_now)
