"""A worker's intake: the one way from what a node's login wrote to the state workers share.

A node agent's (or relay's) login may write only its own node's keys (``producer.roles``): the heartbeat
function, run with its rights, sets the node's record when what it reports changes and moves only its TTL
on a refresh. The server itself announces each such write, and each expiry, on the node key's keyspace
channel (``notify-keyspace-events``: ``K$x``, which ``modelplan setup-redis`` turns on), a channel no
login of a node may publish on (its ACL rule grants no channel at all): a doorbell that cannot be forged,
and that a node can ring only for itself. Each worker subscribes to the node records' and conflict
records' channels and runs ``intake.lua`` (with its own rights) for the nodes rung, a batch at a time: the
change feed, the index of nodes, the epoch and wake-ups, restarts, conflicts and counters are written by
workers alone. What was taken of each node is kept (``taken``), so that several workers rung for one
change do its work once.

A notification is heard only by whoever listens at that moment. So a worker that (re)subscribes takes
every node in, in full (``reconcile``: the node and conflict records there are, and the nodes taken
before); and on starting it checks that notifications arrive, by setting a key of its own (``probe:``)
and waiting for its set and expiry to be announced. When they do not, it says so once, loudly (the
setting, and ``modelplan setup-redis``), and reconciles in full every ``INTAKE_RECONCILE_S`` instead,
checking again now and then. The sweep finds a node whose record lapsed but was not yet expired by the
server (``Store.silent_nodes`` asks for it, which expires it, and hands its jobs on).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable
from typing import Any

import redis

from worker import constants as C
from worker import logs, retry
from worker.ids import ID_PATTERN
from worker.keys import Keys
from worker.store import Store

log = logs.get_logger("modelplan.intake")

SCAN_COUNT = 1000
PROBE_EVENTS = frozenset({b"set", b"expired"})


def _text(v: Any) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def node_ids(keys: Keys, db: int, channels: Iterable[Any]) -> set[str]:
    """The nodes whose record or conflict record the keyspace ``channels`` name, in database ``db``; a
    channel of another database, another key or an id that is no id names none."""
    out: set[str] = set()
    head = f"__keyspace@{db}__:"
    for channel in channels:
        key = _text(channel)
        if not key.startswith(head):
            continue
        key = key[len(head) :]
        for prefix in (keys.node_prefix, keys.conflict_prefix):
            if key.startswith(prefix):
                node_id = key[len(prefix) :]
                if ID_PATTERN.fullmatch(node_id):
                    out.add(node_id)
    return out


def reconcile(store: Store) -> int:
    """Take every node in: those with a record or a conflict record, and those taken before (their record
    gone since, unheard). How many nodes were looked at."""
    k, r = store.keys, store.redis
    ids: set[str] = set()
    for prefix in (k.node_prefix, k.conflict_prefix):
        for key in r.scan_iter(match=prefix + "*", count=SCAN_COUNT):
            node_id = _text(key)[len(prefix) :]
            if ID_PATTERN.fullmatch(node_id):
                ids.add(node_id)
    ids.update(i for i in map(_text, r.hkeys(k.taken)) if ID_PATTERN.fullmatch(i))
    if ids:
        store.intake(sorted(ids))
    return len(ids)


class Intake:
    """One worker's intake: its subscription, and whether notifications arrive."""

    def __init__(self, store: Store, name: str, stop: threading.Event) -> None:
        self.store = store
        self.name = name
        self.stop = stop
        self.db = int(store.redis.connection_pool.connection_kwargs.get("db", 0) or 0)
        self.notified: bool | None = None
        """Whether keyspace notifications arrive: None until checked."""
        self.said_off = False
        self.pubsub: Any = None
        self.started: Any = None
        """Called once each (re)start succeeded: the outage, if any, is over."""

    def subscribe(self) -> None:
        k = self.store.keys
        self.pubsub = self.store.redis.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
        self.pubsub.psubscribe(*k.keyspace_patterns())
        self.pubsub.subscribe(k.probe_channel(self.db, self.name))

    def close(self) -> None:
        if self.pubsub is not None:
            with contextlib.suppress(redis.RedisError):
                self.pubsub.close()
            self.pubsub = None

    def probe(self, rung: set[str]) -> bool:
        """Set this worker's own key and see whether its set and its expiry are announced: whether keyspace
        notifications arrive. What else is heard meanwhile is added to ``rung``."""
        k, r = self.store.keys, self.store.redis
        key, channel = k.probe(self.name), k.probe_channel(self.db, self.name)
        r.set(key, "1", px=1)
        time.sleep(0.005)
        r.exists(key)  # lapsed: asking has the server expire it, and announce that
        heard: set[bytes] = set()
        until = time.monotonic() + C.INTAKE_PROBE_WAIT_S
        while heard != PROBE_EVENTS and time.monotonic() < until:
            message = self.pubsub.get_message(timeout=max(until - time.monotonic(), 0.0))
            if message is None:
                continue
            if _text(message.get("channel")) == channel:
                data = message.get("data")
                heard.add(data if isinstance(data, bytes) else str(data).encode())
            else:
                rung |= node_ids(k, self.db, [message.get("channel")])
        on = heard >= PROBE_EVENTS
        if not on and not self.said_off:
            log.error(
                "keyspace_notifications_off",
                setting="notify-keyspace-events",
                needs=C.NOTIFY_FLAGS,
                fix="run `modelplan setup-redis` as the operator (it adds the flags and keeps the others)",
                fallback=f"every node reconciled in full every {C.INTAKE_RECONCILE_S:g} s",
                worker=self.name,
            )
            self.said_off = True
        elif on and self.said_off and self.notified is False:
            log.info("keyspace_notifications_on", worker=self.name)
            self.said_off = False
        self.notified = on
        return on

    def start(self) -> None:
        """(Re)subscribe, check notifications, and take every node in."""
        self.close()
        self.subscribe()
        rung: set[str] = set()
        self.probe(rung)
        reconcile(self.store)
        if self.started is not None:
            self.started()

    def run(self) -> None:
        """Take in what is rung until ``stop``; in full every ``INTAKE_RECONCILE_S`` while notifications
        are off, checking them again every tenth time."""
        self.start()
        last = time.monotonic()
        rounds = 0
        while not self.stop.is_set():
            rung: set[str] = set()
            wait = C.INTAKE_RECONCILE_S if self.notified is False else 0.5
            message = self.pubsub.get_message(timeout=wait)
            while message is not None and len(rung) < C.INTAKE_BATCH * 10:
                rung |= node_ids(self.store.keys, self.db, [message.get("channel")])
                message = self.pubsub.get_message(timeout=0.0)
            if rung:
                self.store.intake(sorted(rung))
            if self.notified is False and time.monotonic() - last >= C.INTAKE_RECONCILE_S:
                rounds += 1
                if rounds % 10 == 0 and self.probe(rung) and rung:
                    self.store.intake(sorted(rung))
                reconcile(self.store)
                last = time.monotonic()


def serve(url: str, keys: Keys, name: str, stop: threading.Event) -> None:
    """The worker's intake thread, until ``stop``. Redis away or busy is logged once and tried again after
    a pause (``retry.Outage``); each try subscribes again and takes every node in."""
    from worker.config import connect

    outage = retry.Outage("intake")
    backoff = retry.Backoff(C.OUTAGE_RETRY_S)
    intake = Intake(Store(connect(url), keys), name, stop)
    intake.started = outage.over
    while not stop.is_set():
        try:
            intake.run()
        except Exception as e:
            intake.close()
            outage.failed(e)
            stop.wait(backoff.failed())
        else:
            break
    intake.close()
