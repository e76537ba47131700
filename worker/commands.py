"""A worker's command channel (``{RQ_KEY_PREFIX}:pubsub:{worker name}``, where RQ's
``send_shutdown_command``, ``send_kill_horse_command`` and ``send_stop_job_command`` reach it), read on a
thread of its own that stops as soon as it is told.

RQ 3.0 reads the channel with redis-py's ``PubSub.run_in_thread`` (reads that time out after 60 s) and stops
that thread by sending UNSUBSCRIBE, then clearing the thread's running flag and joining it: the reply to
UNSUBSCRIBE is to wake the read, after which the thread finds its flag cleared. When the thread takes the
reply first, before the flag is cleared, it goes round again and finds itself subscribed to nothing, and
``PubSub.get_message`` then waits for a subscription for the whole read time (60 s). redis-py 8.2's
``PubSubWorkerThread.stop`` joins the thread without a time limit, so the worker took that minute to stop;
under 8.1 RQ's own join gives up after a second and leaves the thread waiting behind it.

Here the thread is told to stop before UNSUBSCRIBE is sent, and it reads only while subscribed: whichever
it sees first, the reply ends it. Its connection is closed by whichever of the thread and the stopper is
done with it last, so it is never closed under a read, nor used once closed."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import redis
from redis.client import PubSub

from worker import constants as C
from worker import retry

READ_S = 60.0
"""How long one read of the channel waits for a message (RQ's own wait); a stop does not wait for it."""
STOP_WAIT_S = 1.0
"""How long a stop waits for the thread to take the reply to its UNSUBSCRIBE, which comes in a round trip;
past it (Redis away) the thread is left to end by itself, at its next read that fails or times out."""


class CommandListener(threading.Thread):
    """The reader of one worker's command channel (``listen`` starts it); ``stop`` ends it."""

    def __init__(self, pubsub: PubSub, worker: str) -> None:
        super().__init__(name=f"commands:{worker}", daemon=True)
        self.pubsub = pubsub
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._done: set[str] = set()

    def run(self) -> None:
        outage = retry.Outage("commands")
        backoff = retry.Backoff(C.RETRY_FIRST_S)
        try:
            # while subscribed: once the reply to UNSUBSCRIBE is taken, ``get_message`` would wait out READ_S
            while not self._stopping.is_set() and self.pubsub.subscribed:
                try:
                    self.pubsub.get_message(ignore_subscribe_messages=True, timeout=READ_S)
                    outage.over()
                    backoff.succeeded()
                except Exception as e:  # Redis away (redis-py subscribes again as it reconnects), or a command
                    if self._stopping.is_set():  # that failed: tried again after a pause, unless stopping
                        return
                    outage.failed(e)
                    self._stopping.wait(backoff.failed())
        finally:
            self._release("reader")

    def stop(self, *, wake: bool = True) -> None:
        """Stop reading. ``wake``: send UNSUBSCRIBE, whose reply wakes the read now, and wait for the thread
        (up to ``STOP_WAIT_S``); without it, or where Redis does not take the command, the thread ends at
        its next read that fails or times out."""
        self._stopping.set()
        try:
            if wake and self.is_alive() and threading.current_thread() is not self:
                try:
                    unsubscribe: Any = self.pubsub.unsubscribe  # untyped in some redis-py releases
                    unsubscribe()
                except redis.RedisError:
                    return
                self.join(STOP_WAIT_S)
        finally:
            self._release("stopper")

    def _release(self, party: str) -> None:
        with self._lock:
            self._done.add(party)
            if self._done == {"reader", "stopper"}:
                self.pubsub.close()


def listen(
    connection: redis.Redis, channel: str, handler: Callable[[dict[str, Any]], None], worker: str
) -> CommandListener:
    """Subscribe to ``channel`` on a connection of ``connection``'s pool and hand each message to
    ``handler``, on a thread started here."""
    make_pubsub: Any = connection.pubsub  # untyped in some redis-py releases
    pubsub: PubSub = make_pubsub()
    try:
        pubsub.subscribe(**{channel: handler})
    except BaseException:
        pubsub.close()
        raise
    listener = CommandListener(pubsub, worker)
    listener.start()
    return listener
