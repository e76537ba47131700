"""The request stream: operations appended with XADD by any client, carried out by the workers."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from structlog.testing import capture_logs

from producer import Client
from tests.worker.helpers import drain, hb, request, whole_state
from tests.worker.processes import WorkerProcess
from worker import constants as C
from worker.requests import FAULT_PAUSE_ENV, Consumer
from worker.scripts import text


def consumer(client: Client, name: str = "w1") -> Consumer:
    return Consumer(client.store, name)


def carry_out(client: Client) -> int:
    """Every entry there is, then every planning job they queued: as ``modelplan worker --burst``."""
    n = consumer(client).drain()
    drain(client)
    return n


def stream(client: Client, key: str) -> list[dict[str, str]]:
    entries: Any = client.redis.xrange(key)
    return [{text(k): text(v) for k, v in fields.items()} for _, fields in entries]


def keys_of(client: Client) -> set[str]:
    """Every key but RQ's (its worker's own bookkeeping, and the planning queue's)."""
    return {text(k) for k in client.redis.keys("*") if not text(k).startswith(("rq:", f"{client.keys.prefix}:rq:"))}


def nothing_pending(client: Client) -> None:
    k = client.keys
    assert client.redis.xlen(k.requests) == 0
    assert client.redis.xpending(k.requests, C.REQUEST_GROUP)["pending"] == 0


def test_submit_scale_release_through_the_stream_as_the_client_would(client: Client) -> None:
    client.heartbeat(hb("gpu-a", gpus=2))
    k = client.keys
    req = request().model_dump_json()
    client.redis.xadd(k.requests, {"op": "submit", "job_id": "s-1", "request": req})
    client.redis.xadd(k.requests, {"op": "submit", "job_id": "s-1", "request": req})  # the same id: one job
    assert carry_out(client) == 2
    rec = client.get("s-1")
    assert rec.state.value == "placed" and rec.request == request()
    assert [e["reason"] for e in stream(client, k.job_events("s-1"))].count("submitted") == 1

    client.redis.xadd(k.requests, {"op": "scale", "job_id": "s-1", "replicas": "2", "reply_to": "svc"})
    carry_out(client)
    assert client.get("s-1").wanted == 2
    client.redis.xadd(k.requests, {"op": "release", "job_id": "s-1", "reply_to": "svc"})
    carry_out(client)
    replies = stream(client, k.reply("svc"))
    answers = [(r["ok"], r["job_id"], r["state"]) for r in replies]
    assert answers == [("true", "s-1", "placed"), ("true", "s-1", "released")]
    assert 0 < client.redis.ttl(k.reply("svc")) <= C.REPLY_TTL_S
    nothing_pending(client)
    assert whole_state(client)["records"]["s-1"] == "released"


def test_a_submit_without_an_id_is_named_after_its_entry(client: Client) -> None:
    entry = text(client.redis.xadd(client.keys.requests, {"op": "submit", "request": request().model_dump_json()}))
    carry_out(client)
    assert client.get(f"r-{entry}").state.value in ("waiting", "failed", "placed")
    assert len(client.store.queue.get_job_ids()) == 0
    nothing_pending(client)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"op": "submit", "job_id": "bad-1", "request": "{"}, "request: (record): Invalid JSON"),
        ({"op": "submit", "job_id": "bad-1", "request": json.dumps({"model": "m"})}, "request: artifacts"),
        ({"op": "submit", "job_id": "bad-1"}, "request entry: request: is missing"),
        ({"op": "explode", "job_id": "bad-1"}, "request entry: op: 'explode' is not one of"),
        ({"op": "scale", "job_id": "bad-1", "replicas": "lots"}, "request entry: replicas: must be a whole number"),
        ({"op": "release", "job_id": "bad-1", "extra": "x"}, "request entry: extra: is not a field"),
        ({"op": "release", "job_id": "bad-1"}, "job 'bad-1': no such job"),
        ({"op": "submit", "job_id": "bad-1", "request": "x" * (C.REQUEST_MAX_BYTES + 1)}, "request entry: (entry): is"),
    ],
)
def test_a_malformed_entry_is_answered_on_its_reply_stream_alone_and_leaves_nothing_else(
    client: Client, fields: dict[str, str], reason: str
) -> None:
    k = client.keys
    client.redis.xadd(k.requests, {**fields, "reply_to": "svc"})  # type: ignore[dict-item]
    with capture_logs() as logs:
        client.redis.xadd(k.requests, fields)  # type: ignore[arg-type]
        assert carry_out(client) == 2
    [answer] = stream(client, k.reply("svc"))
    assert (answer["ok"], answer["job_id"]) == ("false", "bad-1") and answer["reason"].startswith(reason), answer
    assert "\n" not in answer["reason"]
    # the entry naming no reply stream is only logged: a refusal on the job's stream would tell whoever
    # watches the job that it failed
    [logged] = [e for e in logs if e["event"] == "request_refused"][1:]
    assert logged["job_id"] == "bad-1" and logged["reason"].startswith(reason)
    assert keys_of(client) == {k.requests, k.reply("svc")}
    assert client.store.queue.count == 0
    nothing_pending(client)


def test_a_refusal_says_what_the_cli_says(client: Client, capsys: pytest.CaptureFixture[str]) -> None:
    from producer.cli import main

    k = client.keys
    client.redis.xadd(k.requests, {"op": "cancel", "job_id": "nope", "reply_to": "svc"})
    carry_out(client)
    url = client.redis.get_connection_kwargs()
    assert main(["cancel", "nope", "--redis-url", f"redis://{url['host']}:{url['port']}/0"]) == 2
    said = capsys.readouterr().err.strip().removeprefix("modelplan cancel: ")
    [reply] = stream(client, k.reply("svc"))
    assert (reply["ok"], reply["reason"]) == ("false", said)


def test_a_bad_entry_with_no_job_or_reply_is_acknowledged_and_leaves_nothing(client: Client) -> None:
    k = client.keys
    client.redis.xadd(k.requests, {"op": b"\xff\xfe", "job_id": "a:b", "reply_to": "../../x"})
    client.redis.xadd(k.requests, {"nothing": "here"})
    assert carry_out(client) == 2
    assert keys_of(client) == {k.requests}
    nothing_pending(client)


def test_an_entry_whose_worker_died_is_carried_out_by_another_once(client: Client) -> None:
    k = client.keys
    client.heartbeat(hb("gpu-a"))
    client.redis.xadd(k.requests, {"op": "submit", "job_id": "d-1", "request": request().model_dump_json()})
    dead = consumer(client, "dead")
    dead.streams.sources()  # makes the group
    client.redis.xreadgroup(C.REQUEST_GROUP, "dead", {k.requests: ">"}, count=10)  # took it, then died
    assert consumer(client, "live").drain() == 0  # not yet idle long enough
    assert not client.redis.exists(k.job("d-1"))
    # as if the claim time had passed: the entry's idle time is set back by claiming it with IDLE
    entries: Any = client.redis.xrange(k.requests)
    [(entry_id, _)] = entries
    client.redis.xclaim(k.requests, C.REQUEST_GROUP, "dead", 0, [entry_id], idle=C.REQUEST_CLAIM_IDLE_MS + 1)
    assert consumer(client, "live").drain() == 1
    drain(client)
    assert client.get("d-1").state.value == "placed"
    nothing_pending(client)


def test_an_entry_handed_out_too_often_is_answered_not_tried_again(client: Client) -> None:
    k = client.keys
    consumer(client).streams.sources()  # makes the group
    entry = client.redis.xadd(k.requests, {"op": "release", "job_id": "p-1", "reply_to": "svc"})
    client.redis.xreadgroup(C.REQUEST_GROUP, "dead", {k.requests: ">"}, count=10)
    for _ in range(C.REQUEST_MAX_DELIVERIES - 1):  # each worker that took it died
        client.redis.xclaim(k.requests, C.REQUEST_GROUP, "dead", 0, [entry], idle=C.REQUEST_CLAIM_IDLE_MS + 1)
    assert consumer(client, "live").drain() == 1
    [reply] = stream(client, k.reply("svc"))
    assert reply["ok"] == "false" and "never answered" in reply["reason"]
    nothing_pending(client)


# --- real worker processes -----------------------------------------------------------------------------


def _cli(url: str, *args: str) -> str:
    out = subprocess.run(["redis-cli", "-u", url, *args], capture_output=True, text=True, timeout=10, check=True)
    return out.stdout


def _wait_for(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


@pytest.mark.skipif(shutil.which("redis-cli") is None, reason="redis-cli is not installed")
def test_the_whole_flow_with_redis_cli_alone(client: Client, redis_url: str, tmp_path: Path) -> None:
    client.heartbeat(hb("gpu-a", gpus=2))
    worker = WorkerProcess(redis_url, tmp_path, "w")
    try:
        req = request().model_dump_json()
        _cli(redis_url, "XADD", "modelplan:requests", "*", "op", "submit", "job_id", "cli-1", "request", req)

        def seen(state: str) -> bool:
            out = _cli(redis_url, "XREAD", "COUNT", "100", "BLOCK", "500", "STREAMS", "modelplan:job:cli-1:events", "0")
            return state in out.split()

        _wait_for(lambda: seen("placed"), 20, "placed")
        _cli(redis_url, "XADD", "modelplan:requests", "*", "op", "scale", "job_id", "cli-1", "replicas", "2")
        _wait_for(lambda: json.loads(_cli(redis_url, "GET", "modelplan:job:cli-1"))["wanted"] == 2, 20, "scaled")
        _cli(redis_url, "XADD", "modelplan:requests", "*", "op", "release", "job_id", "cli-1")
        _wait_for(lambda: seen("released"), 20, "released")
    finally:
        worker.stop()
    assert client.get("cli-1").state.value == "released"
    nothing_pending(client)
    assert whole_state(client)["held"] == {}


def test_a_worker_killed_holding_an_entry_loses_nothing(client: Client, redis_url: str, tmp_path: Path) -> None:
    k = client.keys
    client.heartbeat(hb("gpu-a"))
    a = WorkerProcess(redis_url, tmp_path, "a", env={FAULT_PAUSE_ENV: "60"})
    b: WorkerProcess | None = None
    try:
        client.redis.xadd(k.requests, {"op": "submit", "job_id": "k-1", "request": request().model_dump_json()})

        def taken() -> bool:
            try:
                return int(client.redis.xpending(k.requests, C.REQUEST_GROUP)["pending"]) == 1
            except redis.ResponseError:  # the group is not made yet
                return False

        _wait_for(taken, 20, "worker a to take the entry")
        a.kill()
        assert not client.redis.exists(k.job("k-1"))
        b = WorkerProcess(redis_url, tmp_path, "b")
        client.heartbeat(hb("gpu-a", seq=2))
        _wait_for(lambda: client.redis.exists(k.job("k-1")) and client.get("k-1").state.value == "placed", 40, "placed")
    finally:
        a.stop()
        if b is not None:
            b.stop()
    reasons = [e["reason"] for e in stream(client, k.job_events("k-1"))]
    assert reasons.count("submitted") == 1, reasons
    nothing_pending(client)
    assert '"request_claimed"' in b.log_path.read_text()


def test_an_entry_whose_answer_cannot_be_written_is_still_acknowledged(client: Client) -> None:
    k = client.keys
    client.redis.set(k.reply("svc"), "not a stream")
    client.redis.xadd(k.requests, {"op": "release", "job_id": "nope", "reply_to": "svc"})
    client.redis.xadd(k.requests, {"op": "release", "job_id": "nope", "reply_to": b"\xff"})
    assert carry_out(client) == 2
    nothing_pending(client)
    assert client.redis.get(k.reply("svc")) == b"not a stream"
    # the second names no reply stream that could be (nor is it text): it is only logged
    assert keys_of(client) == {k.requests, k.reply("svc")}
