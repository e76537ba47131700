"""The parse cache a worker keeps across reads of the pool stays bounded whatever is written to the pool's
keys: by its entries, and by the bytes each may have, so that distinct large values (a hold of 10 MiB,
again and again) cannot grow a worker's memory; a hold far larger than any modelplan writes is not parsed
at all, and counts as unreadable: its node's cards stay taken."""

from __future__ import annotations

import json

import pytest

from producer import Client
from tests.worker.helpers import drain, hb, request, whole_state
from worker import constants as C
from worker.errors import BadRecord
from worker.pool import ParseCache
from worker.records import JobState

LARGE = 64 * 1024


def hold_value(i: int, pad: int = 0) -> bytes:
    """A hold as JSON, distinct for each ``i``, ``pad`` bytes longer than it needs to be."""
    value = {"gpus": 1, "host_gb": 0.0, "boot_id": f"boot-{i}", "nominated": False, "pad": "x" * pad}
    return json.dumps(value).encode()


def node_value(i: int, pad: int = 0) -> bytes:
    record = {**hb(f"gpu-{i}"), "received_at": "2026-01-01T00:00:00Z", "schema_version": 1}
    return (json.dumps(record)[:-1] + " " * pad + "}").encode()


def cached_bytes(cache: ParseCache) -> int:
    return sum(len(raw) for d in (cache.nodes, cache.bad_nodes, cache.holds) for raw in d)


def test_distinct_large_holds_are_neither_parsed_nor_kept() -> None:
    cache = ParseCache()
    for i in range(200):
        held = cache.hold(hold_value(i, pad=LARGE))
        assert held.unreadable.startswith("hold is "), held.unreadable
        assert held.gpus > 1 << 16  # counted as every card of its node
    assert cache.holds == {} and cached_bytes(cache) == 0


def test_a_hold_just_under_the_limit_is_read_and_kept() -> None:
    cache = ParseCache()
    raw = hold_value(0)
    raw = hold_value(0, pad=C.HOLD_MAX_BYTES - len(raw))
    assert len(raw) == C.HOLD_MAX_BYTES
    held = cache.hold(raw)
    assert (held.gpus, held.unreadable) == (1, "")
    assert list(cache.holds) == [raw]


def test_distinct_holds_past_the_entry_bound_are_not_all_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(C, "PARSE_CACHE_SLACK", 100)
    cache = ParseCache()
    for i in range(1_000):
        assert cache.hold(hold_value(i)).gpus == 1
        assert len(cache.holds) <= 100
    assert cached_bytes(cache) <= 100 * C.HOLD_MAX_BYTES


def test_distinct_large_node_records_are_not_kept() -> None:
    """A node's stored heartbeat as large as anyone writes it (one valid, one not): parsed as read, each
    time, but not kept by its bytes."""
    cache = ParseCache()
    for i in range(100):
        assert cache.node(node_value(i, pad=LARGE), f"node:gpu-{i}").record.node_id == f"gpu-{i}"
        with pytest.raises(BadRecord):
            cache.node(b"{" + b" " * LARGE + str(i).encode(), f"node:bad-{i}")
    assert cached_bytes(cache) == 0


def test_distinct_node_records_past_the_entry_bound_are_not_all_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Between whole reads (a node read afresh, a node's boot looked up), each new stored heartbeat is
    parsed and kept: no more than twice the pool last read and the slack."""
    monkeypatch.setattr(C, "PARSE_CACHE_SLACK", 50)
    cache = ParseCache()
    cache.trim([node_value(i) for i in range(10)])  # the pool last read: ten nodes
    for i in range(500):
        cache.node(node_value(i, pad=i), f"node:gpu-{i}")
        with pytest.raises(BadRecord):
            cache.node(b"not a record %d" % i, f"node:bad-{i}")
        assert len(cache.nodes) <= 2 * 10 + 50 and len(cache.bad_nodes) <= 50


def test_a_hold_past_the_limit_keeps_its_nodes_cards_taken(client: Client) -> None:
    """Written straight into ``held:{node}``, valid JSON but past ``HOLD_MAX_BYTES``: unreadable, as a hold
    that does not parse is, so no plan counts a card of its node free; it is reported, and nothing else is
    held up."""
    client.heartbeat(hb("gpu-1", gpus=1))
    client.heartbeat(hb("gpu-2", gpus=1))
    k = client.keys
    value = hold_value(0, pad=C.HOLD_MAX_BYTES).decode().replace('"gpus": 1', '"gpus": 0')
    client.redis.hset(k.held("gpu-1"), "ghost:0:1", value)
    client.redis.sadd(k.held_nodes, "gpu-1")
    client.submit(request(), job_id="a")
    client.submit(request(), job_id="b")
    drain(client)
    assert [client.get(j).state for j in ("a", "b")] == [JobState.PLACED, JobState.WAITING]
    assert [r.node_id for r in client.get("a").placement] == ["gpu-2"]
    assert list(client.quarantined()) == [f"{k.held('gpu-1')} 'ghost:0:1'"]
    state = whole_state(client)
    assert state["index"] == {"placed": ["a"], "waiting": ["b"]}
    assert state["held"] == {"gpu-1": {"ghost": 0}, "gpu-2": {"a": 1}}
