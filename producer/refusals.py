"""What the server's ACL refused modelplan's logins: an agent writing another node's record, a client
appending to another client's stream. Redis keeps these in ``ACL LOG`` (the last 128 by default, each with
a count). Only the operator's login (``{prefix}.operator``) or one with no user name (the ``default``
user) asks for them: any other would be refused, and its refusal would itself go into the log.

The log keeps a refusal until it is reset (``ACL LOG RESET``) or 128 later ones push it out, so ``modelplan
status`` shows only those of the last hour (``recent_refusals``), and says since when; the metrics count
the whole log."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis

from worker.keys import Keys
from worker.scripts import text


@dataclass(frozen=True, slots=True)
class Refusal:
    """One kind of refusal: who, what (``key`` or ``command``) and on which key or command, how often."""

    user: str
    reason: str
    target: str
    count: int

    def line(self) -> str:
        what = {"key": "a key outside its rules", "command": "a command outside its rules"}.get(
            self.reason, self.reason
        )
        return f"refused by Redis: {self.user} tried {what} ({self.target}), {self.count} time(s)"


RECENT_REFUSALS_S = 3600.0
"""How far back ``modelplan status`` shows the ACL log's refusals: an hour, said as "the last hour"."""


@dataclass(frozen=True, slots=True)
class Recent:
    """The refusals last seen since ``since``, and how many kinds of refusal the log holds only from before."""

    shown: list[Refusal]
    since: datetime
    older: int
    within_s: float = RECENT_REFUSALS_S

    def lines(self) -> list[str]:
        """A heading saying since when, then one line for each kind; nothing when none is that recent."""
        if not self.shown:
            return []
        older = f"; {self.older} older in the log, which ACL LOG RESET clears" if self.older else ""
        span = "the last hour" if self.within_s == 3600 else f"the last {self.within_s:g} s"
        head = f"ACL refusals since {self.since.isoformat(timespec='seconds')} ({span}{older}):"
        return [head, *(f.line() for f in self.shown)]


def _entries(r: redis.Redis, keys: Keys) -> list[tuple[tuple[str, str, str], int, float]] | None:
    """The ACL LOG's entries of users under ``keys``' prefix: (user, reason, target), count, seconds since
    it was last seen; None when this login may not read the log."""
    user = r.connection_pool.connection_kwargs.get("username")
    if user not in (None, "", "default", f"{keys.prefix}.operator"):
        return None
    try:
        entries: Any = r.acl_log()
    except (redis.exceptions.NoPermissionError, redis.exceptions.ResponseError):
        return None
    out = []
    for e in entries:
        user = text(e.get("username", ""))
        if not user.startswith(keys.prefix + "."):
            continue
        k = (user, text(e.get("reason", "")), text(e.get("object", "")))
        out.append((k, int(e.get("count", 1)), float(e.get("age-seconds", 0.0))))
    return out


def _grouped(entries: list[tuple[tuple[str, str, str], int, float]]) -> list[Refusal]:
    found: dict[tuple[str, str, str], int] = {}
    for k, n, _ in entries:
        found[k] = found.get(k, 0) + n
    return sorted((Refusal(*k, n) for k, n in found.items()), key=lambda f: (-f.count, f.user, f.target))


def refusals(r: redis.Redis, keys: Keys) -> list[Refusal] | None:
    """The ACL LOG's entries of users under ``keys``' prefix, most frequent first; None when this login may
    not read the log."""
    entries = _entries(r, keys)
    return None if entries is None else _grouped(entries)


def recent_refusals(
    r: redis.Redis, keys: Keys, within_s: float = RECENT_REFUSALS_S, now: float | None = None
) -> Recent | None:
    """The refusals the log last saw in the ``within_s`` seconds before ``now`` (this machine's clock, the
    default), most frequent first, and how many kinds are there only from before; None when this login may
    not read the log. An entry's age is the server's own count, so the two clocks need not agree."""
    entries = _entries(r, keys)
    if entries is None:
        return None
    shown = _grouped([e for e in entries if e[2] <= within_s])
    kinds = {k for k, _, _ in entries} - {(f.user, f.reason, f.target) for f in shown}
    since = datetime.fromtimestamp((time.time() if now is None else now) - within_s, UTC)
    return Recent(shown, since, len(kinds), within_s)
