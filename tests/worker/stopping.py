"""Workers whose stops are watched: a stop in the order that RQ's reader of the command channel did not
survive, brought about on purpose, and a process that starts and stops workers one after another for a
test to watch (``python -m tests.worker.stopping REDIS_URL COUNT``).

The order: a stop sends UNSUBSCRIBE, and the reader of the channel takes the reply and goes round to read
again before the stop goes on to tell it to end. It came by chance, when the stopping thread lost the
CPU between the two; ``ReaderFirst`` waits for it."""

from __future__ import annotations

import faulthandler
import signal
import sys
import threading
import time
from typing import Any

from worker import jobs
from worker.config import connect
from worker.keys import Keys
from worker.runner import PlanningWorker, planning_worker

HOLD_S = 5.0
"""How long a stop waits for the reader to go first; the reader takes the reply within a round trip."""
WAIT_S = 30
"""How long the child's workers wait for a job at a time: SIGTERM comes while they wait, not as they
send the commands between two waits (a signal there can leave a reply unread on a connection)."""


class _Watched(threading.Event):
    """A pubsub's ``subscribed_event`` that tells when a reader waits on it unsubscribed: RQ's reader went
    back to read after the reply to UNSUBSCRIBE and waited there for a subscription."""

    def __init__(self, subscribed: bool) -> None:
        super().__init__()
        self.went_round = threading.Event()
        if subscribed:
            self.set()

    def wait(self, timeout: float | None = None) -> bool:
        if not self.is_set():
            self.went_round.set()
        return super().wait(timeout)


def reader_of(worker: PlanningWorker) -> threading.Thread:
    """The thread that reads ``worker``'s command channel (RQ's own where ``subscribe`` is RQ's)."""
    reader = getattr(worker, "listener", None) or worker.pubsub_thread
    assert isinstance(reader, threading.Thread), f"no reader of the command channel: {reader!r}"
    return reader


class ReaderFirst(PlanningWorker):
    """A worker whose stop lets the reader of its command channel take the reply to UNSUBSCRIBE and go
    round to read again, or end, before the stop goes on (while ``reader_first``)."""

    reader_first = True
    reader: threading.Thread | None = None
    """The thread that read its command channel, kept after it stops."""

    def subscribe(self) -> None:
        super().subscribe()
        pubsub, reader = self.pubsub, reader_of(self)
        assert pubsub is not None
        self.reader = reader
        if not self.reader_first:
            return
        watched = _Watched(pubsub.subscribed)
        pubsub.subscribed_event = watched  # the reader reads the attribute each time round
        unsubscribe: Any = pubsub.unsubscribe  # untyped in some redis-py releases

        def then_the_reader_first(*args: Any) -> Any:
            sent = unsubscribe(*args)
            deadline = time.monotonic() + HOLD_S
            while reader.is_alive() and not watched.went_round.wait(0.005) and time.monotonic() < deadline:
                pass
            return sent

        pubsub.unsubscribe = then_the_reader_first  # type: ignore[method-assign]


class _Told(ReaderFirst):
    """A worker of the child below: says on stdout when it waits for a job (with the id of its loop's
    connection, on which it waits) and when it stops."""

    number = 0

    @property
    def dequeue_timeout(self) -> int:
        return WAIT_S

    def dequeue_job_and_maintain_ttl(self, timeout: int | None, max_idle_time: int | None = None) -> Any:
        print(f"waiting {self.number} {self.connection.client_id()}", flush=True)
        return super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)

    def teardown(self) -> None:
        print(f"stopping {self.number}", flush=True)
        super().teardown()


def kinds(number: int) -> tuple[bool, bool]:
    """The ``number``th stop of the child: (burst, reader first). Each of the four in turn."""
    return number % 2 == 0, number % 4 < 2


def main(url: str, count: int) -> None:
    """Start ``count`` workers one after another on an empty queue in this process, each working until it
    stops: a burst that finds nothing to do, or SIGTERM from the parent while it waits for a job; and say
    ``stopped N`` once its ``work`` has returned."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the parent asks for the stacks of a stop that hangs
    for number in range(count):
        burst, first = kinds(number)
        connection = connect(url)  # each worker its own, as each process has
        worker = planning_worker(jobs.store_for(connection, Keys().prefix), _Told)
        assert isinstance(worker, _Told)
        worker.number, worker.reader_first = number, first
        worker.work(burst=burst, logging_level="WARNING")
        print(f"stopped {number}", flush=True)
        connection.close()
        connection.connection_pool.disconnect()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
