"""Holds no job owns are reclaimed by the sweep: one whose job has no record, or a final one, or a record
that does not list it, keeps its cards taken for good otherwise. Cleared as a commit clears a hold (the
mirrors told, a pass signalled), so the job waiting for those cards is placed; a hold a job owns, or one
of a version newer than the record read (a commit in flight), is never touched."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from structlog.testing import capture_logs

from producer import Client
from tests.worker.helpers import drain, hb, request, signalled, whole_state
from tests.worker.test_fallbacks_replicas import big_request
from worker import constants as C
from worker import maintenance
from worker.records import JobState
from worker.scripts import text


def plant_hold(client: Client, node_id: str, hold_id: str, gpus: int = 1, boot: str = "boot-1") -> None:
    """A hold written straight into ``held:{node}``, as a failure might leave one or anyone may write one."""
    value = json.dumps({"gpus": gpus, "host_gb": 0.0, "boot_id": boot, "nominated": hold_id.endswith(":nominated")})
    client.redis.hset(client.keys.held(node_id), hold_id, value)
    client.redis.sadd(client.keys.held_nodes, node_id)


def no_record(client: Client) -> tuple[str, dict[str, list[str]]]:
    client.heartbeat(hb("gpu-1", gpus=1))
    plant_hold(client, "gpu-1", "ghost:0:1")
    return "ghost:0:1", {}


def released(client: Client) -> tuple[str, dict[str, list[str]]]:
    client.heartbeat(hb("gpu-1", gpus=1))
    client.submit(request(), job_id="done")
    drain(client)
    hold = client.get("done").placement[0].hold_id
    client.release("done")
    plant_hold(client, "gpu-1", hold)  # left behind as the job was released
    return hold, {"released": ["done"]}


def cancelled(client: Client) -> tuple[str, dict[str, list[str]]]:
    client.heartbeat(hb("gpu-1", gpus=1, free=0))
    client.submit(request(), job_id="done")
    drain(client)
    client.cancel("done")
    client.heartbeat(hb("gpu-1", gpus=1, seq=2))
    plant_hold(client, "gpu-1", "done:nominated")
    return "done:nominated", {"cancelled": ["done"]}


def failed(client: Client) -> tuple[str, dict[str, list[str]]]:
    client.heartbeat(hb("cpu-1", "", host=8))
    client.submit(request(), job_id="done")
    drain(client)  # no node in the pool can hold it
    assert client.get("done").state is JobState.FAILED
    client.heartbeat(hb("gpu-1", gpus=1))
    plant_hold(client, "gpu-1", "done:0:1")
    return "done:0:1", {"failed": ["done"]}


def not_listed(client: Client) -> tuple[str, dict[str, list[str]]]:
    """A placed job whose record lists one hold on the node, and a second there of a version it passed."""
    client.heartbeat(hb("gpu-1", gpus=2))
    client.submit(request(), job_id="placed")
    drain(client)
    rec = client.get("placed")
    assert rec.state is JobState.PLACED and rec.version >= 1
    plant_hold(client, "gpu-1", f"placed:1:{rec.version}")
    return f"placed:1:{rec.version}", {"placed": ["placed"]}


def nomination_not_listed(client: Client) -> tuple[str, dict[str, list[str]]]:
    client.heartbeat(hb("gpu-1", gpus=2))
    client.submit(request(), job_id="placed")
    drain(client)
    plant_hold(client, "gpu-1", "placed:nominated")
    return "placed:nominated", {"placed": ["placed"]}


@pytest.mark.parametrize("make", [no_record, released, cancelled, failed, not_listed, nomination_not_listed])
def test_a_hold_no_job_owns_is_reclaimed_and_the_waiting_job_placed(
    client: Client, monkeypatch: pytest.MonkeyPatch, make: Callable[[Client], tuple[str, dict[str, list[str]]]]
) -> None:
    hold, index = make(client)
    client.submit(request(), job_id="waiting")
    drain(client)
    assert client.get("waiting").state is JobState.WAITING  # the planted hold takes the card it wants
    monkeypatch.setattr(C, "ORPHAN_GRACE_S", 0.0)
    state = maintenance.SweepState()
    with capture_logs() as events:
        first = maintenance.sweep(client.store, force=True, state=state)
        client.redis.delete(client.keys.wake_signal, client.keys.wake_classes)  # as if its pass had run
        second = maintenance.sweep(client.store, force=True, state=state)
    assert (first["holds_reclaimed"], second["holds_reclaimed"]) == (0, 1)  # seen by one sweep, cleared by the next
    reclaimed = [e for e in events if e["event"] == "holds_reclaimed"]
    assert len(reclaimed) == 1 and reclaimed[0]["holds"][0].startswith(f"gpu-1/{hold} (")
    assert signalled(client)
    changes: Any = client.redis.xrange(client.keys.pool_changes)
    cleared = [f for _, f in changes if f.get(b"h") == hold.encode()]
    assert cleared[-1] == {b"n": b"gpu-1", b"h": hold.encode(), b"v": b""}  # the mirrors told
    drain(client)
    assert client.get("waiting").state is JobState.PLACED
    placed = sorted(["waiting", *index.get("placed", [])])
    assert whole_state(client) == {
        "index": {**index, "placed": placed},
        "records": {j: s for s, ids in {**index, "placed": placed}.items() for j in ids},
        "held": {"gpu-1": dict.fromkeys(placed, 1)},
        "held_nodes": ["gpu-1"],
    }


def test_the_holds_jobs_own_are_never_touched(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """A placed job's holds, a waiting job's nomination, and a hold of a version newer than the record (a
    commit the sweep's read came before) stay, however many sweeps."""
    client.heartbeat(hb("gpu-1", gpus=2))
    client.heartbeat(hb("gpu-2", gpus=8, free=4))
    client.submit(request(replicas=2), job_id="placed")
    drain(client)
    client.submit(big_request(), job_id="big")
    drain(client)
    client.heartbeat(hb("gpu-2", gpus=8, free=5, seq=2))  # a card frees: the pass holds the free ones for it
    drain(client)
    rec = client.get("placed")
    plant_hold(client, "gpu-1", f"placed:5:{rec.version + 1}", gpus=0)
    before = whole_state(client)
    held_before = {n: client.redis.hgetall(client.keys.held(n)) for n in ("gpu-1", "gpu-2")}
    assert before["held"] == {"gpu-1": {"placed": 2}} and before["nominated"] == {"gpu-2": {"big": 5}}
    monkeypatch.setattr(C, "ORPHAN_GRACE_S", 0.0)
    state = maintenance.SweepState()
    for _ in range(3):
        assert maintenance.sweep(client.store, force=True, state=state)["holds_reclaimed"] == 0
    assert state.orphans.orphans == {}
    assert whole_state(client) == before
    assert {n: client.redis.hgetall(client.keys.held(n)) for n in ("gpu-1", "gpu-2")} == held_before


def test_a_hold_is_reclaimed_only_past_its_grace_and_unchanged(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen with no owner, a hold waits out ``ORPHAN_GRACE_S``; one rewritten since it was seen is not
    cleared on that sighting, but judged afresh."""
    no_record(client)
    state = maintenance.SweepState()
    monkeypatch.setattr(C, "ORPHAN_GRACE_S", 3600.0)
    for _ in range(3):
        assert maintenance.sweep(client.store, force=True, state=state)["holds_reclaimed"] == 0
    monkeypatch.setattr(C, "ORPHAN_GRACE_S", 0.0)
    plant_hold(client, "gpu-1", "ghost:0:1", boot="boot-2")  # rewritten since it was seen
    assert maintenance.sweep(client.store, force=True, state=state)["holds_reclaimed"] == 0  # and seen anew
    assert [text(h) for h in client.redis.hkeys(client.keys.held("gpu-1"))] == ["ghost:0:1"]
    assert maintenance.sweep(client.store, force=True, state=state)["holds_reclaimed"] == 1
    assert not client.redis.exists(client.keys.held("gpu-1"))
    assert not client.redis.sismember(client.keys.held_nodes, "gpu-1")


def test_a_round_over_many_nodes_goes_a_batch_at_a_time(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(C, "ORPHAN_GRACE_S", 0.0)
    monkeypatch.setattr(C, "ORPHAN_SWEEP_NODES", 2)
    for i in range(5):
        plant_hold(client, f"gpu-{i}", f"ghost-{i}:0:1")
    state = maintenance.SweepState()
    got = [maintenance.sweep(client.store, force=True, state=state)["holds_reclaimed"] for _ in range(5)]
    assert got == [0, 2, 2, 1, 0]
    assert client.redis.smembers(client.keys.held_nodes) == set()
