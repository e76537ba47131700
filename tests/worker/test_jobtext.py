"""A job record read and written with its request's text kept: exactly what pydantic reads and writes."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import redis

from producer import Client
from tests.worker.helpers import drain, hb, request
from worker import jobtext
from worker.errors import BadRecord
from worker.jobtext import job_text, read_job
from worker.records import JobRecord, JobState, read_record, utcnow


@pytest.fixture(autouse=True)
def nothing_kept() -> Iterator[None]:
    jobtext.forget()
    yield
    jobtext.forget()


def stored(client: Client, r: redis.Redis) -> dict[str, bytes]:
    """Raw records of a queued, a placed and a waiting job (with a nomination) of the same request, and of
    a job a client owns."""
    client.heartbeat(hb("gpu-0", gpus=1))
    for job_id in ("placed", "waiting"):
        client.submit(request(), job_id=job_id)
    client.submit(request(), job_id="queued")
    client.submit(request(), job_id="owned", as_client="svc-a")
    out = {"queued": r.get(client.keys.job("queued"))}
    drain(client)
    out |= {j: r.get(client.keys.job(j)) for j in ("placed", "waiting", "queued", "owned")}
    assert all(isinstance(v, bytes) for v in out.values())
    return {k: v for k, v in out.items() if isinstance(v, bytes)}


def test_a_record_reads_and_writes_as_pydantic_does_kept_or_not(client: Client, r: redis.Redis) -> None:
    raws = stored(client, r)
    assert {read_job(raw, "k").state for raw in raws.values()} == {JobState.PLACED, JobState.WAITING}
    for raw in raws.values():
        whole = JobRecord.model_validate_json(raw)
        for _ in range(2):  # the first time the whole way, then with the request kept
            rec = read_job(raw, "k")
            assert rec == whole and rec.model_fields_set == whole.model_fields_set
            assert job_text(rec) == whole.model_dump_json() == raw.decode()
            nxt = rec.advance(JobState.RELEASED, at=utcnow(), reason="freed")
            assert job_text(nxt) == nxt.model_dump_json()


def test_a_kept_request_is_not_validated_again(client: Client, r: redis.Redis) -> None:
    raws = stored(client, r)
    first = read_job(raws["placed"], "k")
    again = [read_job(raws[j], "k") for j in ("waiting", "queued", "placed")]
    assert all(rec.request is first.request for rec in again)


def test_a_request_written_otherwise_is_read_the_whole_way_and_not_kept(client: Client, r: redis.Redis) -> None:
    raw = stored(client, r)["placed"]
    data = json.loads(raw)
    data["request"] = dict(reversed(list(data["request"].items())))  # the same request, its fields reordered
    other = json.dumps(data, separators=(",", ":"))
    assert read_job(other, "k") == JobRecord.model_validate_json(other)
    assert read_job(other, "k").request is not read_job(other, "k").request
    spaced = json.dumps(json.loads(raw))  # a space after every separator: no marker found
    assert read_job(spaced, "k") == JobRecord.model_validate_json(spaced)


@pytest.mark.parametrize(
    "breakage",
    [
        lambda d: d | {"version": -1},
        lambda d: d | {"state": "sleeping"},
        lambda d: d | {"replicas": [{"index": 0}]},
        lambda d: {**d, "request": None},
        lambda d: {k: v for k, v in d.items() if k != "seq"},
        lambda d: d | {"extra": 1},
        lambda d: d | {"owner": "a:b"},
    ],
)
def test_a_bad_record_with_a_kept_request_fails_as_it_would_the_whole_way(
    client: Client, r: redis.Redis, breakage: object
) -> None:
    raws = stored(client, r)
    read_job(raws["placed"], "k")  # its request is kept from here on
    assert callable(breakage)
    bad = json.dumps(breakage(json.loads(raws["waiting"])), separators=(",", ":"))
    with pytest.raises(BadRecord) as whole:
        read_record(JobRecord, bad, "k")
    with pytest.raises(BadRecord) as kept:
        read_job(bad, "k")
    assert kept.value.what == whole.value.what


def test_bytes_that_are_not_text_fail_as_they_would_the_whole_way(client: Client, r: redis.Redis) -> None:
    raws = stored(client, r)
    read_job(raws["placed"], "k")
    bad = raws["waiting"].replace(b'"reason":"', b'"reason":"\xff', 1)
    with pytest.raises(BadRecord) as whole:
        read_record(JobRecord, bad, "k")
    with pytest.raises(BadRecord) as kept:
        read_job(bad, "k")
    assert kept.value.what == whole.value.what


def test_what_is_kept_is_bounded(client: Client, r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobtext, "KEPT", 2)
    raw = stored(client, r)["placed"].decode()
    for context in (4096, 8192, 16384, 2048):
        read_job(raw.replace('"context":8192', f'"context":{context}'), "k")
        assert len(jobtext._by_text) <= 2 and len(jobtext._text_of) <= 2
