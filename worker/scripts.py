"""The Lua scripts in ``worker/lua/``, registered once per Redis client."""

from __future__ import annotations

import weakref
from functools import cache
from importlib import resources
from typing import Any

import redis
from redis.commands.core import Script

NAMES = (
    "transition",
    "claim",
    "heartbeat",
    "take_wake",
    "quarantine_job",
    "recount_pending",
    "reclaim_holds",
    "signal_pass",
)

PRELUDES: dict[str, tuple[str, ...]] = {
    "transition": ("key_types", "pending_counts"),
    "claim": ("key_types", "pending_counts"),
    "heartbeat": ("key_types",),
    "quarantine_job": ("pending_counts",),
    "recount_pending": ("pending_counts",),
}
"""The files put before a script's own text: functions it shares with others (Redis runs each script
alone, so a shared function travels in each)."""

_registered: weakref.WeakKeyDictionary[Any, dict[str, Script]] = weakref.WeakKeyDictionary()


@cache
def source(name: str) -> str:
    """A script's text as Redis runs it: its preludes, then its own file."""
    return "".join(_file(part) + "\n" for part in PRELUDES.get(name, ())) + _file(name)


def _file(name: str) -> str:
    return resources.files("worker").joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


def script(client: redis.Redis, name: str) -> Script:
    """``name``'s script on ``client``: EVALSHA, loading it again if the server lost it (a restart)."""
    scripts = _registered.get(client)
    if scripts is None:
        scripts = _registered[client] = {n: client.register_script(source(n)) for n in NAMES}
    return scripts[name]


def text(value: Any) -> str:
    """A script's reply as text."""
    return value.decode() if isinstance(value, bytes) else str(value)
