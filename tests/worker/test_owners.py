"""Clients' own request streams: a job is its submitting client's, and no other client's entries reach it,
write its answers elsewhere, or take every card."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

from producer import Client
from producer.cli import main
from producer.clients import acl_rule, acl_user, add
from producer.errors import NoAnswer
from producer.ownstream import OwnStream
from tests.worker.helpers import drain, hb, request, whole_state
from tests.worker.processes import WorkerProcess
from tests.worker.test_requests import _wait_for, keys_of, stream
from worker import constants as C
from worker.errors import JobExists, JobNotFound, JobTaken, NotOwner, OverQuota
from worker.ids import CLIENT_ID_MAX
from worker.owners import Owned, Quotas
from worker.requests import Consumer
from worker.scripts import text

A, B = "svc-a", "svc-b"


def send(client: Client, who: str | None, **fields: str) -> str:
    """Append an entry to ``who``'s own stream (None: the shared one)."""
    key = client.keys.client_requests(who) if who else client.keys.requests
    entry: dict[Any, Any] = fields
    return text(client.redis.xadd(key, entry))


def answers(client: Client, who: str) -> list[dict[str, str]]:
    return stream(client, client.keys.client_replies(who))


def carry_out(client: Client, quotas: Quotas | None = None) -> int:
    """Every entry of every stream, then every planning job they queued."""
    n = Consumer(client.store, "w1", quotas).drain()
    drain(client)
    return n


def snapshot(client: Client, *leave_out: str) -> dict[str, tuple[str, bytes | None]]:
    """Every key with its type and serialisation, but the request streams (their entries are deleted once
    answered), RQ's own and ``leave_out``: equal exactly when nothing else changed."""
    r, k = client.redis, client.keys
    streams = {k.requests, *(k.client_requests(c) for c in (A, B)), *leave_out}
    out = {}
    for key in sorted(text(x) for x in r.keys("*")):
        if key in streams or key.startswith(("rq:", f"{k.prefix}:rq:")):
            continue
        out[key] = (text(r.type(key)), r.dump(key))
    return out


def owned(client: Client, who: str) -> dict[str, int]:
    return {text(j): int(n) for j, n in client.redis.hgetall(client.keys.owned(who)).items()}


REQ = request().model_dump_json()


def test_a_job_is_the_clients_whose_stream_carried_its_submit(client: Client) -> None:
    client.heartbeat(hb("gpu-a", gpus=4))
    add(client.redis, client.keys, A)
    entry = send(client, A, op="submit", job_id="a-1", request=REQ)
    unnamed = send(client, A, op="submit", request=REQ)  # named after the entry, and the client's stream
    send(client, None, op="submit", job_id="shared-1", request=REQ)
    client.submit(request(), "direct-1")
    assert carry_out(client) == 3
    named = f"r-{A}-{unnamed}"
    assert {j: client.get(j).owner for j in ("a-1", named, "shared-1", "direct-1")} == {
        "a-1": A,
        named: A,
        "shared-1": None,
        "direct-1": None,
    }
    assert answers(client, A) == [
        {"request": entry, "ok": "true", "job_id": "a-1", "state": "queued", "reason": "queued", "error": ""},
        {"request": unnamed, "ok": "true", "job_id": named, "state": "queued", "reason": "queued", "error": ""},
    ]
    assert owned(client, A) == {"a-1": 1, named: 1}
    assert whole_state(client)["records"] == {
        "a-1": "placed",
        named: "placed",
        "shared-1": "placed",
        "direct-1": "placed",
    }
    assert 0 < client.redis.ttl(client.keys.client_replies(A)) <= C.REPLY_TTL_S


def test_no_one_but_its_owner_releases_cancels_scales_or_resubmits_a_job(client: Client) -> None:
    k = client.keys
    client.heartbeat(hb("gpu-a", gpus=1))
    for who in (A, B):
        add(client.redis, k, who)
    send(client, A, op="submit", job_id="a-1", request=REQ)
    send(client, A, op="submit", job_id="a-2", request=REQ)
    carry_out(client)
    send(client, None, op="submit", job_id="shared-1", request=REQ)
    carry_out(client)
    state = whole_state(client)
    assert state["records"] == {"a-1": "placed", "a-2": "waiting", "shared-1": "waiting"}
    before = snapshot(client)

    send(client, B, op="release", job_id="a-1")
    send(client, B, op="cancel", job_id="a-2")
    send(client, B, op="scale", job_id="a-1", replicas="2")
    send(client, B, op="scale", job_id="a-1", replicas="256")
    send(client, B, op="submit", job_id="a-1", request=REQ)  # the same request: still A's id
    send(client, B, op="cancel", job_id="shared-1")  # a job no client owns is no client's either
    send(client, None, op="release", job_id="a-1")  # the shared stream, answered nowhere
    send(client, None, op="cancel", job_id="a-2", reply_to="svc-b")
    send(client, None, op="scale", job_id="a-1", replicas="2", reply_to="svc-b")
    assert carry_out(client) == 9

    # nothing of A's changed: its records, holds, its job's streams and the shared event stream (a refusal
    # there would make whoever watches the job believe it failed), its replies and its count
    assert snapshot(client, k.client_replies(B), k.reply("svc-b")) == before
    assert whole_state(client) == state
    refusals = [(a["ok"], a["job_id"], a["reason"], a["error"]) for a in answers(client, B)]
    assert refusals == [
        ("false", "a-1", "job 'a-1' belongs to another client", "NotOwner"),
        ("false", "a-2", "job 'a-2' belongs to another client", "NotOwner"),
        ("false", "a-1", "job 'a-1' belongs to another client", "NotOwner"),
        ("false", "a-1", "job 'a-1' belongs to another client", "NotOwner"),  # scale 256: not its job first
        ("false", "a-1", "job 'a-1' belongs to another client", "JobTaken"),
        ("false", "shared-1", "job 'shared-1' belongs to another client", "NotOwner"),
    ]
    shared = [(a["ok"], a["job_id"], a["reason"]) for a in stream(client, k.reply("svc-b"))]
    assert shared == [
        ("false", "a-2", "job 'a-2' belongs to another client"),
        ("false", "a-1", "job 'a-1' belongs to another client"),
    ]
    assert keys_of(client) - set(before) == {k.client_requests(A), k.client_requests(B), k.requests} | {
        k.client_replies(B),
        k.reply("svc-b"),
    }

    # the owner's own operations are carried out, and the cards freed serve the next job
    send(client, A, op="cancel", job_id="a-2")
    send(client, A, op="release", job_id="a-1")
    send(client, None, op="cancel", job_id="shared-1")
    send(client, A, op="submit", job_id="a-3", request=REQ)
    carry_out(client)
    assert [(a["ok"], a["job_id"], a["state"]) for a in answers(client, A)][-3:] == [
        ("true", "a-2", "cancelled"),
        ("true", "a-1", "released"),
        ("true", "a-3", "queued"),
    ]
    assert whole_state(client) == {
        "index": {"placed": ["a-3"], "cancelled": ["a-2", "shared-1"], "released": ["a-1"]},
        "records": {"a-1": "released", "a-2": "cancelled", "a-3": "placed", "shared-1": "cancelled"},
        "held": {"gpu-a": {"a-3": 1}},
        "held_nodes": ["gpu-a"],
    }
    assert owned(client, A) == {"a-3": 1}  # the final ones dropped as the submit counted


def test_an_entry_on_a_clients_stream_cannot_send_its_answer_elsewhere(client: Client) -> None:
    k = client.keys
    for who in (A, B):
        add(client.redis, k, who)
    send(client, None, op="release", job_id="x-1", reply_to=A)  # A's own answer on the shared stream
    send(client, A, op="release", job_id="x-1")
    carry_out(client)
    before = snapshot(client, k.client_replies(B))
    send(client, B, op="submit", job_id="b-1", request=REQ, reply_to=A)
    send(client, B, op="release", job_id="x-1", reply_to=B)
    assert carry_out(client) == 2
    assert snapshot(client, k.client_replies(B)) == before
    [first, second] = answers(client, B)
    refusal = f"request entry: reply_to: is for the shared stream; this stream's answers go to {k.client_replies(B)}"
    assert (first["ok"], first["job_id"], first["reason"]) == ("false", "b-1", refusal)
    assert (second["ok"], second["reason"]) == ("false", refusal)
    assert not client.redis.exists(k.job("b-1"))


def test_quotas_bound_one_job_and_one_clients_live_jobs(client: Client) -> None:
    k = client.keys
    quotas = Quotas(max_replicas=4, client_replicas=6)
    client.heartbeat(hb("gpu-a", gpus=2))  # jobs wait rather than fail, and so stay live
    for who in (A, B):
        add(client.redis, k, who)

    def submit(who: str | None, job_id: str, replicas: int) -> None:
        send(client, who, op="submit", job_id=job_id, request=request(replicas=replicas).model_dump_json())

    def refusals(who: str) -> list[tuple[str, str]]:
        return [(a["job_id"], a["reason"]) for a in answers(client, who) if a["ok"] == "false"]

    submit(A, "q-1", 4)
    submit(A, "q-2", 3)  # 7 with q-1's
    submit(A, "q-3", 5)  # past a job's bound
    submit(A, "q-2", 2)
    send(client, A, op="scale", job_id="q-2", replicas="3")
    send(client, A, op="scale", job_id="q-1", replicas="5")
    submit(B, "b-1", 4)  # B's count is its own
    submit(None, "s-1", 5)  # the shared stream has the per-job bound
    carry_out(client, quotas)
    per_job = "replicas asked, past the 4 one job may have (MODELPLAN_MAX_REPLICAS); nothing was changed"
    per_client = "one client may have (MODELPLAN_CLIENT_REPLICAS); nothing was changed"
    assert refusals(A) == [
        ("q-2", f"job 'q-2': 3 replicas with the 4 this client's other live jobs want would pass the 6 {per_client}"),
        ("q-3", f"job 'q-3': 5 {per_job}"),
        ("q-2", f"job 'q-2': 3 replicas with the 4 this client's other live jobs want would pass the 6 {per_client}"),
        ("q-1", f"job 'q-1': 5 {per_job}"),
    ]
    assert refusals(B) == []
    assert {j: client.get(j).wanted for j in ("q-1", "q-2", "b-1")} == {"q-1": 4, "q-2": 2, "b-1": 4}
    assert not client.redis.exists(k.job("q-3")) and not client.redis.exists(k.job("s-1"))
    assert owned(client, A) == {"q-1": 4, "q-2": 2} and owned(client, B) == {"b-1": 4}

    # shrinking is never refused; a final job counts no more
    send(client, A, op="scale", job_id="q-1", replicas="1")
    send(client, A, op="scale", job_id="q-2", replicas="4")
    send(client, A, op="release", job_id="q-1")
    submit(A, "q-4", 2)
    carry_out(client, quotas)
    assert refusals(A)[4:] == []
    assert {j: client.get(j).wanted for j in ("q-1", "q-2", "q-4")} == {"q-1": 1, "q-2": 4, "q-4": 2}
    assert owned(client, A) == {"q-2": 4, "q-4": 2}


def test_two_submits_of_one_client_carried_out_at_once_cannot_both_pass(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another worker admits the client's other job between this one's read of the count and its write:
    the write is not made on the stale count, and the submit read again is refused."""
    count = Owned(client.store, A, limit=4)
    admit = count.admit
    raced: list[str] = []

    def admit_then_race(pipe: Any, job_id: str, replicas: int) -> Any:
        write = admit(pipe, job_id, replicas)
        if not raced:
            raced.append(client.submit(request(replicas=3), "other", as_client=A, owned=Owned(client.store, A, 4)))
        return write

    monkeypatch.setattr(count, "admit", admit_then_race)
    with pytest.raises(OverQuota):
        client.submit(request(replicas=2), "this", as_client=A, owned=count)
    assert raced == ["other"]
    assert not client.redis.exists(client.keys.job("this"))
    assert owned(client, A) == {"other": 3}


@contextmanager
def serving(client: Client) -> Iterator[None]:
    """A worker's request reader in a thread of this process."""
    stop = threading.Event()
    consumer = Consumer(client.store, "t1")

    def loop() -> None:
        while not stop.is_set():
            consumer.poll(block_ms=50)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)


def test_the_python_client_acting_as_a_client_raises_what_a_direct_call_raises(client: Client) -> None:
    k = client.keys
    for who in (A, B):
        add(client.redis, k, who)
    a = Client(client.redis, k.prefix, client_id=A)
    b = Client(client.redis, k.prefix, client_id=B)
    with serving(client):
        assert a.submit(request(), "p-1") == "p-1"
        with pytest.raises(NotOwner, match=r"^job 'p-1' belongs to another client$"):
            b.release("p-1")
        with pytest.raises(NotOwner):
            b.scale("p-1", 2)
        with pytest.raises(JobTaken) as taken:
            b.submit(request(), "p-1")
        assert isinstance(taken.value, JobExists) and taken.value.job_id == "p-1"
        with pytest.raises(JobNotFound) as missing:
            a.release("none")
        with pytest.raises(JobNotFound) as direct:
            client.release("none")
        assert str(missing.value) == str(direct.value) and missing.value.job_id == "none"
        assert a.scale("p-1", 2).wanted == 2
        rec = a.cancel("p-1")
    assert (rec.state.value, rec.owner, rec.wanted) == ("cancelled", A, 2)
    assert whole_state(client)["records"] == {"p-1": "cancelled"}


def test_no_worker_reading_a_clients_stream_is_said_in_one_line(client: Client) -> None:
    own = OwnStream(client.redis, client.keys, "svc-z", timeout_s=0.2)  # not registered: no worker reads it
    with pytest.raises(NoAnswer) as e:
        own.ask("release", "x-1")
    assert "\n" not in str(e.value) and client.keys.client_requests("svc-z") in str(e.value)
    assert client.redis.xlen(client.keys.client_requests("svc-z")) == 1  # left for a worker to carry out


def test_a_client_registered_while_workers_run_is_served(
    client: Client, redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client.heartbeat(hb("gpu-a", gpus=2))
    worker = WorkerProcess(redis_url, tmp_path, "w")
    try:
        _wait_for(lambda: client.redis.exists(client.keys.requests), 20, "the worker to read the shared stream")
        assert main(["client", "add", A, "--redis-url", redis_url]) == 0
        assert capsys.readouterr().out == acl_rule(client.keys, A) + "\n"
        a = Client.from_url(redis_url, client_id=A)
        assert a.submit(request(), "live-1") == "live-1"
        _wait_for(lambda: client.get("live-1").state.value == "placed", 20, "placed")
        assert a.release("live-1").state.value == "released"
        a.redis.close()
    finally:
        worker.stop()
    assert client.get("live-1").owner == A
    assert whole_state(client)["held"] == {}
    assert '"clients_added"' in worker.log_path.read_text()


def test_the_printed_acl_rule_lets_a_client_do_its_part_and_nothing_else(client: Client, redis_url: str) -> None:
    k = client.keys
    add(client.redis, k, A)
    words = acl_rule(k, A, password="client-a-secret").split()
    assert words[:2] == ["user", acl_user(k, A)]
    client.redis.execute_command("ACL", "SETUSER", *words[1:])  # type: ignore[no-untyped-call]
    login = redis_url.replace("redis://", f"redis://{acl_user(k, A)}:client-a-secret@")
    try:
        a = Client.from_url(login, client_id=A)
        with serving(client):
            a.submit(request(), "acl-1")
            assert a.get("acl-1").owner == A
            assert [r.state.value for r in a.watch("acl-1", timeout=0.1)] == ["queued"]
            assert a.cancel("acl-1").state.value == "cancelled"
        for denied in (
            lambda: a.redis.xadd(k.requests, {"op": "release", "job_id": "acl-1"}),
            lambda: a.redis.xadd(k.client_requests(B), {"op": "release", "job_id": "acl-1"}),
            lambda: a.redis.xadd(k.client_replies(B), {"ok": "true"}),
            lambda: a.redis.xadd(k.job_events("acl-1"), {"state": "failed"}),
            lambda: a.redis.set(k.job("acl-1"), "{}"),
            lambda: a.redis.hset(k.owned(A), "acl-1", 0),
            lambda: a.redis.sadd(k.clients, B),
        ):
            with pytest.raises(redis.exceptions.NoPermissionError):
                denied()
        a.redis.close()
    finally:
        client.redis.acl_deluser(acl_user(k, A))
    assert client.get("acl-1").state.value == "cancelled"


def test_removing_a_client_stops_its_stream_being_read(
    client: Client, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    k = client.keys
    too_long = "c" * (CLIENT_ID_MAX + 1)  # its entries' default job ids would be past an id's length
    assert main(["client", "add", too_long, "--redis-url", redis_url]) == 2
    said = capsys.readouterr().err
    assert said.startswith("modelplan client: client_id: 'ccc") and said.endswith(f"up to {CLIENT_ID_MAX}\n")
    assert main(["client", "add", A, "--redis-url", redis_url]) == 0
    assert main(["client", "add", A, "--redis-url", redis_url]) == 0  # again: the same rule, nothing more
    assert client.redis.smembers(k.clients) == {A.encode()}
    send(client, A, op="release", job_id="x-1")
    carry_out(client)
    assert main(["client", "remove", A, "--redis-url", redis_url]) == 0
    send(client, A, op="release", job_id="x-1")
    assert carry_out(client) == 0
    assert keys_of(client) == {k.requests, k.client_requests(A)}
    assert client.redis.xlen(k.client_requests(A)) == 1
