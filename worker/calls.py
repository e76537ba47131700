"""What each Lua script is given: the keys and arguments of one call, in the order its header lists them.

Pure: nothing here talks to Redis. ``worker.store`` makes the calls and reads their replies; the scripts
themselves are in ``worker/lua``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from worker import constants as C
from worker.jobtext import job_text
from worker.keys import Keys
from worker.metrics import CONFLICT_HEARTBEATS, NODE_RECORDS_DROPPED
from worker.pool import HoldSpec
from worker.records import JobRecord, JobState, json_of

Call = tuple[list[str], list[Any]]
"""A script call's keys and arguments."""


def heartbeat_call(k: Keys, beats: Sequence[tuple[str, str]]) -> Call:
    """``heartbeat.lua`` storing ``beats``, each a node's id and its stored record's JSON
    (``reports.stored_json``): the script reads the rest from the record where it needs it. Only each
    node's own keys (``Keys.node_keys``), in the order of its heartbeat: nothing shared."""
    keys: list[str] = []
    args: list[Any] = [C.NODE_TTL_MS, C.BOOT_DISPLACED_MS, C.CONFLICT_CLEAR_MS, C.SCHEMA_VERSION]
    args.append(C.NODE_RECORD_MAX_BYTES)
    node_keys = k.node_keys
    for node_id, raw in beats:
        keys += node_keys(node_id)
        args += [node_id, raw]
    return keys, args


def intake_call(k: Keys, node_ids: Sequence[str]) -> Call:
    """``intake.lua`` taking what ``node_ids``' own keys say into the shared state (a worker's rights)."""
    keys = [k.nodes, k.epoch, k.wake_signal, k.wake_classes, k.pool_changes, k.pending_classes]
    keys += [k.conflicts, k.stats, k.restarts, k.taken]
    args: list[Any] = [C.POOL_CHANGES_MAXLEN, C.NODE_RECORD_MAX_BYTES, CONFLICT_HEARTBEATS]
    args += [C.CONFLICT_REFUSED_STEP_MAX, NODE_RECORDS_DROPPED]
    for node_id in node_ids:
        keys += [k.node(node_id), k.held(node_id), k.conflict(node_id)]
        args.append(node_id)
    return keys, args


def claim_call(k: Keys, job_id: str, worker: str, now: datetime) -> Call:
    """``claim.lua`` taking ``job_id`` into planning for ``worker`` at ``now``, under a lease."""
    until = now + timedelta(milliseconds=C.LEASE_MS)
    keys = [k.job(job_id), k.job_events(job_id), k.events]
    keys += [k.jobs(JobState.QUEUED), k.jobs(JobState.PLANNING), k.pending, k.pending_for, k.pending_classes]
    keys += [k.pending_records]
    args: list[Any] = [job_id, json_of(now), json.dumps(worker), json_of(until), until.timestamp() * 1000]
    args += [C.EVENTS_MAXLEN, C.JOB_EVENTS_MAXLEN, f"planning on {worker}", C.SCHEMA_VERSION]
    return keys, args


def transition_call(
    k: Keys,
    old: JobRecord,
    new: JobRecord,
    *,
    reason: str,
    score: float,
    pending: tuple[str, float] | None,
    epoch: str | None,
    place: Sequence[HoldSpec],
    clear: Sequence[tuple[str, str, str]],
) -> Call:
    """``transition.lua`` moving ``old`` to ``new`` (``Store.transition`` says what each part means)."""
    keys = [
        k.job(new.job_id),
        k.job_events(new.job_id),
        k.events,
        k.jobs(old.state),
        k.jobs(new.state),
        k.pending,
        k.pending_for,
        k.epoch,
        k.wake_signal,
        k.wake_classes,
        k.held_nodes,
        k.pool_changes,
        k.pending_classes,
        k.pending_records,
    ]
    args: list[Any] = [
        new.job_id,
        old.version,
        job_text(new),
        new.state.value,
        score,
        pending[0] if pending else "",
        pending[1] if pending else 0,
        epoch if epoch is not None and pending else "",
        C.FINISHED_TTL_S if new.state.final else -1 if old.state.final else 0,
        C.EVENTS_MAXLEN,
        C.JOB_EVENTS_MAXLEN,
        reason,
        len(place),
        len(clear),
        C.POOL_CHANGES_MAXLEN,
    ]
    for h in place:
        keys += [k.node(h.node_id), k.held(h.node_id)]
        args += [h.node_id, h.hold_id, h.gpus, repr(float(h.host_gb)), int(h.nominated), h.api_key]
    for node_id, hid, cls in clear:
        keys.append(k.held(node_id))
        args += [node_id, hid, cls]
    return keys, args
