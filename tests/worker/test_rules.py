"""The worker's safety rules, one test each at least, each named in its docstring: what the commit script
checks before it writes, whom a queued job may name, whom a wake-up reaches, what a heartbeat and a client
may do. ``scripts/mutate`` breaks each rule in a copy of the code and expects these to fail."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from rq.job import Job
from rq.registry import FailedJobRegistry
from rq.serializers import JSONSerializer

from producer import Client, roles
from producer.clients import add
from tests.worker.helpers import drain, empty_queue, hb, request, signalled, whole_state
from worker import planning
from worker.keys import Keys
from worker.pool import HoldSpec
from worker.queueing import queue_class
from worker.records import JobRecord, JobState, utcnow
from worker.requests import Consumer
from worker.scripts import text

A, B = "svc-a", "svc-b"


def commit_holds(client: Client, job_id: str, *holds: HoldSpec) -> str:
    """The commit script's answer to writing ``holds`` for ``job_id`` over its stored record."""
    rec = client.get(job_id)
    return client.store.transition(rec, rec.advance(rec.state, at=utcnow()), reason="test", place=holds).code


def queued(client: Client, *job_ids: str) -> None:
    for j in job_ids:
        client.submit(request(), job_id=j)
    empty_queue(client)


def held_cards(client: Client) -> dict[str, dict[str, int]]:
    held: dict[str, dict[str, int]] = whole_state(client)["held"]
    return held


# --- the commit's re-checks (transition.lua) ------------------------------------------------------------


def test_commit_refuses_cards_busy_outside_modelplan(client: Client) -> None:
    """Rule: a commit re-checks the node's free cards as its heartbeat reports them, so cards in use
    outside modelplan are never held, whatever the plan saw."""
    client.heartbeat(hb("gpu-1", gpus=2, free=1))  # one card busy outside modelplan
    queued(client, "a", "b")
    assert commit_holds(client, "a", HoldSpec("gpu-1", "a:0:1", gpus=2)) == "full"
    assert commit_holds(client, "b", HoldSpec("gpu-1", "b:0:1", gpus=1)) == "ok"
    assert held_cards(client) == {"gpu-1": {"b": 1}}


def test_one_card_is_never_held_for_two_jobs(client: Client) -> None:
    """Rule: one card never to two jobs. A hold the node has not yet reported started takes a card its
    heartbeat still counts free: the second job's commit for that card is refused."""
    client.heartbeat(hb("gpu-1", gpus=2, free=1))
    queued(client, "a", "b")
    assert commit_holds(client, "a", HoldSpec("gpu-1", "a:0:1", gpus=1)) == "ok"
    assert commit_holds(client, "b", HoldSpec("gpu-1", "b:0:1", gpus=1)) == "full"
    assert held_cards(client) == {"gpu-1": {"a": 1}}


def test_holds_never_pass_a_nodes_cards(client: Client) -> None:
    """Rule: the holds on a node never add up to more cards than it has, even where its heartbeat still
    counts a started engine's cards free (loading, its memory not yet taken)."""
    client.heartbeat(hb("gpu-1", gpus=2))
    queued(client, "a", "b")
    assert commit_holds(client, "a", HoldSpec("gpu-1", "a:0:1", gpus=2)) == "ok"
    client.heartbeat(hb("gpu-1", gpus=2, seq=2, started=("a:0:1",)))  # started, both cards still free
    assert commit_holds(client, "b", HoldSpec("gpu-1", "b:0:1", gpus=1)) == "full"
    assert held_cards(client) == {"gpu-1": {"a": 2}}


def test_two_cpu_replicas_never_share_the_same_ram(client: Client) -> None:
    """Rule: a commit re-checks the node's free host memory, less what the CPU holds the node has not yet
    reported started take: two CPU replicas never count on the same free RAM."""
    client.heartbeat(hb("cpu-1", "", host=256, host_free=100))
    queued(client, "a", "b")
    assert commit_holds(client, "a", HoldSpec("cpu-1", "a:0:1", host_gb=60.0)) == "ok"
    assert commit_holds(client, "b", HoldSpec("cpu-1", "b:0:1", host_gb=60.0)) == "full"
    held = client.store.held_on("cpu-1")
    assert sorted(held) == ["a:0:1"]
    # once the node reports it started, and its RAM taken, the rest is free to another
    client.heartbeat(hb("cpu-1", "", host=256, host_free=40, seq=2, started=("a:0:1",)))
    assert commit_holds(client, "b", HoldSpec("cpu-1", "b:0:1", host_gb=60.0)) == "full"
    assert commit_holds(client, "b", HoldSpec("cpu-1", "b:0:1", host_gb=30.0)) == "ok"


def test_two_cpu_plans_from_one_snapshot_cannot_both_take_the_ram(client: Client) -> None:
    """Rule: the free-host-memory re-check at commit, as two workers meet it: both plan a CPU replica
    from one moment's pool with room for one; the second commit is refused, and that job waits."""
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=1, free=0, host=4))
    client.heartbeat(hb("cpu-1", "", host=10))  # room for one 8B GGUF replica (5.9 GiB), not two
    jobs = [client.submit(request("llama-3-8b-gguf", fallback=True)) for _ in range(2)]
    empty_queue(client)
    claimed = [planning.claim(client.store, j, f"w{i}") for i, j in enumerate(jobs)]
    snaps = [client.store.snapshot().copy() for _ in claimed]
    results = []
    for rec, snap in zip(claimed, snaps, strict=True):
        assert rec is not None
        plan = planning.plan_for(rec, snap)
        assert [r.state for r in plan.replicas] == ["fallback"]
        results.append(planning.commit(client.store, rec, planning.change_for(rec, plan, now=utcnow()), snap)[0])
    assert results == ["ok", "full"]
    loser = client.get(jobs[1])
    assert planning.settle(client.store, loser) is not None
    assert [client.get(j).state for j in jobs] == [JobState.PLACED, JobState.WAITING]
    assert sorted(h.split(":")[0] for h in client.store.held_on("cpu-1")) == [jobs[0]]


def test_a_commit_from_an_older_version_is_stale(client: Client) -> None:
    """Rule: a commit made from an older version of the job's record is refused as stale, and writes
    nothing: two workers that planned one job cannot both place it."""
    client.heartbeat(hb("gpu-1", gpus=2))
    queued(client, "a")
    old = client.get("a")
    first = client.store.transition(
        old, old.advance(old.state, at=utcnow()), reason="t", place=[HoldSpec("gpu-1", "a:0:1", 1)]
    )
    again = client.store.transition(
        old, old.advance(old.state, at=utcnow()), reason="t", place=[HoldSpec("gpu-1", "a:0:2", 1)]
    )
    assert (first.code, again.code, again.detail) == ("ok", "stale", str(old.version + 1))
    assert sorted(client.store.held_on("gpu-1")) == ["a:0:1"]
    assert client.get("a").version == old.version + 1


def test_a_wait_planned_before_capacity_freed_is_woken(client: Client) -> None:
    """Rule: the epoch check at commit. A job planned to wait while its card freed (the pool's epoch
    moved since its snapshot) is woken at once, not left asleep until the next change."""
    client.heartbeat(hb("gpu-1", gpus=1, free=0))
    drain(client)  # the pass a node joining signals
    job = client.submit(request())
    empty_queue(client)
    rec = planning.claim(client.store, job, "w1")
    assert rec is not None
    snap = client.store.snapshot().copy()
    plan = planning.plan_for(rec, snap)
    assert plan.outcome == "waiting"
    client.heartbeat(hb("gpu-1", gpus=1, seq=2))  # the card frees: no job waits yet, none is woken
    assert not signalled(client)
    assert planning.commit(client.store, rec, planning.change_for(rec, plan, now=utcnow()), snap)[0] == "ok"
    assert client.get(job).state is JobState.WAITING
    assert signalled(client)
    drain(client)
    placed = client.get(job)
    assert placed.state is JobState.PLACED and [p.node_id for p in placed.placement] == ["gpu-1"]


def test_a_job_being_planned_is_not_claimed_by_a_second_worker(client: Client) -> None:
    """Rule: one planner a job. A job another worker is planning, under a lease not yet run out, is not
    claimed again (so two plans of it never race to commit)."""
    client.heartbeat(hb("gpu-1", gpus=2))
    job = client.submit(request())
    empty_queue(client)
    first = planning.claim(client.store, job, "w1")
    assert first is not None and first.state is JobState.PLANNING
    assert planning.claim(client.store, job, "w2") is None
    assert client.get(job) == first and first.worker == "w1"


# --- the planning queue (queueing.vet) ------------------------------------------------------------------


def test_a_worker_refuses_a_queued_job_of_another_function(client: Client, tmp_path: Path) -> None:
    """Rule: queue vetting. A worker refuses a queued job that is not one of modelplan's planning jobs:
    it is dropped unstarted, not run, not failed."""
    marker = tmp_path / "ran"
    queue = queue_class(client.keys.prefix)(client.keys.queue_name, connection=client.redis, serializer=JSONSerializer)
    foreign = queue.enqueue("os.system", f"touch {marker}")
    client.heartbeat(hb("gpu-1"))
    good = client.submit(request())
    drain(client)
    assert not marker.exists()
    assert client.get(good).state is JobState.PLACED
    assert not client.redis.exists(foreign.key)  # dropped, not kept as a failed job
    assert FailedJobRegistry(queue=queue).get_job_ids() == []


def test_a_worker_refuses_a_queued_job_for_another_prefix(redis_url: str) -> None:
    """Rule: queue vetting. A planning job queued under this worker's prefix that names another prefix is
    refused: one tenant's queue cannot make a worker plan another tenant's jobs."""
    ours, theirs = Client.from_url(redis_url), Client.from_url(redis_url, prefix="tenantb")
    theirs.heartbeat(hb("gpu-b"))
    job = theirs.submit(request(), job_id="their-job")
    empty_queue(theirs)
    k = ours.keys
    queue = queue_class(k.prefix)(k.queue_name, connection=ours.redis, serializer=JSONSerializer)
    forged: Job = queue.enqueue("worker.jobs.plan_job", "tenantb", job)
    drain(ours)
    assert theirs.get(job).state is JobState.QUEUED
    assert theirs.store.held_on("gpu-b") == {}
    assert not ours.redis.exists(forged.key)
    ours.redis.close()
    theirs.redis.close()


# --- wake-up classes (classes.waits_on, heartbeat.lua) ---------------------------------------------------


def test_a_fallback_job_is_woken_by_every_class_it_can_run_on(client: Client) -> None:
    """Rule: a job with fallbacks is woken by capacity freed in every class it can run on, not only its
    best's: RAM freed on a CPU node places it there while its card stays busy."""
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=1, free=0, host=4))
    client.heartbeat(hb("cpu-1", "", host=256, host_free=2))  # too little free for it now
    job = client.submit(request("llama-3-8b-gguf", fallback=True))
    drain(client)
    waiting = client.get(job)
    assert waiting.state is JobState.WAITING and waiting.option is not None and not waiting.option.cpu
    client.heartbeat(hb("cpu-1", "", host=256, seq=2))  # its RAM frees
    assert signalled(client)
    drain(client)
    rec = client.get(job)
    [replica] = rec.replicas
    assert rec.state is JobState.PLACED and replica.state == "fallback"
    assert [p.node_id for p in replica.placement] == ["cpu-1"]


def test_a_waiting_job_is_woken_by_every_class_equal_to_its_best(client: Client) -> None:
    """Rule: a waiting job is woken by capacity freed in any class ranked equal to its best on the
    hardware (cards, nodes, precision), not only its best's class."""
    client.heartbeat(hb("h100-a", "h100-80g", gpus=1, free=0))
    client.heartbeat(hb("a100-a", "a100-40g", gpus=1, free=0))
    job = client.submit(request("llama-3.1-8b-instruct"))
    drain(client)
    assert client.get(job).state is JobState.WAITING
    client.heartbeat(hb("a100-a", "a100-40g", gpus=1, seq=2))
    assert signalled(client)
    drain(client)
    rec = client.get(job)
    assert rec.state is JobState.PLACED and [p.node_id for p in rec.placement] == ["a100-a"]


# --- heartbeats (heartbeat.lua) -------------------------------------------------------------------------


def test_a_heartbeat_with_an_older_seq_is_refused(client: Client) -> None:
    """Rule: a node's heartbeat seq only goes forward within a boot: one no later than the stored one,
    with the same figures (a refresh) or new ones, is refused as stale and changes nothing."""
    assert client.heartbeat(hb("gpu-1", gpus=2, free=2, seq=5))
    stored = client.redis.get(client.keys.node("gpu-1"))
    assert not client.heartbeat(hb("gpu-1", gpus=2, free=2, seq=4))  # a refresh, late
    assert not client.heartbeat(hb("gpu-1", gpus=2, free=2, seq=5))  # the same one again
    assert not client.heartbeat(hb("gpu-1", gpus=2, free=0, seq=3))  # new figures, late
    assert client.redis.get(client.keys.node("gpu-1")) == stored
    assert client.heartbeat(hb("gpu-1", gpus=2, free=1, seq=6))
    assert json.loads(client.redis.get(client.keys.node("gpu-1")) or b"{}")["free_gpus"] == 1


# --- owners (worker/owners.py) --------------------------------------------------------------------------


def send(client: Client, who: str, **fields: str) -> None:
    """An entry on client ``who``'s own request stream, which only its login may append to."""
    entry: dict[Any, Any] = fields
    client.redis.xadd(client.keys.client_requests(who), entry)


def carry_out(client: Client) -> None:
    """What a worker does: carry out every request entry, then plan what they queued."""
    Consumer(client.store, "w1").drain()
    drain(client)


def answers(client: Client, who: str) -> list[dict[str, str]]:
    entries: Any = client.redis.xrange(client.keys.client_replies(who))
    return [{text(k): text(v) for k, v in fields.items()} for _, fields in entries]


def owned_job(client: Client) -> JobRecord:
    """Job ``a-1``, submitted on client A's stream and placed; B registered too."""
    client.heartbeat(hb("gpu-a", gpus=4))
    for who in (A, B):
        add(client.redis, client.keys, who)
    send(client, A, op="submit", job_id="a-1", request=request().model_dump_json())
    carry_out(client)
    rec = client.get("a-1")
    assert rec.owner == A and rec.state is JobState.PLACED
    return rec


def test_a_client_cannot_act_on_another_clients_job(client: Client) -> None:
    """Rule: ownership. A client's entries cannot release, cancel or scale another client's job; the
    owner's can."""
    before = owned_job(client)
    send(client, B, op="release", job_id="a-1")
    send(client, B, op="cancel", job_id="a-1")
    send(client, B, op="scale", job_id="a-1", replicas="2")
    carry_out(client)
    assert client.get("a-1") == before
    assert [a.get("ok") for a in answers(client, B)] == ["false"] * 3
    send(client, A, op="release", job_id="a-1")
    carry_out(client)
    assert client.get("a-1").state is JobState.RELEASED


def test_a_client_cannot_submit_over_another_clients_job(client: Client) -> None:
    """Rule: ownership. A client cannot submit under the id of another client's job, not even with the
    same request: the id stays its owner's."""
    before = owned_job(client)
    send(client, B, op="submit", job_id="a-1", request=request().model_dump_json())
    carry_out(client)
    assert client.get("a-1") == before
    [answer] = answers(client, B)
    assert answer.get("ok") == "false"


# --- ACL rules (producer/roles.py), asked of the server -------------------------------------------------


@pytest.fixture
def acl(r: redis.Redis) -> Iterator[tuple[redis.Redis, Keys]]:
    """The test server, for ACL users set from the roles' rules; they are deleted after."""
    before = set(r.acl_users())
    yield r, Keys("modelplan")
    for user in set(r.acl_users()) - before:
        r.acl_deluser(text(user))


def allowed(r: redis.Redis, rule: str, *command: str) -> bool:
    """Whether the server lets the user that ``rule`` sets run ``command`` (ACL DRYRUN: nothing runs)."""
    r.execute_command("ACL", "SETUSER", *rule.split()[1:])  # type: ignore[no-untyped-call]
    user = rule.split()[1]
    reply = r.execute_command("ACL", "DRYRUN", user, *command)  # type: ignore[no-untyped-call]
    return text(reply) == "OK"


def test_an_agent_rule_reaches_its_own_node_alone(acl: tuple[redis.Redis, Keys]) -> None:
    """Rule: an agent's login writes its own node's record and boots, and reads its holds; no other
    node's, and no job's."""
    r, k = acl
    rule = roles.agent_rule(k, "n1", "pw-agent-1")
    assert allowed(r, rule, "SET", k.node("n1"), "{}")
    assert allowed(r, rule, "HGETALL", k.held("n1"))
    for command in (("SET", k.node("n2"), "{}"), ("HSET", k.held("n1"), "x", "1"), ("SET", k.job("j"), "{}")):
        assert not allowed(r, rule, *command), command


def test_a_client_rule_reads_job_records_and_writes_only_its_own_keys(acl: tuple[redis.Redis, Keys]) -> None:
    """Rule: a client's login reads job records and their streams, appends to its own request stream,
    and writes nothing else: no job record, no other client's stream."""
    r, k = acl
    rule = roles.client_rule(k, A, "pw-client-a")
    assert allowed(r, rule, "GET", k.job("j"))
    assert allowed(r, rule, "XADD", k.client_requests(A), "*", "op", "release")
    for command in (
        ("SET", k.job("j"), "{}"),
        ("XADD", k.job_events("j"), "*", "state", "failed"),
        ("XADD", k.client_requests(B), "*", "op", "release"),
        ("XADD", k.requests, "*", "op", "release"),
    ):
        assert not allowed(r, rule, *command), command


def test_a_client_rule_reads_which_workers_run_and_writes_none(acl: tuple[redis.Redis, Keys]) -> None:
    """Rule: a client's login may read the workers' registrations (``modelplan job`` says when none runs)
    and may write none of them."""
    r, k = acl
    rule = roles.client_rule(k, A, "pw-client-a")
    assert allowed(r, rule, "SMEMBERS", k.workers)
    assert allowed(r, rule, "MGET", k.worker("host.1.abc"), k.worker("host.2.def"))
    for command in (("SADD", k.workers, "w"), ("SET", k.worker("w"), "x"), ("DEL", k.worker("w"))):
        assert not allowed(r, rule, *command), command


def test_no_role_but_the_operator_may_eval(acl: tuple[redis.Redis, Keys]) -> None:
    """Rule: no role but the operator runs Lua of its own (EVAL, SCRIPT LOAD, FUNCTION LOAD): they call
    the functions the operator loaded (FCALL)."""
    r, k = acl
    rules = {
        "worker": roles.worker_rule(k, "pw-worker"),
        "agent": roles.agent_rule(k, "n1", "pw-agent"),
        "relay": roles.relay_rule(k, "rack7", "rack7-*", "pw-relay"),
        "client": roles.client_rule(k, A, "pw-client"),
    }
    for role, rule in rules.items():
        assert not allowed(r, rule, "EVAL", "return 1", "0"), role
        assert not allowed(r, rule, "SCRIPT", "LOAD", "return 1"), role
        assert not allowed(r, rule, "FUNCTION", "LOAD", "#!lua name=x\n"), role
    assert allowed(r, rules["worker"], "FCALL", "anything", "0")
