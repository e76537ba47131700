"""Each role under exactly its own ACL rules (``producer.roles``): the whole flow runs with nothing refused,
and what an agent or a client tried beyond its part is refused, or changes nothing a worker decides on.
After each attack a valid job is placed within ``PLACED_WITHIN_S``."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from producer import Client
from producer.cli import main
from tests.reliability.roles_server import Roles, roles_server
from tests.worker.helpers import hb, request
from tests.worker.processes import WorkerProcess
from worker import maintenance
from worker.errors import NotOwner, OverQuota, RedisForbidden
from worker.keys import Keys
from worker.records import JobRecord, JobState
from worker.scripts import script

PLACED_WITHIN_S = 2.0
"""How soon after an attack a valid job is placed by a running worker."""

K = Keys()


def placed(client: Client, job_id: str, within: float = PLACED_WITHIN_S) -> JobRecord:
    deadline = time.monotonic() + within
    while True:
        rec = client.get(job_id)
        if rec.state is JobState.PLACED or time.monotonic() > deadline:
            assert rec.state is JobState.PLACED, f"{job_id} is {rec.state.value} ({rec.reason}) after {within} s"
            return rec
        time.sleep(0.02)


def until(check: Callable[[], Any], within: float = 30.0) -> Any:
    deadline = time.monotonic() + within
    while not (got := check()):
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.05)
    return got


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Roles]:
    """The roles' server, a worker process on the worker's login, and two nodes each on its own agent's."""
    with roles_server(agents=("n1", "n2", "nodes")) as srv:
        worker = WorkerProcess(srv.url("worker"), tmp_path, "w1")
        try:
            yield srv
        finally:
            worker.stop()


def test_every_role_runs_its_part_and_the_server_refuses_nothing(tmp_path: Path) -> None:
    with roles_server(agents=("n1",), relays={"rack": "rack-*"}) as srv:
        worker = WorkerProcess(srv.url("worker"), tmp_path, "w1")
        try:
            agent = srv.client("agent", "n1")
            assert agent.heartbeat(hb("n1", gpus=2))
            relay = srv.client("relay", "rack")
            assert relay.heartbeats([hb("rack-1", "a10-24g"), hb("rack-2", "a10-24g")]) == [True, True]
            a = srv.client("client", "svc-a", client_id="svc-a")
            job = a.submit(request(), job_id="a-1")
            rec = placed(a, job)
            assert rec.owner == "svc-a" and [p.node_id for p in rec.placement] == ["n1"]
            # the client's login reads the job, and whether a worker runs, with nothing refused
            assert main(["job", "--redis-url", srv.url("client", "svc-a"), job]) == 0
            # the agent reads what runs on its node, as it does to start it
            held = agent.held_on("n1")
            assert [h.split(":", 1)[0] for h in held] == [job]
            assert [r.job_id for r in agent.records([job]) if r] == [job]
            assert a.scale(job, 2).wanted == 2
            assert a.release(job).state is JobState.RELEASED
            worker_client = srv.client("worker")
            maintenance.sweep(worker_client.store, force=True)
            assert main(["status", "--redis-url", srv.url("operator")]) == 0
        finally:
            worker.stop()
        assert srv.refusals() == []


def test_a_node_named_after_a_fixed_key_stops_nothing(cluster: Roles) -> None:
    agent = cluster.client("agent", "nodes")
    assert agent.heartbeat(hb("nodes", "h200-141g", gpus=8))
    a = cluster.client("client", "svc-a", client_id="svc-a")
    jobs = [a.submit(request(), job_id=f"j{i}") for i in range(4)]
    for job in jobs:
        assert [p.node_id for p in placed(a, job).placement] == ["nodes"]
    assert len(agent.held_on("nodes")) == 4


def test_an_agent_cannot_speak_for_another_node(cluster: Roles) -> None:
    n1, n2 = cluster.client("agent", "n1"), cluster.client("agent", "n2")
    assert n1.heartbeat(hb("n1", gpus=1, free=0))
    assert n2.heartbeat(hb("n2", gpus=1))
    with pytest.raises(RedisForbidden):
        n1.heartbeat(hb("n2", gpus=1, seq=9007199254740991, boot="forged"))
    with pytest.raises(redis.exceptions.NoPermissionError):
        n1.redis.set(K.node("n2"), "{}")
    with pytest.raises(redis.exceptions.NoPermissionError):
        n1.redis.hset(K.held("n2"), "x:1:1", "x" * (10 << 20))
    # the real agent is not stale: its next heartbeat is stored, and the job goes where the card is free
    assert n2.heartbeat(hb("n2", gpus=1, seq=2))
    a = Client.from_url(cluster.url("client", "svc-a"), client_id="svc-a")
    job = a.submit(request(), job_id="after")
    assert [p.node_id for p in placed(a, job).placement] == ["n2"]
    # the operator sees who tried
    refused = cluster.refusals()
    assert {e["username"] for e in refused} == {"modelplan.agent.n1"}
    status = Client.from_url(cluster.url("operator"))
    from producer.refusals import refusals

    lines = [f.line() for f in refusals(status.redis, status.keys) or []]
    assert any("modelplan.agent.n1" in line and "modelplan:node:n2" in line for line in lines), lines


def test_an_agent_names_its_holds_to_the_heartbeat_but_cannot_write_them(cluster: Roles) -> None:
    """The heartbeat function is handed the node's ``held:{id}`` (which Redis checks as a key it may
    write); the agent's rules allow that for FCALL alone: a function it calls with its holds as the key a
    function deletes (``signal_pass`` deletes a ``wake:signal`` that is not a list) is refused there."""
    n1 = cluster.client("agent", "n1")
    assert n1.heartbeat(hb("n1", gpus=1))
    a = cluster.client("client", "svc-a", client_id="svc-a")
    job = a.submit(request(), job_id="held")
    placed(a, job)
    before = cluster.admin().hgetall(K.held("n1"))
    assert len(before) == 1
    with pytest.raises(redis.exceptions.NoPermissionError):
        n1.redis.delete(K.held("n1"))
    with pytest.raises(redis.ResponseError, match=r"access (at least )?one of the keys"):
        script(n1.redis, "signal_pass")(keys=[K.held("n1"), K.wake_classes], args=[0])
    assert cluster.admin().hgetall(K.held("n1")) == before
    assert n1.heartbeat(hb("n1", gpus=1, free=0, seq=2))  # and its heartbeats go on


def test_forged_change_feed_entries_decide_nothing(cluster: Roles) -> None:
    n1 = cluster.client("agent", "n1")
    assert n1.heartbeat(hb("n1", gpus=1))
    assert cluster.client("agent", "n2").heartbeat(hb("n2", gpus=1))
    a = cluster.client("client", "svc-a", client_id="svc-a")
    placed(a, a.submit(request(), job_id="warm"))  # the worker's mirror is warm
    for node in ("n1", "n2"):
        # a node's login may not write the change feed at all (the workers' intake writes it) ...
        with pytest.raises(redis.exceptions.NoPermissionError):
            n1.redis.xadd(K.pool_changes, {"n": node, "gone": "1"})
        # ... and what anyone else forges there only has a worker read again what it names
        cluster.admin().xadd(K.pool_changes, {"n": node, "gone": "1"})
        cluster.admin().xadd(K.pool_changes, {"n": node, "h": "ahead:nominated", "v": '{"gpus":1,"host_gb":0}'})
    job = a.submit(request(), job_id="after")
    assert len(placed(a, job).placement) == 1


def test_a_mistyped_wake_signal_stalls_no_wake_up(cluster: Roles) -> None:
    n1 = cluster.client("agent", "n1")
    assert n1.heartbeat(hb("n1", gpus=1))
    a = cluster.client("client", "svc-a", client_id="svc-a")
    first = a.submit(request(), job_id="first")
    placed(a, first)
    second = a.submit(request(), job_id="second")
    until(lambda: a.get(second).state is JobState.WAITING)
    with pytest.raises(redis.exceptions.NoPermissionError):  # no node's login may touch it
        n1.redis.delete(K.wake_signal)
    cluster.admin().delete(K.wake_signal)
    cluster.admin().set(K.wake_signal, "x")
    a.release(first)
    placed(a, second)


def test_no_role_runs_lua_of_its_own(cluster: Roles) -> None:
    for role, name in (("worker", ""), ("agent", "n1"), ("client", "svc-a"), ("operator", "")):
        r = cluster.client(role, name).redis
        commands: list[tuple[str, ...]] = [
            ("EVAL", "while true do end", "0"),
            ("SCRIPT", "LOAD", "return 1"),
            ("FUNCTION", "LOAD", "#!lua name=mine\nredis.register_function('spin', function() while true do end end)"),
        ]
        for command in commands:
            if role == "operator" and command[0] == "FUNCTION":
                continue  # the operator loads modelplan's library, and is trusted with the server
            with pytest.raises(redis.exceptions.NoPermissionError):
                r.execute_command(*command)  # type: ignore[no-untyped-call]
    assert cluster.client("worker").redis.ping()


def test_a_client_acts_on_its_own_jobs_only(cluster: Roles) -> None:
    assert cluster.client("agent", "n1").heartbeat(hb("n1", gpus=2))
    a = cluster.client("client", "svc-a", client_id="svc-a")
    b = cluster.client("client", "svc-b", client_id="svc-b")
    job = a.submit(request(), job_id="a-1")
    before = placed(a, job)
    acts: list[Callable[[], JobRecord]] = [lambda: b.release(job), lambda: b.cancel(job), lambda: b.scale(job, 256)]
    for act in acts:
        with pytest.raises(NotOwner):
            act()
    with pytest.raises(OverQuota):
        b.submit(request(replicas=256), job_id="b-big")
    # nor can it write where a worker or another client would read it as theirs
    for key, fields in (
        (K.client_requests("svc-a"), {"op": "release", "job_id": job}),
        (K.requests, {"op": "release", "job_id": job}),
        (K.job_events(job), {"job_id": job, "state": "failed", "version": "9", "reason": "forged"}),
        (K.client_replies("svc-a"), {"ok": "0", "job_id": job, "state": "failed"}),
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            b.redis.xadd(key, fields)  # type: ignore[arg-type]
    assert a.get(job) == before
    assert a.release(job).state is JobState.RELEASED
    placed(b, b.submit(request(), job_id="b-1"))


def test_the_sweep_runs_under_the_workers_rules(cluster: Roles) -> None:
    assert cluster.client("agent", "n1").heartbeat(hb("n1", gpus=1))
    worker = cluster.client("worker")
    done = maintenance.sweep(worker.store, force=True)
    assert "waiting_sweep" in done
    assert cluster.refusals() == []


def test_two_agents_under_one_node_id_leave_every_placement_correct(
    cluster: Roles, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = cluster.client("agent", "n1"), cluster.client("agent", "n1")  # a cloned image
    assert cluster.client("agent", "n2").heartbeat(hb("n2", gpus=1))
    assert first.heartbeat(hb("n1", gpus=1, boot="boot-a"))
    a = cluster.client("client", "svc-a", client_id="svc-a")
    job = a.submit(request(), job_id="on-n1")
    placed(a, job)
    for seq in range(2, 8):
        first.publish(hb("n1", gpus=1, seq=seq, boot="boot-a"))
        second.publish(hb("n1", gpus=1, seq=seq, boot="boot-b"))
    operator = cluster.client("operator")
    assert [c.node_id for c in operator.conflicts()] == ["n1"]
    # the node is out of the pool; its job and a new one are on the other node's card or waiting for it
    assert "n1" not in operator.pool().records
    after = a.submit(request(), job_id="after")
    until(lambda: a.get(after).state in (JobState.PLACED, JobState.WAITING))
    held = {h.split(":", 1)[0] for h in operator.held_on("n2")}
    assert held <= {job, after} and len(held) == 1
    assert operator.held_on("n1") == {} or all(h.startswith(job) for h in operator.held_on("n1"))
    assert main(["status", "--redis-url", cluster.url("operator")]) == 0
    assert main(["metrics", "--redis-url", cluster.url("operator")]) == 0
    out = capsys.readouterr().out
    assert "n1" in out and "conflict" in out
    assert "modelplan_node_conflicts 1.0" in out


def test_an_agent_writing_another_node_is_reported(cluster: Roles, capsys: pytest.CaptureFixture[str]) -> None:
    n1 = cluster.client("agent", "n1")
    with pytest.raises(redis.exceptions.NoPermissionError):
        n1.redis.set(K.node("n2"), "{}")
    assert main(["status", "--redis-url", cluster.url("operator")]) == 0
    assert main(["metrics", "--redis-url", cluster.url("operator")]) == 0
    out = capsys.readouterr().out
    assert "refused by Redis: modelplan.agent.n1 tried a key outside its rules (modelplan:node:n2)" in out
    assert "modelplan_acl_refusals 1.0" in out


def test_an_agent_that_restarts_has_its_jobs_planned_again(cluster: Roles) -> None:
    n1 = cluster.client("agent", "n1")
    assert n1.heartbeat(hb("n1", gpus=1, boot="boot-1"))
    a = cluster.client("client", "svc-a", client_id="svc-a")
    job = a.submit(request(), job_id="on-n1")
    before = placed(a, job)
    # its login queues nothing: the heartbeat function leaves the notice, and a worker has it checked
    assert n1.heartbeat(hb("n1", gpus=1, boot="boot-2"))
    after = until(lambda: (r := a.get(job)).version > before.version and r.state is JobState.PLACED and r)
    assert [p.node_id for p in after.placement] == ["n1"]
    assert [h.boot_id for h in n1.held_on("n1").values()] == ["boot-2"]
    assert cluster.refusals() == []


def test_a_client_is_answered_on_its_own_replies_only(cluster: Roles) -> None:
    assert cluster.client("agent", "n1").heartbeat(hb("n1", gpus=1))
    a = cluster.client("client", "svc-a", client_id="svc-a")
    b = cluster.client("client", "svc-b", client_id="svc-b")
    job = a.submit(request(), job_id="a-1")
    placed(a, job)
    theirs = a.redis.xrange(K.client_replies("svc-a"))
    # an entry naming another client's replies, or a shared reply stream, is answered on its own
    b.redis.xadd(K.client_requests("svc-b"), {"op": "release", "job_id": job, "reply_to": "svc-a"})
    ours: Any = until(lambda: b.redis.xrange(K.client_replies("svc-b")))
    [(_, answer)] = ours
    assert answer[b"ok"] == b"false"
    assert a.redis.xrange(K.client_replies("svc-a")) == theirs
    assert a.get(job).state is JobState.PLACED
    assert cluster.client("operator").redis.exists(K.reply("svc-a")) == 0
