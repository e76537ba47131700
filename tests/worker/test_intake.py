"""The workers' intake (``worker.intake``, ``intake.lua``): what a node's own keys say, taken into the shared
state once, however many workers are rung; what a worker hears on the keyspace channels; and a node whose
record lapsed is never committed to, even by a mirror that still holds it."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis

from producer import Client
from tests.worker.helpers import drain, hb, request
from worker import constants as C
from worker import intake, runner
from worker.keys import Keys
from worker.mirrored import MirroredStore
from worker.records import JobState


def feed(client: Client) -> list[list[str]]:
    entries: Any = client.redis.xrange(client.keys.pool_changes)
    return [sorted(k.decode() for k in fields) for _, fields in entries]


def agent_like(client: Client) -> Client:
    """The same server, publishing as a node's login does: its changes left to the workers' intake."""
    other = Client(client.redis, client.keys.prefix)
    other.store.inline_intake = False
    return other


def test_a_change_is_taken_in_once_by_many_workers(client: Client) -> None:
    agent = agent_like(client)
    assert agent.heartbeat(hb("g1", gpus=2))
    assert agent.heartbeat(hb("g1", gpus=2, seq=2))  # a refresh: nothing for the intake
    assert feed(client) == [] and client.redis.zcard(client.keys.nodes) == 0
    for _ in range(3):  # three workers rung for the one change
        client.store.intake(["g1"])
    assert feed(client) == [["n", "r", "t"]]
    assert [n.id for n in client.pool().nodes] == ["g1"]
    assert agent.heartbeat(hb("g1", gpus=2, free=1, seq=3))
    client.store.intake(["g1", "g1"])
    assert feed(client) == [["n", "r", "t"]] * 2


def test_freed_cards_wake_only_through_the_intake(client: Client) -> None:
    client.heartbeat(hb("g1", gpus=1))
    first = client.submit(request())
    drain(client)
    second = client.submit(request())
    drain(client)
    assert client.get(second).state is JobState.WAITING
    client.release(first)
    client.redis.delete(client.keys.wake_signal)
    agent = agent_like(client)
    assert agent.heartbeat(hb("g1", gpus=1, free=0, seq=2))
    client.store.intake(["g1"])
    client.redis.delete(client.keys.wake_signal)
    assert agent.heartbeat(hb("g1", gpus=1, free=1, seq=3))
    assert client.redis.llen(client.keys.wake_signal) == 0  # the node's login signals nothing
    assert client.store.intake(["g1"]) is True
    assert client.redis.llen(client.keys.wake_signal) == 1


def test_a_lapsed_node_is_never_committed_to(client: Client, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A mirror keeps a node until its gone entry: a commit on it once its record lapsed is refused by the
    transition function (a lapsed key reads as none), and the job goes where a node is."""
    monkeypatch.setattr(C, "NODE_TTL_MS", 300)
    client.heartbeat(hb("brief", "h200-141g", gpus=8))
    monkeypatch.setattr(C, "NODE_TTL_MS", 60_000)
    client.heartbeat(hb("steady", "h100-80g", gpus=1))
    store = MirroredStore(redis.Redis.from_url(redis_url), client.keys)
    assert sorted(n.id for n in store.snapshot().nodes) == ["brief", "steady"]
    time.sleep(0.5)
    assert "brief" in store.snapshot().records  # no gone entry yet: the mirror still holds it
    job = client.submit(request())
    runner.drain(store)
    rec = client.get(job)
    assert rec.state is JobState.PLACED and [p.node_id for p in rec.placement] == ["steady"]


def test_what_a_worker_hears_names_its_own_databases_nodes() -> None:
    k = Keys("mp")
    channels = [
        b"__keyspace@0__:mp:node:g1",
        b"__keyspace@0__:mp:conflict:g2",
        b"__keyspace@1__:mp:node:g3",  # another database
        b"__keyspace@0__:other:node:g4",  # another prefix
        b"__keyspace@0__:mp:node:no:id",  # no id
        b"__keyspace@0__:mp:nodes",
    ]
    assert intake.node_ids(k, 0, channels) == {"g1", "g2"}


def test_the_intake_thread_takes_in_what_it_is_rung_for(client: Client, redis_url: str) -> None:
    stop = threading.Event()
    thread = threading.Thread(target=intake.serve, args=(redis_url, client.keys, "w-test", stop), daemon=True)
    thread.start()
    try:
        agent = agent_like(client)
        deadline = time.monotonic() + 10
        assert agent.heartbeat(hb("g1", gpus=2))
        while not client.redis.zscore(client.keys.nodes, "g1"):
            assert time.monotonic() < deadline, "not taken in"
            time.sleep(0.02)
        assert agent.heartbeat(hb("g1", gpus=2, free=1, seq=2))
        while len(feed(client)) < 2:
            assert time.monotonic() < deadline, "the change not taken in"
            time.sleep(0.02)
    finally:
        stop.set()
        thread.join(timeout=10)
    assert feed(client) == [["n", "r", "t"]] * 2
