"""A worker's loops carry on after a failure with a pause that doubles while they keep failing, up to
``RETRY_MAX_S``, and say so once: Redis busy with a script (``BUSY``) or loading its data, or an error,
never makes a loop try again at once and write a line each time round."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from structlog.testing import capture_logs

from worker import constants as C
from worker import requests, retry, runner
from worker.keys import Keys

BUSY = "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSCRIPT."


class Spun(BaseException):
    """A loop that tried far more often than it waited: it would spin."""


class Stop:
    """A loop's stop event that records each pause it is asked to wait, and is set after ``waits``."""

    def __init__(self, waits: int) -> None:
        self.waits = waits
        self.pauses: list[float] = []

    def is_set(self) -> bool:
        return len(self.pauses) >= self.waits

    def wait(self, timeout: float) -> bool:
        self.pauses.append(timeout)
        return self.is_set()


class Tries:
    """What a loop calls: raises each of ``errors`` in turn (None: succeeds), then counts on; past
    ``limit`` calls it stops the loop the hard way (``Spun``)."""

    def __init__(self, errors: list[Exception | None], limit: int = 100) -> None:
        self.errors, self.limit, self.calls = errors, limit, 0

    def __call__(self, *_: Any, **__: Any) -> Any:
        self.calls += 1
        if self.calls > self.limit:
            raise Spun
        error = self.errors[self.calls - 1] if self.calls <= len(self.errors) else None
        if error is not None:
            raise error
        return False


def doubling(first: float, n: int) -> list[float]:
    return [min(C.RETRY_MAX_S, first * 2**i) for i in range(n)]


def test_a_pause_doubles_up_to_its_cap_and_starts_again_after_a_success() -> None:
    backoff = retry.Backoff(0.5)
    assert [backoff.failed() for _ in range(8)] == doubling(0.5, 8)
    assert backoff.failed() == C.RETRY_MAX_S
    backoff.succeeded()
    assert backoff.failed() == 0.5


@pytest.mark.parametrize(
    ("error", "unavailable"),
    [
        (redis.ResponseError(BUSY), True),
        (redis.exceptions.BusyLoadingError("Redis is loading the dataset in memory"), True),
        (redis.ConnectionError("Error 111 connecting"), True),
        (redis.TimeoutError("Timeout reading from socket"), True),
        (redis.ResponseError("BUSYGROUP Consumer Group name already exists"), False),
        (redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"), False),
        (redis.exceptions.NoPermissionError("this user has no permissions to run the 'ltrim' command"), False),
    ],
)
def test_busy_and_away_are_told_from_errors(error: Exception, unavailable: bool) -> None:
    assert retry.unavailable(error) is unavailable


class FakeStore:
    """What the waker uses of a store, its wait for a signal answering as ``Tries`` says."""

    def __init__(self, tries: Tries) -> None:
        self.wait_for_pass = tries
        self.lock = threading.RLock()
        self.whole_reads = 0

    def keep_warm(self, idle_s: float) -> None:
        return None


@contextlib.contextmanager
def events() -> Iterator[list[str]]:
    with capture_logs() as logged:
        names: list[str] = []
        yield names
        names += [str(e["event"]) for e in logged]


def test_the_waker_backs_off_while_redis_is_busy_and_says_so_once() -> None:
    tries = Tries([redis.ResponseError(BUSY)] * 12)
    stop = Stop(waits=12)
    with events() as names:
        runner._wake(FakeStore(tries), "test", stop)  # type: ignore[arg-type]
    assert tries.calls == 12
    assert stop.pauses == doubling(C.RETRY_FIRST_S, 12)
    assert stop.pauses[-1] == C.RETRY_MAX_S
    assert names == ["waker_failed"]


def test_the_wakers_pause_starts_again_once_a_try_succeeds() -> None:
    busy = redis.ResponseError(BUSY)
    bug = ValueError("a pass that fails")
    tries = Tries([busy, busy, busy, None, bug, bug])
    stop = Stop(waits=5)
    with events() as names:
        runner._wake(FakeStore(tries), "test", stop)  # type: ignore[arg-type]
    assert tries.calls == 6
    assert stop.pauses == [*doubling(C.RETRY_FIRST_S, 3), *doubling(C.RETRY_FIRST_S, 2)]
    assert names == ["waker_failed", "waker_resumed", "wake_pass_failed"]  # the same error twice: once


def test_the_request_reader_backs_off_while_redis_is_busy(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    tries = Tries([redis.ResponseError(BUSY)] * 8)

    class Consumer:
        def __init__(self, store: object, name: str) -> None:
            self.poll = tries

        def leave(self) -> None:
            return None

    monkeypatch.setattr(requests, "Consumer", Consumer)
    stop = Stop(waits=8)
    with events() as names:
        requests.serve(redis_url, Keys(), "test", stop)
    assert tries.calls == 8
    assert stop.pauses == doubling(C.OUTAGE_RETRY_S, 8)
    assert names == ["requests_unavailable"]


def test_the_sweep_backs_off_while_redis_is_busy(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    tries = Tries([redis.ResponseError(BUSY)] * 6)
    monkeypatch.setattr(runner, "sweep", tries)
    stop = Stop(waits=7)
    with events() as names:
        runner._maintain(redis_url, Keys(), stop)  # type: ignore[arg-type]
    assert tries.calls == 6
    first = C.MAINTENANCE_INTERVAL_S
    assert stop.pauses == [first, *(max(first, p) for p in doubling(first, 6))]
    assert names == ["maintenance_failed"]


def test_rqs_loop_is_started_again_after_a_growing_pause(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """RQ's loop that keeps quitting at once (Redis busy as it is made) is started again after a pause that
    doubles each time, and not at all once it stops on a signal."""

    class Stops:
        _shutdown_requested_date = "now"  # as SIGTERM leaves it

        def work(self, **_: object) -> bool:
            return True

    tries = Tries([redis.ResponseError(BUSY)] * 7)

    def planning_worker(store: object, name: str) -> Stops:
        tries(store, name)
        return Stops()

    monkeypatch.setattr(runner, "planning_worker", planning_worker)
    pauses: list[float] = []
    runner._work(None, "test", burst=False, sleep=pauses.append)  # type: ignore[arg-type]
    assert tries.calls == 8
    assert pauses == doubling(C.RQ_RESTART_S, 7)
