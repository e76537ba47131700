"""Holds no job owns: a hold in ``held:{node}`` whose job has no record, or a final one, or a record that
does not list it (a hold some failure left behind, or one written by hand) is no one's, and would keep its
cards taken for good. The sweep finds them, a batch of nodes at a time, and clears them through
``reclaim_holds.lua``, which frees their cards as a commit does (the mirrors told, a full pass signalled).

Never a hold a commit is writing: holds and records are written together by ``transition.lua``, but the
sweep reads them at different moments, so a hold of a job version newer than the record it read is left
alone; and a hold is cleared only once it has been seen ownerless for ``ORPHAN_GRACE_S`` (two sweeps at
least) with it and its job's record unchanged byte for byte since (the script checks, as it clears)."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

from worker import constants as C
from worker import logs
from worker.errors import BadRecord
from worker.ids import HOLD_PATTERN, job_of_hold
from worker.jobtext import read_job
from worker.replies import Reply
from worker.scripts import script, text
from worker.store import Store

log = logs.get_logger("modelplan.maintenance")


@dataclass(frozen=True, slots=True)
class Orphan:
    """A hold seen with no owner: where, why, what it and its job's record were (SHA-1s), and when."""

    node_id: str
    hold_id: str
    why: str
    value_sum: str
    record_sum: str
    """'' when the job had no record."""
    seen_at: float
    """``time.monotonic()`` when first seen so."""


class Seen:
    """What one worker's sweeps carry from one to the next: the holds seen with no owner (at most
    ``ORPHANS_KEPT``), and the nodes of ``holding`` not yet looked at in this round over them."""

    def __init__(self) -> None:
        self.orphans: dict[tuple[str, str], Orphan] = {}
        self.to_look_at: list[str] = []


def _sum(raw: bytes) -> str:
    return hashlib.sha1(raw, usedforsecurity=False).hexdigest()


def reclaim(store: Store, seen: Seen) -> int:
    """One sweep's part: clear the holds seen ownerless long enough and unchanged since, then look at the
    next ``ORPHAN_SWEEP_NODES`` nodes for more. How many holds were cleared."""
    cleared = _clear_due(store, seen)
    _look(store, seen)
    return cleared


def _clear_due(store: Store, seen: Seen) -> int:
    now = time.monotonic()
    due = [o for o in seen.orphans.values() if now - o.seen_at >= C.ORPHAN_GRACE_S]
    if not due:
        return 0
    k = store.keys
    keys = [k.epoch, k.wake_signal, k.wake_classes, k.held_nodes, k.pool_changes]
    args: list[Any] = [C.POOL_CHANGES_MAXLEN, len(due)]
    for o in due:
        keys += [k.held(o.node_id), k.job(job_of_hold(o.hold_id))]
        args += [o.node_id, o.hold_id, o.value_sum, o.record_sum]
    cleared, detail = script(store.redis, "reclaim_holds")(keys=keys, args=args)
    if not isinstance(cleared, int) and Reply.of(cleared) is Reply.WRONGTYPE:
        raise BadRecord(text(detail), "not of the type modelplan keeps there: no hold is reclaimed until it is")
    for o in due:  # cleared, or changed since: judged afresh when next looked at
        del seen.orphans[(o.node_id, o.hold_id)]
    if int(cleared):
        shown = [f"{o.node_id}/{o.hold_id} ({o.why})" for o in due[: C.ORPHANS_LOGGED]]
        log.warning("holds_reclaimed", cleared=int(cleared), judged=len(due), holds=shown)
    return int(cleared)


def _look(store: Store, seen: Seen) -> None:
    """Judge the holds on the next nodes of this round over ``holding`` (a new round once it is done)."""
    k, r = store.keys, store.redis
    if not seen.to_look_at:
        members = r.smembers(k.held_nodes)
        seen.to_look_at = sorted(store.valid_ids(members, k.held_nodes, "a node id", "skipped"), reverse=True)
    batch = [seen.to_look_at.pop() for _ in range(min(C.ORPHAN_SWEEP_NODES, len(seen.to_look_at)))]
    if not batch:
        return
    with r.pipeline(transaction=False) as pipe:
        for node_id in batch:
            pipe.hgetall(k.held(node_id))
        replies = pipe.execute(raise_on_error=False)
    holds: list[tuple[str, str, bytes]] = []
    for node_id, reply in zip(batch, replies, strict=True):
        if isinstance(reply, dict):  # a key of another type is the quarantine's to report, not ours
            holds += [(node_id, text(f), bytes(v)) for f, v in reply.items() if HOLD_PATTERN.fullmatch(text(f))]
    job_ids = sorted({job_of_hold(hid) for _, hid, _ in holds})
    got: list[Any] = r.mget([k.job(j) for j in job_ids]) if job_ids else []
    raws: dict[str, bytes | None] = dict(zip(job_ids, got, strict=True))
    now = time.monotonic()
    for node_id, hid, value in holds:
        raw = raws[job_of_hold(hid)]
        why = _why_orphan(k.job(job_of_hold(hid)), node_id, hid, raw)
        if why is None:
            seen.orphans.pop((node_id, hid), None)
            continue
        orphan = Orphan(node_id, hid, why, _sum(value), _sum(raw) if raw is not None else "", now)
        old = seen.orphans.get((node_id, hid))
        if old is not None and (old.value_sum, old.record_sum) == (orphan.value_sum, orphan.record_sum):
            continue  # seen so already: its grace runs from then
        if old is not None or len(seen.orphans) < C.ORPHANS_KEPT:
            seen.orphans[(node_id, hid)] = orphan


def _why_orphan(key: str, node_id: str, hid: str, raw: bytes | None) -> str | None:
    """Why no job owns the hold ``hid`` on ``node_id``, its job's record being ``raw``; None when one does,
    or may (a record that does not parse is the quarantine's, a newer hold a commit's in flight)."""
    if raw is None:
        return "its job has no record"
    try:
        rec = read_job(raw, key)
    except BadRecord:
        return None
    if rec.state.final:
        return f"its job is {rec.state.value}"
    if any((h.node_id, h.hold_id) == (node_id, hid) for h in rec.holds):
        return None
    _, _, version = hid.rpartition(":")
    if version.isdigit() and int(version) > rec.version:
        return None  # written at a version newer than the record read: a commit the read came before
    return f"its job's record (version {rec.version}) does not list it"
