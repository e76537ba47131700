"""What the server's ACL refused modelplan's logins: an agent writing another node's record, a client
appending to another client's stream. Redis keeps these in ``ACL LOG`` (the last 128 by default, each with
a count). Only the operator's login (``{prefix}.operator``) or one with no user name (the ``default``
user) asks for them: any other would be refused, and its refusal would itself go into the log."""

from __future__ import annotations

from dataclasses import dataclass
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


def refusals(r: redis.Redis, keys: Keys) -> list[Refusal] | None:
    """The ACL LOG's entries of users under ``keys``' prefix, most frequent first; None when this login may
    not read the log."""
    user = r.connection_pool.connection_kwargs.get("username")
    if user not in (None, "", "default", f"{keys.prefix}.operator"):
        return None
    try:
        entries: Any = r.acl_log()
    except (redis.exceptions.NoPermissionError, redis.exceptions.ResponseError):
        return None
    found: dict[tuple[str, str, str], int] = {}
    for e in entries:
        user = text(e.get("username", ""))
        if not user.startswith(keys.prefix + "."):
            continue
        k = (user, text(e.get("reason", "")), text(e.get("object", "")))
        found[k] = found.get(k, 0) + int(e.get("count", 1))
    return sorted((Refusal(*k, n) for k, n in found.items()), key=lambda f: (-f.count, f.user, f.target))
