"""Records that do not parse: reported once, counted where operators look, and kept out of everyone else's
way.

A record modelplan cannot read (a node's heartbeat, a hold, a job, an index member) must not stall the
pool: the store's readers leave an unreadable node out of the pool (as a silent one is), keep an unreadable
hold's node fully taken, and hand an unreadable job back as ``BadRecord`` for the caller to mark failed, or
to leave alone when a newer modelplan wrote it. Each is logged once per record bytes (by this process, and
not at all when another already counted the same bytes) and counted in the ``quarantine`` hash, which
``modelplan status`` shows and the sweep clears once the record is fixed or gone.
"""

from __future__ import annotations

import hashlib
import json
import time
from datetime import datetime
from typing import Any

import redis

from worker import logs
from worker.errors import BadRecord
from worker.keys import Keys
from worker.records import utcnow
from worker.scripts import text

log = logs.get_logger("modelplan.worker")

_logged: set[tuple[str, str, str]] = set()
"""(prefix, key, digest) of each record this process has logged."""
_counted: dict[tuple[str, str, str], float] = {}
"""When this process last saw each record counted in ``quarantine`` (monotonic seconds)."""
LOGGED_MAX = 10_000
"""Records remembered before the memory is dropped: past it a record may be logged once more."""
RECOUNT_S = 30.0
"""How long a process trusts that a record it saw counted still is: the count is looked at again after
this (it is lost with a Redis restart without persistence), at one read per bad record."""


def forget() -> None:
    """Drop what this process remembers having logged and counted."""
    _logged.clear()
    _counted.clear()


def digest(raw: bytes | str) -> str:
    return hashlib.sha256(raw.encode() if isinstance(raw, str) else raw).hexdigest()[:16]


def entry(bad: BadRecord, action: str, at: datetime) -> str:
    """The ``quarantine`` hash's value for ``bad``, found at ``at``."""
    return json.dumps(
        {
            "key": bad.container,
            "member": bad.member,
            "digest": digest(bad.raw),
            "what": bad.what,
            "action": action,
            "at": at.isoformat(timespec="seconds"),
        }
    )


def logged(keys: Keys, bad: BadRecord, action: str) -> bool:
    """Log ``bad`` unless this process already has for the same bytes; True when it logged now."""
    seen = (keys.prefix, bad.key, digest(bad.raw))
    if seen in _logged:
        return False
    if len(_logged) >= LOGGED_MAX:
        _logged.clear()
    _logged.add(seen)
    log.warning("record_unreadable", key=bad.key, what=bad.what, action=action)
    return True


def report(client: redis.Redis, keys: Keys, bad: BadRecord, action: str) -> None:
    """Count ``bad`` in ``quarantine`` and log it: logged once for its bytes by whichever process counted
    it first, and counted again should the count be lost."""
    seen = (keys.prefix, bad.key, digest(bad.raw))
    now = time.monotonic()
    if now - _counted.get(seen, -RECOUNT_S) < RECOUNT_S:
        return
    if len(_counted) >= LOGGED_MAX:
        _counted.clear()
    _counted[seen] = now
    try:
        prev = client.hget(keys.quarantine, bad.key)
        known = prev is not None and json.loads(prev).get("digest") == seen[2]
        if not known:
            client.hset(keys.quarantine, bad.key, entry(bad, action, utcnow()))
    except (redis.ResponseError, ValueError, AttributeError):  # a read-only login, or a mangled entry
        known = False
    if known:
        _logged.add(seen)
    else:
        logged(keys, bad, action)


def entries(client: redis.Redis, keys: Keys) -> dict[str, dict[str, Any]]:
    """What ``quarantine`` counts now: each record's key with what is wrong and what was done."""
    out: dict[str, dict[str, Any]] = {}
    for key, value in client.hgetall(keys.quarantine).items():
        try:
            got = json.loads(value)
        except ValueError:
            got = None
        out[text(key)] = got if isinstance(got, dict) else {"what": "(entry does not parse)", "action": ""}
    return out


def still_bad(client: redis.Redis, found: dict[str, Any]) -> bool:
    """Whether the record an entry counts is still there with the same bytes."""
    key, member, want = found.get("key"), found.get("member"), found.get("digest")
    if not isinstance(key, str):
        return False
    kind = text(client.type(key))
    if kind == "string":
        raw = client.get(key)
        return raw is not None and member is None and digest(raw) == want
    if not isinstance(member, str):
        return False
    if kind == "hash":
        value = client.hget(key, member)
        return value is not None and digest(value) == want
    if kind == "zset":
        return client.zscore(key, member) is not None
    if kind == "set":
        return bool(client.sismember(key, member))
    return False


def prune(client: redis.Redis, keys: Keys) -> int:
    """Drop the entries whose record was fixed or is gone; how many were dropped."""
    gone = [key for key, found in entries(client, keys).items() if not still_bad(client, found)]
    if gone:
        client.hdel(keys.quarantine, *gone)
    return len(gone)
