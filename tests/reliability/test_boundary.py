"""One node agent's login, the most exposed credential of a fleet, cannot stop the fleet: it writes only its
own node's keys (``producer.roles``), and every shared key the pool runs on (the change feed, the epoch,
counters, conflicts, pending sets, wake-ups, the nodes index, restarts) is written by workers alone
(``worker.intake``). Each attack runs under the agent's own ACL login on a real Redis with a worker
process running; after it, nothing is half-written (``Checker``), no card is in two placed records, and a
valid job on an honest node is placed within ``PLACED_WITHIN_S``. The functions themselves put right a
shared value that is not what it must be (written by a hand with more rights), never stopping half-way."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from producer import Client
from tests.reliability.invariants import Checker
from tests.reliability.roles_server import Roles, roles_server
from tests.reliability.test_roles import PLACED_WITHIN_S, placed, until
from tests.worker.helpers import hb, request
from tests.worker.processes import WorkerProcess
from worker.keys import Keys
from worker.metrics import NODE_RECORDS_DROPPED
from worker.records import JobState
from worker.scripts import text

K = Keys()
MAX_ID = "18446744073709551615-18446744073709551615"


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Roles]:
    """The roles' server, a worker process on the worker's login, an attacker's node (``n1``) and an honest
    one-card node (``n2``), each on its own agent's login."""
    with roles_server(agents=("n1", "n2")) as srv:
        worker = WorkerProcess(srv.url("worker"), tmp_path, "w1")
        try:
            assert srv.client("agent", "n1").heartbeat(hb("n1", gpus=1, free=0))
            assert srv.client("agent", "n2").heartbeat(hb("n2", gpus=1))
            yield srv
        finally:
            worker.stop()


def refused(r: redis.Redis, *command: object) -> None:
    with pytest.raises(redis.exceptions.NoPermissionError):
        r.execute_command(*command)  # type: ignore[no-untyped-call]


def sound(srv: Roles) -> None:
    """No invariant broken, and no card in two placed records."""
    admin = srv.admin()
    assert Checker(admin, K).check(["n1", "n2"]) == []
    for node in ("n1", "n2"):
        placed_here = [h for h, v in admin.hgetall(K.held(node)).items() if not json.loads(v)["nominated"]]
        assert len(placed_here) <= 1, f"{node}: {placed_here}"


def release_then_place(srv: Roles) -> None:
    """A job placed on the honest node, released, and the next one placed there within the time."""
    a = srv.client("client", "svc-a", client_id="svc-a")
    first = a.submit(request(), job_id="first")
    assert [p.node_id for p in placed(a, first, within=10).placement] == ["n2"]
    assert a.release(first).state is JobState.RELEASED
    second = a.submit(request(), job_id="second")
    assert [p.node_id for p in placed(a, second, within=PLACED_WITHIN_S).placement] == ["n2"]
    sound(srv)


def test_an_agent_cannot_jam_the_change_feed(fleet: Roles) -> None:
    """Attack 1: an entry at the largest id makes every automatic-id XADD fail."""
    n1 = fleet.client("agent", "n1").redis
    refused(n1, "XADD", K.pool_changes, MAX_ID, "x", "1")
    # whoever could (a hand with the admin's rights): the next function to append makes the feed anew
    fleet.admin().execute_command("XADD", K.pool_changes, MAX_ID, "x", "1")  # type: ignore[no-untyped-call]
    release_then_place(fleet)
    assert fleet.client("agent", "n2").heartbeat(hb("n2", gpus=1, seq=5))


def test_an_agent_cannot_break_the_epoch(fleet: Roles) -> None:
    """Attack 2: an epoch that is no integer stopped a release half-way (its hold deleted, its record still
    placed), and the next job went onto the same card."""
    n1 = fleet.client("agent", "n1").redis
    refused(n1, "SET", K.epoch, "x")
    fleet.admin().set(K.epoch, "x")
    release_then_place(fleet)
    assert fleet.admin().get(K.epoch) != b"x"


@pytest.mark.parametrize("key", [K.stats, K.conflicts], ids=["stats", "conflicts"])
def test_an_agent_cannot_retype_the_counters(fleet: Roles, key: str) -> None:
    """Attack 3: ``stats`` or ``conflicts`` of another type had every heartbeat refused, and the fleet
    left the pool."""
    n1 = fleet.client("agent", "n1").redis
    refused(n1, "DEL", key)
    refused(n1, "SET", key, "x")
    fleet.admin().delete(key)
    fleet.admin().set(key, "x")
    n2 = fleet.client("agent", "n2")
    assert n2.heartbeat(hb("n2", gpus=1, seq=2))  # a refresh
    assert n2.heartbeat(hb("n2", gpus=1, free=0, seq=3))  # a change, taken in by the worker
    until(lambda: fleet.admin().type(key) != b"string", within=10)
    assert n2.heartbeat(hb("n2", gpus=1, free=1, seq=4))
    release_then_place(fleet)


def test_an_agent_cannot_grow_shared_memory(fleet: Roles) -> None:
    """Attack 7: made-up counters and a huge change-feed entry are refused; the agent's own record, grown
    past ``NODE_RECORD_MAX_BYTES``, is deleted as it is taken in, and counted."""
    n1 = fleet.client("agent", "n1").redis
    for i in range(3):
        refused(n1, "HINCRBY", K.stats, f"made-up-{i}", 1)
    refused(n1, "XADD", K.pool_changes, "*", "n", "n1", "r", "x" * (1 << 20))
    assert not [f for f in fleet.admin().hkeys(K.stats) if text(f).startswith("made-up")]
    n1.set(K.node("n1"), "x" * (2 << 20), px=60_000)  # its own key: the server cannot bound it
    until(lambda: fleet.admin().exists(K.node("n1")) == 0, within=10)
    assert int(fleet.admin().hget(K.stats, NODE_RECORDS_DROPPED) or 0) >= 1
    release_then_place(fleet)


def test_a_nodes_own_keys_are_bounded_at_its_next_heartbeat(fleet: Roles) -> None:
    """The keys no notification rings (its boots, its refreshes' seq) grown by the agent's login past what a
    heartbeat writes are the node's to lose: its next heartbeat deletes them before writing, and goes on."""
    n1 = fleet.client("agent", "n1")
    raw = n1.redis
    raw.set(K.boots("n1"), "x" * (2 << 20))
    raw.hset(K.beat("n1"), mapping={f"made-up-{i}": 1 for i in range(1000)})
    assert n1.heartbeat(hb("n1", gpus=1, free=0, seq=7))
    admin = fleet.admin()
    assert (admin.strlen(K.boots("n1")) or 0) <= (1 << 20)
    assert not [f for f in admin.hkeys(K.beat("n1")) if text(f).startswith("made-up")]
    raw.hset(K.beat("n1"), "seq", "9" * 4096)  # one field, no number a seq can be
    assert n1.heartbeat(hb("n1", gpus=1, free=0, seq=8))
    assert len(admin.hget(K.beat("n1"), "seq") or b"") <= 20
    release_then_place(fleet)


def test_an_agent_writes_only_its_own_nodes_keys(fleet: Roles) -> None:
    """Every key another node or a worker reads as shared is refused to the agent's login."""
    n1 = fleet.client("agent", "n1").redis
    shared = [K.pending_classes, K.nodes, K.epoch, K.wake_signal, K.wake_classes, K.pool_changes]
    shared += [K.conflicts, K.restarts, K.stats, K.taken, K.node("n2"), K.beat("n2"), K.conflict("n2")]
    for key in shared:
        refused(n1, "DEL", key)
        refused(n1, "SET", key, "x")
    refused(n1, "PUBLISH", f"__keyspace@0__:{K.node('n2')}", "set")  # no doorbell to forge
    sound(fleet)


def test_a_worker_with_notifications_off_still_places_jobs(tmp_path: Path) -> None:
    """With ``notify-keyspace-events`` empty the worker says so once, and takes nodes in by reconciling
    in full instead."""
    with roles_server(agents=("n1",)) as srv:
        srv.admin().config_set("notify-keyspace-events", "")
        worker = WorkerProcess(srv.url("worker"), tmp_path, "w1")
        try:
            agent = srv.client("agent", "n1")
            assert agent.heartbeat(hb("n1", gpus=1))
            a = srv.client("client", "svc-a", client_id="svc-a")
            job = a.submit(request(), job_id="j")
            assert [p.node_id for p in placed(a, job, within=15).placement] == ["n1"]
            time.sleep(0.1)
        finally:
            worker.stop()
        said = [json.loads(line) for line in worker.log_path.read_text().splitlines() if line.startswith("{")]
        off = [e for e in said if e.get("event") == "keyspace_notifications_off"]
        assert len(off) == 1 and "setup-redis" in off[0]["fix"]
        assert off[0]["setting"] == "notify-keyspace-events"


def test_setup_redis_keeps_the_operators_flags() -> None:
    from producer.operator import notify_flags

    assert notify_flags("") == "K$x"
    assert notify_flags("Ex") == "ExK$"
    assert notify_flags("KA") == "KA"
    assert notify_flags("AKE") == "AKE"


def test_a_client_on_an_agents_login_leaves_its_changes_to_the_workers(fleet: Roles) -> None:
    agent = fleet.client("agent", "n1")
    assert agent.store.takes_in() is False
    assert isinstance(agent, Client)
