"""Each job's engine API key: in the holds its engines run on (which only their node's agent and the
workers read), to its owner at a key of the owner's own, never in the record every client reads; the same
for every worker, made from one secret."""

from __future__ import annotations

import json

import pytest

from producer import Client
from tests.worker.helpers import drain, hb, request
from worker import apikeys
from worker.errors import NotOwner
from worker.pool import Held
from worker.records import JobState
from worker.scripts import text


def test_the_holds_carry_the_jobs_key_and_the_record_does_not(client: Client) -> None:
    apikeys.forget()
    client.heartbeat(hb("g1", gpus=2))
    job = client.submit(request(replicas=2))
    drain(client)
    rec = client.get(job)
    assert rec.state is JobState.PLACED and len(rec.placement) == 2
    stored = client.redis.get(client.keys.secret)
    assert stored is not None
    secret = text(stored).encode()
    assert len(secret) == 2 * apikeys.SECRET_BYTES
    key = apikeys.job_key(secret, job)
    assert len(key) == apikeys.KEY_CHARS and client.api_key(job) == key
    held = client.redis.hgetall(client.keys.held("g1"))
    assert {json.loads(v)["api_key"] for v in held.values()} == {key}
    assert all(Held.parse(v).api_key == key for v in held.values())
    assert key not in rec.to_stored()
    assert apikeys.job_key(secret, "another-job") != key


def test_an_owned_job_gives_its_key_to_its_owner_alone(client: Client) -> None:
    apikeys.forget()
    job = client.operations.submit(request(), "j1", as_client="svc-a")
    raw = client.redis.get(client.keys.client_key("svc-a", job))
    key = text(raw)
    assert raw is not None and key == apikeys.job_key(apikeys.secret(client.redis, client.keys), job)
    assert 0 < client.redis.ttl(client.keys.client_key("svc-a", job)) <= apikeys.ENGINE_KEY_TTL_S
    own = Client(client.redis, client.keys.prefix, client_id="svc-a")
    assert own.api_key(job) == key
    other = Client(client.redis, client.keys.prefix, client_id="svc-b")
    with pytest.raises(NotOwner):
        other.api_key(job)


def test_a_hold_with_a_bad_key_is_unreadable() -> None:
    assert Held.parse('{"gpus": 1, "host_gb": 0, "api_key": "a b"}').unreadable
    assert Held.parse('{"gpus": 1, "host_gb": 0, "api_key": 5}').unreadable
    assert Held.parse('{"gpus": 1, "host_gb": 0}').api_key == ""
