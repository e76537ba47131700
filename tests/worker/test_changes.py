"""The entries of ``pool:changes`` as one model: every field a script writes onto the change feed is one
``worker.changes`` reads, and each kind of entry reads as that kind."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from worker import constants as C
from worker.changes import WIRE, ChangeKind, PoolChange, gone_fields, parse_change

LUA = Path(__file__).resolve().parents[2] / "worker" / "lua"
FEED = "pool:changes"


def arguments(rest: str) -> list[str]:
    """The arguments of a call's text up to its closing parenthesis, split at the commas outside any
    parenthesis or quotes (``table.concat(ids, ' ')`` is one)."""
    out, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(rest):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            if depth == 0:
                out.append(rest[start:i].strip())
                return out
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(rest[start:i].strip())
            start = i + 1
    raise AssertionError(f"a call that does not close on its line: {rest}")


def feed_writes(text: str) -> list[list[str]]:
    """The field names of each ``XADD`` a script's text makes onto the change feed: the KEYS slot its
    header names ``pool:changes``, each call on that slot, its literal field names after the ``*`` id."""
    header = "\n".join(line for line in text.splitlines() if line.startswith("--"))
    slots = re.findall(r"KEYS\[(\d+)\]\s+" + re.escape(FEED) + r"(?![:\w])", header)
    out = []
    for slot in slots:
        for call in re.finditer(r"redis\.call\('XADD',\s*KEYS\[" + slot + r"\],(?P<rest>[^\n]*)", text):
            rest = call["rest"]
            after = rest.split("'*',", 1)
            assert len(after) == 2, f"an XADD on {FEED} without an id of '*': {call.group(0)}"
            names = arguments(after[1])[0::2]
            assert all(n.startswith("'") and n.endswith("'") for n in names), f"a field name not literal: {rest}"
            out.append([n.strip("'") for n in names])
    return out


def test_the_reader_finds_a_feed_write() -> None:
    text = "-- KEYS[3] pool:changes\nredis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[1], '*', 'n', id, 'gone', '1')\n"
    assert feed_writes(text) == [["n", "gone"]]
    text = "-- KEYS[3] pool:changes\nredis.call('XADD', KEYS[3], '*', 'ns', table.concat(ids, ', '), 't', ttl)\n"
    assert feed_writes(text) == [["ns", "t"]]
    assert feed_writes("-- KEYS[3] pool:changes:other\nredis.call('XADD', KEYS[3], '*', 'x', 1)\n") == []


def test_every_field_a_script_writes_on_the_feed_is_one_the_model_reads() -> None:
    fields = {f.name for f in dataclasses.fields(PoolChange)}
    assert set(WIRE.values()) <= fields, "WIRE names a field PoolChange does not have"
    written = {p.name: feed_writes(p.read_text(encoding="utf-8")) for p in sorted(LUA.glob("*.lua"))}
    calls = [(name, names) for name, writes in written.items() for names in writes]
    assert len(calls) >= 5, f"fewer XADDs on {FEED} found than the scripts make: {calls}"
    unknown = sorted({(name, n) for name, names in calls for n in names if n not in WIRE})
    assert not unknown, f"fields written on {FEED} that worker.changes does not read: {unknown}"
    assert set(gone_fields("a")) <= WIRE.keys()


@pytest.mark.parametrize(
    ("fields", "want"),
    [
        ({b"n": b"a", b"r": b"{}", b"t": b"5000"}, PoolChange("7-0", ChangeKind.HEARTBEAT, "a")),
        ({b"n": b"a", b"gone": b"1"}, PoolChange("7-0", ChangeKind.GONE, "a")),
        ({b"ns": b"a b", b"t": b"5000"}, PoolChange("7-0", ChangeKind.REFRESHES, refreshed="a b", lapses_at_ms=5007)),
        ({b"n": b"a", b"t": b"5000"}, PoolChange("7-0", ChangeKind.REFRESHES, refreshed="a", lapses_at_ms=5007)),
        ({b"ns": b"a", b"t": b"soon"}, PoolChange("7-0", ChangeKind.REFRESHES, refreshed="a")),
        (
            {b"n": b"a", b"h": b"j:0:1", b"v": b"{}"},
            PoolChange("7-0", ChangeKind.HOLD, "a", hold_id="j:0:1", hold=b"{}"),
        ),
        ({b"n": b"a", b"h": b"j:nominated", b"v": b""}, PoolChange("7-0", ChangeKind.HOLD, "a", hold_id="j:nominated")),
        ({b"n": b"a", b"h": b"not a hold", b"v": b""}, PoolChange("7-0", ChangeKind.NONE)),
        ({b"n": b"no such node", b"gone": b"1"}, PoolChange("7-0", ChangeKind.NONE)),
        ({b"n": b"x" * 129, b"r": b"{}", b"t": b"1"}, PoolChange("7-0", ChangeKind.NONE)),
        ({b"ns": b"a " * C.REFRESHES_MAX_BYTES, b"t": b"1"}, PoolChange("7-0", ChangeKind.NONE)),
        ({b"n": b"a"}, PoolChange("7-0", ChangeKind.NONE)),
    ],
)
def test_each_kind_of_entry_reads_as_that_kind(fields: dict[bytes, bytes], want: PoolChange) -> None:
    assert parse_change("7-0", fields) == want
