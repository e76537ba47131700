"""Which workers are running: each keeps a registration of its own under the prefix, so that a person (or
a scrape) can tell a job queued behind a busy worker from a job that no worker will ever take.

A worker renews ``worker:{name}`` (TTL ``WORKER_TTL_MS``) in the pipeline that renews its registration
with RQ, about once a second while its loop runs, and names itself in ``workers``; it deletes both when it
stops. A worker killed outright stops renewing, and is no longer counted once the TTL lapses. RQ keeps
registrations of its own, but under ``RQ_KEY_PREFIX``, which a reader cannot know, and its count deletes
as it reads; these are read with GET-like commands alone (SMEMBERS, MGET), and only a worker writes them.
"""

from __future__ import annotations

from typing import Any

import redis

from worker import constants as C
from worker.ids import ID_PATTERN
from worker.keys import Keys


def beat(pipe: Any, keys: Keys, name: str, started: str) -> None:
    """Renew ``name``'s registration (``started``: when it started, ISO 8601), in ``pipe``."""
    pipe.set(keys.worker(name), started, px=C.WORKER_TTL_MS)
    pipe.sadd(keys.workers, name)


def gone(r: redis.Redis, keys: Keys, name: str) -> None:
    """``name`` stops: no longer counted, at once."""
    with r.pipeline(transaction=False) as pipe:
        pipe.delete(keys.worker(name))
        pipe.srem(keys.workers, name)
        pipe.execute()


def _named(r: redis.Redis, keys: Keys) -> list[str]:
    names = sorted(n.decode() if isinstance(n, bytes) else str(n) for n in r.smembers(keys.workers))
    return [n for n in names if ID_PATTERN.fullmatch(n)]  # a name no worker could have is not one


def alive(r: redis.Redis, keys: Keys) -> list[str]:
    """The names of the workers whose registration has not lapsed, sorted."""
    names = _named(r, keys)
    if not names:
        return []
    found = r.mget([keys.worker(n) for n in names])
    return [n for n, v in zip(names, found, strict=True) if v is not None]


def prune(r: redis.Redis, keys: Keys) -> None:
    """Drop from ``workers`` the names whose registration lapsed (a worker that was killed), and any that
    is no id; done as a worker starts, so that the set holds no more than the workers since the last
    start."""
    raw = {n.decode() if isinstance(n, bytes) else str(n) for n in r.smembers(keys.workers)}
    living = set(alive(r, keys))
    dead = sorted(raw - living)
    if dead:
        r.srem(keys.workers, *dead)
