"""Every periodic step under its role's own ACL rule (``producer.roles``), as a deployment runs it: each step
of the maintenance sweep, the wake-up passes and the jobs it queues, the request reader, the metrics flush
and the registrations' prune under the worker's login; the metrics exporter's scrape and ``modelplan
status`` under the operator's (the one login that may read the ACL log). The server holds a job in every
state while they run (queued, planning under a lease run out, placed, waiting, failed, cancelled,
released), and each step has something to do. No step fails, and the server's ACL log, reset first, stays
empty: a command a rule lacks shows there, even one a function runs (the sweep swallows a step's failure,
so only the log tells)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from planner.constants import GIB
from producer import Client, roles
from producer.cli import main
from producer.metrics import exposition
from tests.reliability.roles_server import Roles, roles_server
from tests.worker.helpers import hb, request
from worker import alive, intake, maintenance, metrics, observed, planning, runner
from worker import constants as C
from worker.footprints import Footprint
from worker.keys import Keys
from worker.records import JobState
from worker.reports import FOOTPRINTS
from worker.requests import Consumer

K = Keys()
GHOST = json.dumps({"gpus": 0, "host_gb": 0, "boot_id": "boot-1", "nominated": False})
"""A hold no job owns, as a failure could leave one."""


@pytest.fixture
def srv() -> Iterator[Roles]:
    with roles_server(agents=("n1", "n2", "n3", "n4", "n5"), clients=("svc-a",)) as found:
        admin = found.admin()
        try:
            admin.acl_log_reset()
        finally:
            admin.close()
        yield found


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    """What this process's mirrors hand the sweeps, and the figures a flush sends, start empty."""
    FOOTPRINTS.take()
    observed.forget()
    metrics.forget()
    yield
    FOOTPRINTS.take()
    observed.forget()
    metrics.forget()


def until(check: Callable[[], Any], within: float = 30.0) -> Any:
    deadline = time.monotonic() + within
    while not (got := check()):
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.02)
    return got


def swept(store: Any, state: maintenance.SweepState) -> dict[str, int]:
    """One sweep; every step of it ran to its end."""
    done = maintenance.sweep(store, force=True, state=state)
    assert state.failing == {}, state.failing
    return done


def drain(worker: Client) -> None:
    """What the agents stored taken in (as a worker's intake thread does when the server rings it), then the
    queue run."""
    intake.reconcile(worker.store)
    runner.drain(worker.store)


def state_of(worker: Client, job_id: str) -> JobState:
    return worker.get(job_id).state


def every_state(srv: Roles, worker: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """Jobs in every state, and something for each step of the sweep to do."""
    agents = {n: srv.client("agent", n) for n in ("n1", "n2", "n3", "n4", "n5")}
    assert agents["n1"].heartbeat(hb("n1", gpus=1))
    worker.submit(request(), job_id="released")
    drain(worker)
    assert state_of(worker, "released") is JobState.PLACED
    worker.release("released")
    worker.submit(request(), job_id="placed")
    drain(worker)
    assert agents["n3"].heartbeat(hb("n3", gpus=1))
    worker.submit(request(), job_id="on-silent")
    drain(worker)
    assert [p.node_id for p in worker.get("on-silent").placement] == ["n3"]
    assert agents["n5"].heartbeat(hb("n5", gpus=1))
    worker.submit(request(), job_id="unheld")
    drain(worker)
    assert [p.node_id for p in worker.get("unheld").placement] == ["n5"]
    assert agents["n2"].heartbeat(hb("n2", gpus=1, free=0))  # its card busy outside modelplan
    for job in ("waiting", "cancelled"):
        worker.submit(request(), job_id=job)
    drain(worker)
    worker.cancel("cancelled")
    worker.submit(request("llama-3.1-70b-instruct"), job_id="failed")
    drain(worker)
    assert {j: state_of(worker, j) for j in ("placed", "waiting", "failed", "released", "cancelled")} == {
        "placed": JobState.PLACED,
        "waiting": JobState.WAITING,
        "failed": JobState.FAILED,
        "released": JobState.RELEASED,
        "cancelled": JobState.CANCELLED,
    }
    # queued and never picked up; being planned by a worker whose lease ran out
    worker.submit(request(), job_id="queued")
    worker.submit(request(), job_id="leased")
    worker.redis.delete(worker.store.queue.key)  # their planning jobs lost (RQ's own empty() runs EVAL)
    monkeypatch.setattr(C, "QUEUED_LOST_MS", 0)
    with monkeypatch.context() as m:
        m.setattr(C, "LEASE_MS", -60_000)
        assert planning.claim(worker.store, "leased", "gone-worker") is not None
    # the engine of the placed job reports what it holds, and that it ended; a made-up hold beside it
    hold = worker.get("placed").placement[0].hold_id
    footprint = Footprint(engine="vllm", version="0.11.0", source="nvml", card_bytes=(int(20 * GIB),))
    assert agents["n1"].heartbeat(
        hb("n1", gpus=1, free=0, seq=2, started=(hold, "made-up:0:1"))
        | {"footprints": {hold: footprint.model_dump(mode="json")}}
        | {"ended": {hold: "exit status 1", "made-up:0:1": "exit status 1"}}
    )
    worker.store.snapshot()  # the worker's mirror reads the changed record, for its sweep to take
    # a node holding a job goes silent, and one holding nothing
    with monkeypatch.context() as m:
        m.setattr(C, "NODE_TTL_MS", 200)
        assert agents["n3"].heartbeat(hb("n3", gpus=1, free=0, seq=2))
        assert agents["n4"].heartbeat(hb("n4", "", host=2))
    admin = srv.admin()
    try:
        until(lambda: not admin.exists(K.node("n3"), K.node("n4")))
        # what a failure, or a hand, can leave: a hold no job owns, a placed replica's hold gone, a conflict
        # whose record lapsed, a job record that does not parse
        admin.hset(K.held("n1"), "ghost:0:1", GHOST)
        assert admin.hdel(K.held("n5"), worker.get("unheld").placement[0].hold_id) == 1
        admin.zadd(K.conflicts, {"n9": 0})
        admin.set(K.job("junk"), "{not json")
        admin.zadd(K.jobs(JobState.QUEUED), {"junk": 0})
    finally:
        admin.close()


def test_every_periodic_step_runs_under_its_roles_rule(srv: Roles, monkeypatch: pytest.MonkeyPatch) -> None:
    worker = srv.client("worker")
    monkeypatch.setattr(C, "ORPHAN_GRACE_S", 0.0)  # a hold seen ownerless is cleared the next sweep
    every_state(srv, worker, monkeypatch)
    state = maintenance.SweepState()
    done = [swept(worker.store, state)]
    assert worker.redis.hexists(K.quarantine, K.job("junk"))  # marked failed, and counted
    drain(worker)  # the silent node's jobs, the jobs queued again, the passes the sweep signalled
    admin = srv.admin()
    try:
        admin.delete(K.job("junk"))  # the bad record is gone: its quarantine entry goes with the next sweep
        admin.set(K.wake_classes, "x")  # a hint of the wrong type (the first sweep's commits would repair it)
    finally:
        admin.close()
    monkeypatch.setattr(C, "FINISHED_TTL_S", 0)  # finished jobs leave their indexes
    done.append(swept(worker.store, state))
    drain(worker)
    idle = [name for name in maintenance.STEPS if not any(d.get(name) for d in done)]
    assert idle == [], f"steps with nothing done: {idle} ({done})"
    assert "ended (exit status 1)" in worker.get("placed").reason
    # both halves of the holds' check: the hold no one's is gone, the replica whose hold went holds anew
    unheld = worker.get("unheld")
    assert unheld.state is JobState.PLACED and unheld.reason.startswith("the hold of replica 0 on n5 is gone")
    assert sorted(worker.store.held_on("n5")) == [unheld.placement[0].hold_id]
    assert "ghost:0:1" not in worker.store.held_on("n1")
    # the worker's other loops: its figures flushed, its registrations pruned, its mirror kept warm
    metrics.flush(worker.redis, worker.keys)
    alive.prune(worker.redis, worker.keys)
    with worker.store.lock:
        worker.store.keep_warm(0)
    # the request reader carries out a client's entry
    client = srv.client("client", "svc-a", client_id="svc-a")
    answered: list[str] = []
    asked = threading.Thread(target=lambda: answered.append(client.submit(request(), job_id="asked")))
    asked.start()
    reader = Consumer(worker.store, "w1")
    while asked.is_alive():
        reader.poll(block_ms=50)
    asked.join()
    assert answered == ["asked"]
    drain(worker)
    # the exporter's scrape and the status, on the operator's login
    operator = srv.client("operator")
    scraped = exposition(operator)
    assert "modelplan_redis_up 1.0" in scraped and "modelplan_acl_refusals 0.0" in scraped
    assert main(["status", "--redis-url", srv.url("operator")]) == 0
    assert srv.refusals() == []


def test_a_waiting_job_beside_a_free_card_is_placed_by_the_sweep_under_the_workers_rule(srv: Roles) -> None:
    """The intake wakes a pass only for a class ``pending:classes`` counts waiting jobs of: with it deleted (by
    a hand with a worker's rights: no agent may touch it), a card freeing wakes no one, and the sweep's
    recount and full pass are what place the job."""
    n1, worker = srv.client("agent", "n1"), srv.client("worker")
    assert n1.heartbeat(hb("n1", gpus=1, free=0))
    worker.submit(request(), job_id="waits")
    drain(worker)
    assert state_of(worker, "waits") is JobState.WAITING
    worker.redis.delete(K.pending_classes)
    assert n1.heartbeat(hb("n1", gpus=1, seq=2))  # the card frees
    drain(worker)
    assert state_of(worker, "waits") is JobState.WAITING  # no wake-up came
    maintenance.sweep(worker.store, force=True)
    drain(worker)
    assert state_of(worker, "waits") is JobState.PLACED
    assert srv.refusals() == []


def test_the_rules_security_md_prints_are_the_roles_own() -> None:
    """An operator copies the rules from docs/SECURITY.md: each is the line ``modelplan acl`` prints."""
    lines = (Path(__file__).resolve().parents[2] / "docs" / "SECURITY.md").read_text().splitlines()
    for rule in (
        roles.operator_rule(K, "PASSWORD"),
        roles.worker_rule(K, "PASSWORD"),
        roles.agent_rule(K, "n1", "PASSWORD"),
        roles.relay_rule(K, "rack7", "rack7-*", "PASSWORD"),
        roles.client_rule(K, "svc-a", "PASSWORD"),
    ):
        assert rule in lines, rule.split(" on ", 1)[0]
