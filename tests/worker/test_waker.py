"""The waker: each worker process takes the token the scripts put on ``wake:signal`` when they free
capacity, and runs the wake-up pass itself, with no RQ job, one at a time with the job it is planning."""

from __future__ import annotations

import contextlib
import gc
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from producer import Client
from tests.worker.helpers import drain, hb, queued_functions, request, signalled
from tests.worker.test_fallbacks_replicas import big_request
from worker import constants as C
from worker import jobs, runner
from worker.mirrored import MirroredStore
from worker.records import JobState
from worker.scripts import text

WITHIN_S = 10.0


@contextlib.contextmanager
def running_waker(client: Client) -> Iterator[tuple[MirroredStore, threading.Thread, threading.Event]]:
    """A waker thread on the store this process's jobs use, as ``modelplan worker`` starts one."""
    store = jobs.store_for(client.redis, client.keys.prefix)
    stop = threading.Event()
    thread = threading.Thread(target=runner._wake, args=(store, "test-waker", stop), daemon=True)
    thread.start()
    try:
        yield store, thread, stop
    finally:
        stop.set()
        thread.join(timeout=WITHIN_S)


@pytest.fixture
def waker(client: Client) -> Iterator[tuple[MirroredStore, threading.Thread, threading.Event]]:
    with running_waker(client) as running:
        yield running


def waiting_job(client: Client) -> str:
    client.heartbeat(hb("gpu-1", gpus=1, free=0, seq=1))
    job = client.submit(request())
    drain(client)
    assert client.get(job).state is JobState.WAITING
    return job


def eventually(check: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + WITHIN_S
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_freed_card_places_the_waiting_job_with_no_rq_job_queued(
    client: Client, waker: tuple[MirroredStore, threading.Thread, threading.Event]
) -> None:
    job = waiting_job(client)
    client.heartbeat(hb("gpu-1", gpus=1, free=1, seq=2))
    assert eventually(lambda: client.get(job).state is JobState.PLACED)
    assert queued_functions(client) == []
    assert not signalled(client)  # the waker took the token


def test_a_burst_of_freeing_leaves_one_token(client: Client) -> None:
    for i in range(20):
        client.heartbeat(hb(f"gpu-{i}", gpus=1, free=0, seq=1))
    waiting_job(client)
    for i in range(20):
        client.heartbeat(hb(f"gpu-{i}", gpus=1, free=1, seq=2))
    assert client.redis.llen(client.keys.wake_signal) == 1
    client.store.signal_pass(full=True)
    assert client.redis.llen(client.keys.wake_signal) == 1
    assert client.redis.sismember(client.keys.wake_classes, "*")


def test_the_pass_waits_for_the_job_being_planned_in_its_process(
    client: Client, waker: tuple[MirroredStore, threading.Thread, threading.Event]
) -> None:
    """The waker and the job thread share one mirror: a pass signalled while a job holds it runs after."""
    store, _, _ = waker
    job = waiting_job(client)
    with store.lock:  # as a planning job holds it
        client.heartbeat(hb("gpu-1", gpus=1, free=1, seq=2))
        assert eventually(lambda: not signalled(client))  # taken by the waker, which now waits its turn
        time.sleep(0.2)
        assert client.get(job).state is JobState.WAITING
    assert eventually(lambda: client.get(job).state is JobState.PLACED)


def test_while_no_pass_is_due_the_waker_keeps_the_mirror_up(
    client: Client, waker: tuple[MirroredStore, threading.Thread, threading.Event]
) -> None:
    """A change that signals nothing (a node joining, cards taken) reaches the mirror within a few waits,
    with no job and no pass: the next pass then has only what came since to read before it plans."""
    store, _, _ = waker
    client.heartbeat(hb("gpu-1", gpus=2, free=2, seq=1))
    assert eventually(lambda: store._mirror is not None)
    client.heartbeat(hb("gpu-2", gpus=4, free=1, seq=1))
    client.heartbeat(hb("gpu-1", gpus=2, free=0, seq=2))
    assert not signalled(client)

    def mirrored() -> dict[str, int]:
        with store.lock:
            return {n.id: n.free_gpus for n in store.recent_snapshot(60).nodes}

    assert eventually(lambda: mirrored() == {"gpu-1": 0, "gpu-2": 1})
    assert not signalled(client) and queued_functions(client) == []


def test_the_waker_stops_between_waits(
    client: Client, waker: tuple[MirroredStore, threading.Thread, threading.Event]
) -> None:
    _, thread, stop = waker
    stop.set()
    thread.join(timeout=WITHIN_S)
    assert not thread.is_alive()


def test_a_burst_drain_runs_the_passes_its_jobs_signalled(client: Client) -> None:
    """``drain`` (as ``modelplan worker --burst``) leaves no token behind: a job released in the drain
    frees its card, and the pass that frees places the job waiting on it."""
    client.heartbeat(hb("gpu-1", gpus=1, free=1, seq=1))
    first = client.submit(request())
    drain(client)
    assert client.get(first).state is JobState.PLACED
    client.heartbeat(hb("gpu-1", gpus=1, free=0, seq=2))  # its card, as the node now reports it
    second = client.submit(request())
    drain(client)
    assert client.get(second).state is JobState.WAITING
    client.release(first)
    client.heartbeat(hb("gpu-1", gpus=1, free=1, seq=3))
    assert signalled(client)
    drain(client)
    assert not signalled(client)
    assert client.get(second).state is JobState.PLACED


@pytest.mark.parametrize(
    ("freed", "full", "picked"),
    [
        ({"h100-80g"}, False, ["j-h100", "j-both", "j-any", "j-unknown"]),
        ({"l40s-48g,a100-40g"}, False, ["j-both", "j-any", "j-unknown"]),  # a freed entry may be comma-joined
        ({"cpu"}, False, ["j-cpu", "j-any", "j-unknown"]),
        ({"*"}, False, ["j-h100", "j-both", "j-cpu", "j-any", "j-unknown"]),
        (set(), True, ["j-h100", "j-both", "j-cpu", "j-any", "j-unknown"]),
    ],
)
def test_a_pass_picks_the_pending_jobs_the_freed_classes_serve(
    client: Client, freed: set[str], full: bool, picked: list[str]
) -> None:
    """``take_wake.lua`` picks, in the pending order, each job waiting on a freed class (or on any, or on
    what ``pending:for`` does not say), with its record; every job when the pass is full."""
    k = client.keys
    waits = {"j-h100": "h100-80g", "j-both": "a100-40g,h100-80g", "j-cpu": "cpu", "j-any": "any", "j-unknown": None}
    for score, (job, cls) in enumerate(waits.items()):
        client.redis.zadd(k.pending, {job: score})
        client.redis.set(k.job(job), f"not a record {job}")
        if cls is not None:
            client.redis.hset(k.pending_for, job, cls)
    if freed:
        client.redis.sadd(k.wake_classes, *freed)
    client.redis.rpush(k.wake_signal, "1")
    classes, got = client.store.take_wake(full)
    assert classes == freed
    assert [j for j, _ in got] == picked
    assert all(getattr(rec, "raw", None) == f"not a record {j}".encode() for j, rec in got)  # as read, unparsed
    assert not client.redis.exists(k.wake_classes) and not signalled(client)


def test_the_collector_is_kept_off_what_a_worker_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Frozen`` freezes after each whole read and every ``GC_FREEZE_S``, and not before the first read."""
    frozen = runner.Frozen()
    gc.unfreeze()
    try:
        frozen.keep(0)
        assert gc.get_freeze_count() == 0  # no mirror yet
        frozen.keep(1)
        assert gc.get_freeze_count() > 0
        gc.unfreeze()
        frozen.keep(1)
        assert gc.get_freeze_count() == 0  # nothing new: not yet
        monkeypatch.setattr(C, "GC_FREEZE_S", 0.0)
        frozen.keep(1)
        assert gc.get_freeze_count() > 0  # its time came
        gc.unfreeze()
        monkeypatch.setattr(C, "GC_FREEZE_S", 3600.0)
        frozen.keep(2)
        assert gc.get_freeze_count() > 0  # the pool was read whole again
    finally:
        gc.unfreeze()


def test_a_pass_commits_what_it_places_in_one_round_trip(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two cards freed in one call: the pass plans the second job on what the first takes, and sends both
    commits at once."""
    client.heartbeats([hb("gpu-1", gpus=1, free=0, seq=1), hb("gpu-2", gpus=1, free=0, seq=1)])
    jobs_ = [client.submit(request()) for _ in range(2)]
    drain(client)
    assert [client.get(j).state for j in jobs_] == [JobState.WAITING] * 2
    store = jobs.store_for(client.redis, client.keys.prefix)
    sent: list[int] = []
    transitions = store.transitions

    def counted(calls: list[Any]) -> Any:
        sent.append(len(calls))
        return transitions(calls)

    monkeypatch.setattr(store, "transitions", counted)
    client.heartbeats([hb("gpu-1", gpus=1, free=1, seq=2), hb("gpu-2", gpus=1, free=1, seq=2)])
    assert runner.run_passes(store, "test")
    recs = [client.get(j) for j in jobs_]
    assert [r.state for r in recs] == [JobState.PLACED] * 2
    assert sorted(r.placement[0].node_id for r in recs) == ["gpu-1", "gpu-2"]
    assert sent == [2]


def test_a_commit_refused_in_a_pass_leaves_the_mirror_as_redis_is(client: Client) -> None:
    """The mirror counted a node's cards free that were not (a record written outside the scripts): the
    commit staged on it, which also let go the job's hold on another node, is refused and taken back
    whole, and the job waits with its hold as before."""
    client.heartbeat(hb("gpu-big", gpus=8, seq=1))
    small = [client.submit(request()) for _ in range(8)]
    drain(client)
    big = client.submit(big_request())
    drain(client)
    client.release(small[0])
    drain(client)
    held = client.get(big).nomination
    assert held is not None and [h.node_id for h in held.holds] == ["gpu-big"]
    store = jobs.store_for(client.redis, client.keys.prefix)
    client.heartbeat(hb("gpu-new", gpus=8, seq=1))  # joins: signals a pass over every pending job
    assert store.snapshot().records["gpu-new"].free_gpus == 8
    taken = {**hb("gpu-new", gpus=8, free=0, seq=2), "schema_version": 1, "received_at": "2026-01-01T00:00:00Z"}
    client.redis.set(client.keys.node("gpu-new"), json.dumps(taken, separators=(",", ":")), px=60_000)
    assert runner.run_passes(store, "test")
    rec = client.get(big)
    assert rec.state is JobState.WAITING and rec.nomination is not None
    for node in ("gpu-big", "gpu-new"):
        in_redis = {text(k) for k in client.redis.hkeys(client.keys.held(node))}
        assert set(store.snapshot().held.get(node, {})) == in_redis, node


def test_a_wrong_typed_signal_is_a_signal_and_the_waker_repairs_it(client: Client) -> None:
    """``wake:signal`` written as a string (any writer may): the waker takes it as a pass that may be due,
    puts the key right and runs the pass, so the waiting job is placed; it says so once, rather than
    retrying its wait in a loop that writes a traceback each time round; and signals work after it."""
    job = waiting_job(client)
    client.heartbeat(hb("gpu-1", gpus=1, free=1, seq=2))  # frees the card: a token
    client.redis.delete(client.keys.wake_signal)
    client.redis.set(client.keys.wake_signal, "x")  # written over the token
    with capture_logs() as events, running_waker(client):
        assert eventually(lambda: client.get(job).state is JobState.PLACED)
        assert eventually(lambda: client.redis.type(client.keys.wake_signal) in (b"none", b"list"))
        second = client.submit(request(), job_id="second")
        drain(client)
        assert client.get(second).state is JobState.WAITING
        client.heartbeat(hb("gpu-2", gpus=1, free=1, seq=1))  # a node joins: a token, as always
        assert eventually(lambda: client.get(second).state is JobState.PLACED)
    names = [e["event"] for e in events]
    assert names.count("wake_signal_repaired") == 1, names
    assert "wake_pass_failed" not in names, names
    assert len(names) < 40, names  # a pass or two and what they placed, not a line per retry
    assert not signalled(client) and queued_functions(client) == []
