"""What the Lua scripts in ``worker/lua`` answer: every code a script returns, named once.

A script's reply is a table whose first element is a code (``transition.lua``: ``{code, detail, wake}``;
``heartbeat.lua``: one code for each heartbeat); Python reads each through ``Reply.of`` and compares
members, never the bare text. ``tests/worker/test_script_replies.py`` reads every code the scripts can
return from their files and fails on one this enum lacks.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class Reply(StrEnum):
    """A code a script returns. Beside each: which scripts return it."""

    OK = "ok"
    """Done as asked (``transition``, ``quarantine_job``; ``heartbeat``: the heartbeat was stored)."""
    STALE = "stale"
    """``transition``: the record is no longer at the version the change was made from (detail: the
    version now, or ``unreadable``). ``heartbeat``: older than the heartbeat stored of its boot (or of a
    boot another took the place of, sent before that): nothing changed."""
    GONE = "gone"
    """``transition``, ``claim``: the job has no record."""
    FULL = "full"
    """``transition``: a node lacks the room for a hold (detail: the node); nothing written."""
    SILENT = "silent"
    """``transition``: a node has no live heartbeat that decodes (detail: the node); nothing written."""
    WRONGTYPE = "wrongtype"
    """``transition``, ``claim``, ``quarantine_job``, ``heartbeat``, ``reclaim_holds``: a key the call
    would write holds another type (detail: the key); nothing written."""
    PLANNING = "planning"
    """``claim``: the queued job was taken into planning (with the record as now stored)."""
    AS_IS = "as_is"
    """``claim``: not a queued record in the layout the script rewrites; returned as stored, untouched."""
    CHANGED = "changed"
    """``quarantine_job``: the record is no longer what was read; nothing written."""
    BAD = "bad"
    """``heartbeat``: the record does not decode; nothing stored (modelplan never sends one)."""
    CONFLICT = "conflict"
    """``heartbeat``: refused, two agents publish under its node id (``conflict:{node_id}`` says which
    boots); the node is out of the pool until one alone has been heard for ``CONFLICT_CLEAR_MS``."""
    UNREADABLE = "unreadable"
    """``transition``'s detail beside ``stale``: the stored record does not decode."""

    @classmethod
    def of(cls, value: Any) -> Reply:
        """The code a script returned (bytes or text); ``ValueError`` naming it when this version of
        modelplan does not know it (a script of another version answered)."""
        found = _BY_TEXT.get(value)
        if found is None:
            code = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
            raise ValueError(f"a script replied {code[:40]!r}, which is none of {', '.join(cls)}")
        return found


_BY_TEXT: dict[Any, Reply] = {**{r.value: r for r in Reply}, **{r.value.encode(): r for r in Reply}}
"""Each code by its text and by its bytes (as a client that does not decode replies gets it): a lookup
for each heartbeat of a batch, rather than a decode and an enum call."""
