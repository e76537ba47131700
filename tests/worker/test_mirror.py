"""A worker's mirror of the pool: kept from ``pool:changes``, equal to a fresh read, and read afresh when it
cannot catch up (the stream trimmed past it, Redis restarted under it)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from producer import Client
from tests.redis_server import RedisServer
from tests.worker.helpers import drain, hb, request
from worker import constants as C
from worker import intake, jobs
from worker.keys import Keys
from worker.mirror import Mirror
from worker.mirrored import MirroredStore
from worker.pool import Held, ParsedNode, Snapshot
from worker.records import utcnow
from worker.reports import NodeRecord
from worker.runner import InProcessWorker, planning_worker


def parsed(node_id: str, **kw: object) -> ParsedNode:
    record = {**hb(node_id, **kw), "received_at": utcnow().isoformat()}  # type: ignore[arg-type]
    return ParsedNode.of(NodeRecord.model_validate_json(json.dumps(record)))


def fresh(r: redis.Redis) -> Snapshot:
    """The pool as a new worker would read it."""
    return MirroredStore(r, Keys()).snapshot()


def view(snap: Snapshot) -> list[tuple[str, int, int]]:
    return sorted((n.id, n.free_gpus, n.host_free_gb) for n in snap.nodes)


def test_changes_applied_in_memory_give_what_a_fresh_pool_gives() -> None:
    """Pure: nodes joining, changing and leaving, holds written and cleared, against a Snapshot built anew
    from the same data."""
    snap = Snapshot("0", {}, {})
    assert snap.nodes == []
    snap.put_node("a", parsed("a", gpus=4))
    snap.put_node("b", parsed("b", gpus=2))
    snap.set_hold("a", "j1:0:1", Held(2, 0.0, "boot-1"))
    snap.set_hold("b", "j2:nominated", Held(1, 0.0, "boot-1", nominated=True))
    snap.put_node("a", parsed("a", gpus=4, free=3, seq=2))  # reports one card busy outside modelplan
    snap.put_node("c", parsed("c", gpus=8))
    snap.set_hold("b", "j2:nominated", None)
    snap.drop_node("c")
    built = Snapshot("0", dict(snap.records), {n: dict(h) for n, h in snap.held.items()})
    assert view(snap) == view(built) == [("a", 1, 256), ("b", 2, 256)]
    assert snap.held == {"a": {"j1:0:1": Held(2, 0.0, "boot-1")}}


def test_a_lapsed_heartbeat_leaves_the_mirror_as_its_key_leaves_redis() -> None:
    mirror = Mirror("1-0", 0)
    mirror.pool.put_node("a", parsed("a"))
    mirror.pool.put_node("b", parsed("b"))
    mirror.expires("a", 1_000)
    mirror.expires("b", 1_000)
    mirror.expires("b", 5_000)  # b published again
    mirror.expire(2_000)
    assert sorted(mirror.pool.records) == ["b"]


@pytest.mark.parametrize(
    ("info", "continues"),
    [
        ({"recorded-first-entry-id": b"5-0", "entries-added": 9, "length": 5}, True),  # ours (10-0) still there
        ({"recorded-first-entry-id": b"10-0", "entries-added": 9, "length": 5}, True),
        ({"recorded-first-entry-id": b"11-0", "entries-added": 9, "length": 5}, False),  # trimmed past ours
        ({"recorded-first-entry-id": b"0-0", "entries-added": 0, "length": 0}, True),
        # empty: trimmed to nothing (XTRIM MAXLEN 0); ours was the last change, or one came after it
        ({"recorded-first-entry-id": b"0-0", "last-generated-id": b"10-0", "entries-added": 9, "length": 0}, True),
        ({"recorded-first-entry-id": b"0-0", "last-generated-id": b"12-0", "entries-added": 11, "length": 0}, False),
    ],
)
def test_a_mirror_knows_when_the_stream_no_longer_holds_its_next_change(
    info: dict[str, object], continues: bool
) -> None:
    assert Mirror("10-0", 0).continues(info) is continues


def test_a_worker_mirror_equals_a_fresh_read_through_a_busy_run(redis_url: str) -> None:
    client = Client.from_url(redis_url)
    for i in range(4):
        client.heartbeat(hb(f"gpu-{i}", gpus=2))
    mirror = client.store.snapshot()  # the mirror, read in full once
    jobs = [client.submit(request()) for _ in range(6)]
    drain(client)
    client.heartbeat(hb("gpu-0", gpus=2, free=1, seq=2))
    client.release(jobs[0])
    client.cancel(jobs[-1]) if client.get(jobs[-1]).state.value == "waiting" else client.release(jobs[-1])
    drain(client)
    assert client.store.snapshot() is mirror  # caught up, not read anew
    assert view(mirror) == view(fresh(client.redis))
    assert mirror.held == fresh(client.redis).held


def test_a_stream_trimmed_under_a_worker_sends_it_back_to_a_full_read(redis_url: str) -> None:
    client = Client.from_url(redis_url)
    client.heartbeat(hb("gpu-0", gpus=2, free=0))
    first = client.store.snapshot()
    client.heartbeat(hb("gpu-0", gpus=2, free=2, seq=2))
    client.heartbeat(hb("gpu-1", gpus=2, seq=1))
    client.redis.xtrim(client.keys.pool_changes, maxlen=1, approximate=False)  # gpu-0's change is gone
    now = client.store.snapshot()
    assert now is not first
    assert view(now) == view(fresh(client.redis)) == [("gpu-0", 2, 256), ("gpu-1", 2, 256)]


def test_a_stream_trimmed_to_nothing_sends_a_worker_back_to_a_full_read(redis_url: str) -> None:
    client = Client.from_url(redis_url)
    client.heartbeat(hb("gpu-0", gpus=2))
    first = client.store.snapshot()
    client.heartbeat(hb("gpu-1", gpus=2))
    client.redis.xtrim(client.keys.pool_changes, maxlen=0, approximate=False)  # no entry left to say what went
    now = client.store.snapshot()
    assert now is not first
    assert view(now) == view(fresh(client.redis)) == [("gpu-0", 2, 256), ("gpu-1", 2, 256)]


@pytest.mark.parametrize("then", ["stream_gone", "stream_made_anew"])
def test_a_mirror_read_with_no_stream_sees_one_that_came_and_went(redis_url: str, then: str) -> None:
    """A pool read while ``pool:changes`` did not exist has no entry to go on from: a stream made after it and
    lost before the next read (deleted, or a Redis restart) held changes that the mirror never saw."""
    client = Client.from_url(redis_url)
    client.heartbeat(hb("gpu-0", gpus=2))
    client.redis.delete(client.keys.pool_changes)
    first = client.store.snapshot()
    client.heartbeat(hb("gpu-1", gpus=2))  # onto a stream made anew...
    client.redis.delete(client.keys.pool_changes)  # ...lost before the worker read it
    expected = [("gpu-0", 2, 256), ("gpu-1", 2, 256)]
    if then == "stream_made_anew":
        client.heartbeat(hb("gpu-2", gpus=2))
        expected.append(("gpu-2", 2, 256))
    now = client.store.snapshot()
    assert now is not first
    assert view(now) == view(fresh(client.redis)) == expected


def test_redis_restarted_under_a_warm_mirror(tmp_path: object) -> None:
    server = RedisServer()
    server.start()
    try:
        client = Client.from_url(server.url)
        client.heartbeat(hb("old-node", gpus=8))
        client.submit(request(), job_id="j1")
        drain(client)
        assert [n.id for n in client.store.snapshot().nodes] == ["old-node"]
        server.restart()  # no persistence: everything is gone
        client.heartbeat(hb("new-node", gpus=1))
        assert view(client.store.snapshot()) == [("new-node", 1, 256)]
        assert client.store.snapshot().held == {}
    finally:
        server.cleanup()


def test_a_node_whose_heartbeat_lapsed_leaves_the_mirror(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(C, "NODE_TTL_MS", 300)
    client = Client.from_url(redis_url)
    client.heartbeat(hb("brief", gpus=1))
    store = MirroredStore(redis.Redis.from_url(redis_url), client.keys)
    assert [n.id for n in store.snapshot().nodes] == ["brief"]
    time.sleep(0.5)
    # the server announces the expiry (or the sweep finds it): a worker's intake takes it in as gone
    intake.reconcile(client.store)
    assert store.snapshot().nodes == []


REFRESH_TTL_MS = 1_500
"""A node's TTL while it is refreshed past its first lapse: many times the pause between refreshes, so that a
busy machine's delays do not let it lapse between two of them."""
REFRESH_EVERY_S = 0.1


def server_ms(r: redis.Redis) -> int:
    """The Redis server's clock, by which heartbeats lapse, in milliseconds."""
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_a_refresh_goes_onto_the_stream_as_its_lapse_only(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A heartbeat that repeats what its node reported (a later seq, the same figures) moves only its
    record's TTL and adds nothing to pool:changes: the node stays in a worker's mirror past its first
    lapse, until its record is gone; one that changes a figure, or comes from a new boot, is a change."""
    monkeypatch.setattr(C, "NODE_TTL_MS", REFRESH_TTL_MS)
    client = Client.from_url(redis_url)
    client.heartbeat(hb("steady", gpus=2, seq=1))
    first_lapse = server_ms(client.redis) + REFRESH_TTL_MS  # the first heartbeat's lapse, or just after it
    store = MirroredStore(redis.Redis.from_url(redis_url), client.keys)
    assert [n.id for n in store.snapshot().nodes] == ["steady"]
    seq = 1
    while server_ms(client.redis) <= first_lapse:  # refreshed until its first lapse is past
        time.sleep(REFRESH_EVERY_S)
        seq += 1
        client.heartbeat(hb("steady", gpus=2, seq=seq))
        assert view(store.snapshot()) == [("steady", 2, 256)]
    assert view(store.snapshot()) == [("steady", 2, 256)]  # past its first lapse: kept by the refreshes alone
    refreshes = seq - 1
    client.heartbeat(hb("steady", gpus=2, free=1, seq=seq + 1))
    client.heartbeat(hb("steady", gpus=2, free=1, seq=1, boot="boot-2"))
    entries: Any = client.redis.xrange(client.keys.pool_changes)
    kinds = [sorted(k.decode() for k in fields) for _, fields in entries]
    assert refreshes > 1
    assert kinds == [["n", "r", "t"]] * 3
    assert view(store.snapshot()) == view(fresh(client.redis)) == [("steady", 1, 256)]


def _compact(record: dict[str, Any]) -> str:
    return json.dumps(record, separators=(",", ":"))


def _received_first(raw: str) -> str:
    record = json.loads(raw)
    return _compact({"received_at": record.pop("received_at"), **record})


LAID_OUT_OTHERWISE: dict[str, Callable[[str], str]] = {
    "a field after received_at": lambda raw: _compact({**json.loads(raw), "extra": 1}),
    "received_at before the seq": _received_first,
    "a space before the seq's comma": lambda raw: raw.replace('"seq":1,', '"seq":1 ,', 1),
}


@pytest.mark.parametrize("layout", sorted(LAID_OUT_OTHERWISE))
def test_a_stored_record_laid_out_otherwise_never_reads_as_a_refresh(redis_url: str, layout: str) -> None:
    """``heartbeat.lua`` tells a refresh from the stored text, cut at its seq and received_at: what it does
    not cut at stays in the comparison, so a record laid out otherwise goes on whole, not as a refresh."""
    client = Client.from_url(redis_url)
    client.heartbeat(hb("odd", gpus=2, seq=1))
    key = client.keys.node("odd")
    raw = client.redis.get(key)
    assert isinstance(raw, bytes)
    laid_out = LAID_OUT_OTHERWISE[layout](raw.decode())
    assert laid_out != raw.decode() and json.loads(laid_out).items() >= json.loads(raw).items()
    client.redis.set(key, laid_out, px=60_000)
    client.redis.delete(client.keys.pool_changes)
    client.heartbeat(hb("odd", gpus=2, seq=2))
    entries: Any = client.redis.xrange(client.keys.pool_changes)
    assert [sorted(k.decode() for k in fields) for _, fields in entries] == [["n", "r", "t"]]


def test_a_batch_of_refreshes_moves_the_lapses_of_the_nodes_held_only() -> None:
    """One entry names a call's refreshed nodes: each held node lapses at the entry's time, one refreshed
    with a shorter TTL than before lapses sooner, and a node the mirror does not hold stays out."""
    mirror = Mirror("1-0", 0)
    for node in ("a", "b"):
        mirror.pool.put_node(node, parsed(node))
        mirror.expires(node, 1_000)
    mirror.refreshed("a stranger", 5_000)
    mirror.expire(1_000)
    assert sorted(mirror.pool.records) == ["a"]
    mirror.refreshed("a", 3_000)  # a shorter TTL: due sooner, not at 5,000
    mirror.expire(3_000)
    assert mirror.pool.records == {} and "stranger" not in mirror._lapses


def test_a_refreshed_node_still_lapses_when_its_refreshes_stop() -> None:
    mirror = Mirror("1-0", 0)
    mirror.pool.put_node("a", parsed("a"))
    for at in (1_000, 2_000, 3_000):  # published again: due at the last, passed over at the ones before
        mirror.expires("a", at)
    mirror.expire(2_500)
    assert sorted(mirror.pool.records) == ["a"]
    mirror.expire(3_000)
    assert mirror.pool.records == {}


def test_a_mirror_far_behind_reads_on_page_by_page(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """More changes waiting than one read takes are read in pages, not by reading the pool whole; a trim
    that overtakes the mirror between two pages sends it back to a whole read."""
    monkeypatch.setattr(C, "MIRROR_BATCH", 3)
    client = Client.from_url(redis_url)
    client.heartbeat(hb("gpu-0", gpus=4, seq=1))
    mirror = client.store.snapshot()
    for seq in range(2, 12):  # ten changes: four pages
        client.heartbeat(hb("gpu-0", gpus=4, free=seq % 4, seq=seq))
    client.heartbeat(hb("gpu-1", gpus=2, seq=1))
    assert client.store.snapshot() is mirror
    assert view(mirror) == view(fresh(client.redis)) == [("gpu-0", 3, 256), ("gpu-1", 2, 256)]
    calls: list[int] = []
    xrange = redis.client.Pipeline.xrange

    def trimmed_after_the_first_page(pipe: redis.client.Pipeline, *args: Any, **kw: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:  # the second page is asked for: the stream is trimmed past the mirror first
            client.redis.xtrim(client.keys.pool_changes, maxlen=1, approximate=False)
        return xrange(pipe, *args, **kw)

    for seq in range(12, 20):
        client.heartbeat(hb("gpu-0", gpus=4, free=seq % 4, seq=seq))
    monkeypatch.setattr(redis.client.Pipeline, "xrange", trimmed_after_the_first_page, raising=False)
    again = client.store.snapshot()
    assert len(calls) == 2 and again is not mirror
    assert view(again) == view(fresh(client.redis))


def test_an_idle_worker_keeps_its_mirror_up(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker waiting for jobs brings its mirror up to date each time its wait times out, so that the
    next job does not find it far behind."""
    monkeypatch.setattr(C, "MIRROR_IDLE_READ_S", 0)
    client = Client.from_url(redis_url)
    client.heartbeat(hb("gpu-0", gpus=4))
    client.submit(request())
    worker = planning_worker(client.store, InProcessWorker)
    worker.work(burst=True, logging_level="WARNING")
    store = jobs.store_for(client.redis, client.keys.prefix)
    before = store.recent_snapshot(60)
    client.heartbeat(hb("gpu-1", gpus=2))
    assert [n.id for n in store.recent_snapshot(60).nodes] == ["gpu-0"]  # not read since
    worker.heartbeat()
    assert store.recent_snapshot(60) is before
    assert view(before) == view(fresh(client.redis))


def test_a_commit_on_a_stale_mirror_fails_and_plans_again(redis_url: str) -> None:
    """Two workers' mirrors, one a step behind: the card the other took is refused to it by the commit."""
    a, b = Client.from_url(redis_url), Client.from_url(redis_url)
    a.heartbeat(hb("gpu-0", gpus=1))
    a.store.snapshot(), b.store.snapshot()
    a.submit(request(), job_id="first")
    drain(a)
    assert a.get("first").state.value == "placed"
    stale = b.store.recent_snapshot(60)  # b's mirror, not caught up: the card looks free
    assert [n.free_gpus for n in stale.nodes] == [1]
    b.submit(request(), job_id="second")
    drain(b)
    assert b.get("second").state.value == "waiting"
    assert json.loads(a.redis.hget(a.keys.held("gpu-0"), a.get("first").placement[0].hold_id) or b"{}")["gpus"] == 1


def test_a_job_that_fits_only_on_a_node_that_just_joined_is_not_failed_on_a_reused_read(redis_url: str) -> None:
    """A plan may reuse a read a fraction of a second old, as its commit re-checks what it relies on; a
    failure re-checks nothing and is final, so it is decided on the pool as it is now."""
    client = Client.from_url(redis_url)
    client.heartbeat(hb("small", gpus=2))
    client.submit(request(), job_id="first")
    drain(client)  # the worker's read is warm, and recent
    client.heartbeat(hb("big", gpus=4))
    client.submit(request("llama-3.1-70b-instruct"), job_id="needs-big")  # four cards of one node
    drain(client)
    rec = client.get("needs-big")
    assert rec.state.value == "placed", rec.reason
    assert [r.node_id for r in rec.placement] == ["big"]


def test_a_commit_refused_for_a_node_reads_that_node_afresh(redis_url: str) -> None:
    """A hold written by hand (no entry on ``pool:changes``) is invisible to a warm mirror; the commit that
    counts on the card is refused, the mirror reads that node again, and the next plan goes elsewhere."""
    client = Client.from_url(redis_url)
    client.heartbeat(hb("gpu-0", gpus=1))
    client.heartbeat(hb("gpu-1", gpus=1))
    client.submit(request("llama-3.1-70b-instruct"), job_id="too-big")  # fits no card: planned, it fails
    drain(client)  # and the worker's mirror is warm
    assert client.get("too-big").state.value == "failed"
    client.redis.hset(client.keys.held("gpu-0"), "other:0:1", json.dumps({"gpus": 1, "host_gb": 0, "boot_id": "b"}))
    client.redis.sadd(client.keys.held_nodes, "gpu-0")
    client.submit(request(), job_id="j1")
    drain(client)
    placed = client.get("j1")
    assert placed.state.value == "placed"
    assert [r.node_id for r in placed.placement] == ["gpu-1"]
    assert "taken each time" not in placed.reason
