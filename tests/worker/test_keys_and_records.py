"""The key schema, pinned, and what the edge refuses."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner import InvalidInput
from producer import Client
from tests.worker.helpers import hb, request
from worker.keys import Keys
from worker.records import JobState, parse_request
from worker.reports import NodeRecord, parse_heartbeat, stored_json


def test_every_key_spelled_out() -> None:
    k = Keys("mp")
    assert [
        k.node("n1"),
        k.nodes,
        k.held("n1"),
        k.held_nodes,
        k.job("j1"),
        k.job_events("j1"),
        k.events,
        k.jobs(JobState.WAITING),
        k.pending,
        k.pending_for,
        k.seq,
        k.epoch,
        k.wake_signal,
        k.wake_classes,
        k.lock("maintenance"),
        k.queue_name,
    ] == [
        "mp:node:n1",
        "mp:nodes",
        "mp:held:n1",
        "mp:holding",
        "mp:job:j1",
        "mp:job:j1:events",
        "mp:events",
        "mp:jobs:waiting",
        "mp:pending",
        "mp:pending:for",
        "mp:seq",
        "mp:epoch",
        "mp:wake:signal",
        "mp:wake:classes",
        "mp:lock:maintenance",
        "mp",
    ]
    assert Keys().job("x") == "modelplan:job:x"
    assert k.hub("meta-llama/Llama-3.1-8B", "main") == "mp:hub:meta-llama/Llama-3.1-8B@main"
    assert [k.requests, k.reply("svc-a"), k.stats] == ["mp:requests", "mp:reply:svc-a", "mp:stats"]
    assert [k.clients, k.client_requests("c1"), k.client_replies("c1"), k.owned("c1")] == [
        "mp:clients",
        "mp:client:c1:requests",
        "mp:client:c1:replies",
        "mp:owned:c1",
    ]
    assert [k.client_pattern("c1"), k.job_pattern] == ["mp:client:c1:*", "mp:job:*"]
    assert [k.client_key("c1", "j1"), k.secret] == ["mp:client:c1:key:j1", "mp:secret"]
    assert fnmatchcase(k.client_key("c1", "j1"), k.client_pattern("c1"))
    assert not fnmatchcase(k.client_key("c1", "j1"), k.client_pattern("c2"))


FIXED = ("clients", "requests", "events", "nodes", "pending", "seq", "epoch", "ack", "stats", "quarantine", "client")


@pytest.mark.parametrize("name", FIXED)
def test_a_client_named_after_a_fixed_key_reaches_no_other_key(name: str) -> None:
    """A client's keys have a shape no fixed key has, and its ACL pattern covers its own keys alone."""
    k = Keys("mp")
    fixed = {k.clients, k.requests, k.events, k.nodes, k.pending, k.seq, k.epoch, k.ack, k.stats, k.quarantine}
    own = {k.client_requests(name), k.client_replies(name), k.owned(name)}
    assert not own & fixed
    others = {k.client_requests(f"{name}-b"), k.client_replies(f"{name}-b"), k.client_requests(f"b{name}")}
    assert all(fnmatchcase(key, k.client_pattern(name)) for key in own - {k.owned(name)})
    assert not any(fnmatchcase(key, k.client_pattern(name)) for key in others | fixed | {k.owned(name)})


@pytest.mark.parametrize("bad", ["a:b", "*", "a b", "a\nb", "", "-lead", "x" * 129, "ü", "../x"])
def test_ids_that_could_leave_their_key_are_refused(bad: str) -> None:
    with pytest.raises(InvalidInput, match="is not an id"):
        Keys().job(bad)
    with pytest.raises(InvalidInput, match="is not an id"):
        Keys(bad)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"free_gpus": 3}, "free_gpus 3 is more than gpus 2"),
        ({"gpus": -1}, "gpus: must be at least 0"),
        ({"seq": -1}, "seq: must be at least 0"),
        ({"seq": "7"}, "seq: must be a whole number"),
        ({"boot_id": "a:b"}, "boot_id: only letters, digits"),
        ({"node_id": "n*"}, "node_id: only letters, digits"),
        ({"started": ["j 1"]}, "started holds 'j 1', which is not a hold id"),
        ({"started": ["j1"]}, "started holds 'j1', which is not a hold id"),
        ({"color": 1}, "color: unknown field"),
        ({"host_free_gb": 10**9}, "host_free_gb: must be at most"),
    ],
)
def test_a_bad_heartbeat_is_refused_and_nothing_stored(redis_url: str, change: dict[str, Any], message: str) -> None:
    client = Client.from_url(redis_url)
    with pytest.raises(InvalidInput, match=message.replace("(", r"\(")):
        client.heartbeat({**hb("n1", gpus=2), **change})
    assert client.redis.keys("*") == []
    client.redis.close()


def test_an_unknown_field_with_a_long_name_is_named_cut() -> None:
    """A field name is the caller's text: the error repeats a bounded part of it, as it does a value."""
    name = "x" * 2000
    with pytest.raises(InvalidInput) as e:
        parse_heartbeat(json.dumps({**hb("n1", gpus=2), name: 1}))
    assert "unknown field" in str(e.value)
    assert len(str(e.value)) < 400


def test_heartbeats_and_requests_parse_from_json_text() -> None:
    assert parse_heartbeat('{"node_id": "n", "host_mem_gb": 1, "host_free_gb": 1, "seq": 0, "boot_id": "b"}').seq == 0
    req = request()
    assert parse_request(req.model_dump_json()) == req


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"context": 0}, "context: must be a whole number of tokens"),
        ({"context": 200_000}, "context: 200000 is more than the model's max_position_embeddings 131072"),
        ({"priority": 1001}, "priority: must be at most 1000"),
        ({"artifact": "nope"}, "artifact 'nope' is not one of the repository's: 'original'"),
        ({"artifacts": []}, "artifacts: .*at least 1"),
        ({"model": "a\nb"}, "model holds control characters"),
        ({"shape": {"kv_bytes_per_token": -1}}, "shape: a field is out of range"),
    ],
)
def test_a_bad_request_is_refused(change: dict[str, Any], message: str) -> None:
    data = {**request().model_dump(mode="json"), **change}
    with pytest.raises(InvalidInput, match=message):
        parse_request(data)


def test_a_bad_submit_stores_nothing(client: Client) -> None:
    with pytest.raises(InvalidInput):
        client.submit({"model": "x"})
    with pytest.raises(InvalidInput, match="is not an id"):
        client.submit(request(), job_id="a:b")
    assert client.redis.keys("*") == []


@given(
    st.sampled_from(["gpu-1", "n.2_x", "a" * 128]),
    st.sampled_from(["", "h100-80g", "h200-141g"]),
    st.integers(0, 8),
    st.integers(0, 2**53),
    st.lists(st.sampled_from(["j1:0:1", "job-2:3:14", "x:nominated"]), max_size=3),
    st.datetimes(timezones=st.just(UTC)),
)
def test_a_stored_record_made_from_its_heartbeat_is_the_record_model_s_json(
    node_id: str, gpu_class: str, free: int, seq: int, started: list[str], at: datetime
) -> None:
    """A relay's batch builds each stored record's JSON from its validated heartbeat's; it must be exactly
    what ``NodeRecord`` writes, which ``heartbeat.lua`` compares and workers parse."""
    beat = parse_heartbeat(hb(node_id, gpu_class, gpus=8, free=free, seq=seq, started=tuple(started)))
    record = NodeRecord.model_validate({**dict(beat), "received_at": at})
    assert stored_json([beat], at) == [record.model_dump_json()]
    assert NodeRecord.model_validate_json(stored_json([beat], at)[0]) == record
