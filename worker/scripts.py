"""The Lua scripts in ``worker/lua/``, run as a Redis Functions library or, where a server has none, as
scripts.

Each script is one function of the library ``modelplan_{digest}`` (``library()``), named
``modelplan_{digest}_{script}``: the digest is the library's own text, so two versions of modelplan never
call each other's functions, and a new version's library is loaded beside the old one's. The operator
loads it once (``modelplan setup-redis``, as a login with ``FUNCTION LOAD``); clients, agents and workers
are then granted ``FCALL`` and no ``EVAL`` or ``SCRIPT`` at all, so that no login can run Lua of its own
on the server.

How a client runs them is found out on its first call (``MODELPLAN_SCRIPTS``: ``auto`` by default):
``FCALL`` when the library is there; loaded first where the login may load it (a development server's
default user); else ``EVALSHA`` of each script (Redis before 7.0, which has no functions, or a login
granted scripts rather than functions). A login that may do neither is told, in one line, to have the
library loaded.
"""

from __future__ import annotations

import hashlib
import os
import threading
import weakref
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any

import redis
from redis.commands.core import Script as EvalScript

from planner.errors import InvalidInput
from worker.errors import FunctionsMissing

NAMES = (
    "transition",
    "claim",
    "heartbeat",
    "intake",
    "take_wake",
    "quarantine_job",
    "recount_pending",
    "reclaim_holds",
    "signal_pass",
)

PRELUDES: dict[str, tuple[str, ...]] = {
    "transition": ("key_types", "pending_counts"),
    "claim": ("key_types", "pending_counts"),
    "intake": ("key_types",),
    "quarantine_job": ("key_types", "pending_counts", "wake_all"),
    "reclaim_holds": ("key_types", "wake_all"),
    "recount_pending": ("pending_counts",),
}
"""The files put before a script's own text: functions it shares with others (Redis runs each script
alone, so a shared function travels in each)."""

MODE_ENV = "MODELPLAN_SCRIPTS"
MODES = ("auto", "functions", "eval")
"""``functions``: FCALL only (a login without the library fails with one line); ``eval``: EVALSHA only
(a server before 7.0); ``auto``: functions where the server has them or the login may load them."""

LIBRARY_PREFIX = "modelplan_"


@cache
def source(name: str) -> str:
    """A script's text as Redis runs it: its preludes, then its own file."""
    return "".join(_file(part) + "\n" for part in PRELUDES.get(name, ())) + _file(name)


def _file(name: str) -> str:
    return resources.files("worker").joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


@cache
def library() -> tuple[str, str]:
    """The library's name and its code: each script the body of a function of the same arguments."""
    digest = hashlib.sha1("\0".join(source(n) for n in NAMES).encode(), usedforsecurity=False).hexdigest()[:12]
    name = f"{LIBRARY_PREFIX}{digest}"
    parts = [f"#!lua name={name}"]
    for n in NAMES:
        parts.append(f"local function {n}(KEYS, ARGV)\n{source(n)}\nend")
        parts.append(f"redis.register_function('{name}_{n}', {n})")
    parts.append(
        f"redis.register_function{{function_name='{name}_version', callback=function() return '{digest}' end, "
        "flags={'no-writes'}}"
    )
    return name, "\n".join(parts) + "\n"


def function_name(script_name: str) -> str:
    return f"{library()[0]}_{script_name}"


def load_library(client: redis.Redis) -> str:
    """Load this version's library on the server (``FUNCTION LOAD REPLACE``): its name."""
    name, code = library()
    client.function_load(code, replace=True)
    return name


def mode() -> str:
    value = os.environ.get(MODE_ENV, "auto").strip().lower() or "auto"
    if value not in MODES:
        raise InvalidInput(MODE_ENV, "(setting)", f"must be one of {', '.join(MODES)} (given {value[:40]!r})")
    return value


def _missing_function(error: BaseException) -> bool:
    return isinstance(error, redis.ResponseError) and "function not found" in str(error).lower()


def _unknown_command(error: BaseException) -> bool:
    return isinstance(error, redis.ResponseError) and "unknown command" in str(error).lower()


class Way:
    """How one Redis client runs the scripts: found out once, again when the server lost the library."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._lock = threading.Lock()
        self.functions: bool | None = None
        self.missing = False
        """The library was not found on the server and this login may not load it: a script this login
        may not run either is told as that (``FunctionsMissing``), not as a bare refusal."""
        self.evals = {n: EvalScript(client, source(n)) for n in NAMES}

    def resolve(self) -> bool:
        """Whether FCALL is the way (else EVALSHA), asking the server if not known yet."""
        if self.functions is not None:
            return self.functions
        with self._lock:
            if self.functions is None:
                self.functions = self._ask()
            return self.functions

    def forget(self) -> None:
        self.functions = None

    def _ask(self) -> bool:
        wanted = mode()
        if wanted == "eval":
            return False
        name = library()[0]
        try:
            self._client.fcall(f"{name}_version", 0)
            return True
        except redis.exceptions.NoPermissionError:
            if wanted == "functions":
                raise FunctionsMissing(name) from None
            return False
        except redis.ResponseError as e:
            if _unknown_command(e) and wanted == "auto":
                return False  # a server before 7.0
            if not _missing_function(e):
                raise
        try:
            load_library(self._client)
            return True
        except redis.exceptions.NoPermissionError:
            if wanted == "functions":
                raise FunctionsMissing(name) from None
            self.missing = True
            return False


_ways: weakref.WeakKeyDictionary[Any, Way] = weakref.WeakKeyDictionary()
_ways_lock = threading.Lock()


def _way(client: redis.Redis) -> Way:
    way = _ways.get(client)
    if way is None:
        with _ways_lock:
            way = _ways.get(client)
            if way is None:
                way = _ways[client] = Way(client)
    return way


class Script:
    """One script on one client: ``script(keys=, args=)`` runs it; ``queue`` adds it to a pipeline, whose
    reply ``lost`` tells apart from a server that no longer has it (run it again with ``script(...)``)."""

    def __init__(self, way: Way, name: str) -> None:
        self._way = way
        self.name = name

    def __call__(self, keys: Sequence[Any] = (), args: Sequence[Any] = (), client: Any = None) -> Any:
        if client is not None:  # a pipeline: queued, its reply comes with the pipeline's
            self.queue(client, keys, args)
            return client
        for attempt in range(2):
            try:
                if self._way.resolve():
                    return self._way._client.fcall(function_name(self.name), len(keys), *keys, *args)
                return self._eval(keys, args)
            except redis.ResponseError as e:
                if attempt or not _missing_function(e):
                    raise
                self._way.forget()  # the server lost the library (a restart without its files): again
        raise AssertionError("unreachable")

    def _eval(self, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        try:
            return self._way.evals[self.name](keys=list(keys), args=list(args))
        except redis.exceptions.NoPermissionError as e:
            if not self._way.missing:
                raise
            raise FunctionsMissing(library()[0]) from e

    def queue(self, pipe: Any, keys: Sequence[Any], args: Sequence[Any]) -> None:
        if self._way.resolve():
            pipe.fcall(function_name(self.name), len(keys), *keys, *args)
        else:
            pipe.evalsha(self._way.evals[self.name].sha, len(keys), *keys, *args)

    def lost(self, reply: Any) -> bool:
        """Whether a queued call's reply says the server ran nothing, having lost the script or library."""
        if isinstance(reply, redis.exceptions.NoScriptError):
            return True
        if _missing_function(reply):
            self._way.forget()
            return True
        return False


def script(client: redis.Redis, name: str) -> Script:
    """``name``'s script on ``client``."""
    if name not in NAMES:
        raise KeyError(name)
    return Script(_way(client), name)


def text(value: Any) -> str:
    """A script's reply as text."""
    return value.decode() if isinstance(value, bytes) else str(value)
