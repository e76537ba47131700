"""Every key a Lua script touches is handed to it in ``KEYS``: none is made inside a script (a prefix
concatenated with an id, or anything else), so that Redis knows each call's keys before it runs it (what
ACL rules check, and what Redis Cluster needs to route a call).

Two checks: the scripts are read, and each key a ``redis.call`` names must be ``KEYS[...]`` or a name
bound only to such keys; and each script runs, through its Python caller, with a guard put before every
``redis.call`` that refuses a key the call was not handed."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
import redis

from producer import Client
from tests.worker.helpers import drain, hb, request
from worker import constants as C
from worker import keys as keys_module
from worker import maintenance, scripts
from worker.errors import BadId, BadRecord
from worker.keys import Keys
from worker.records import JobRecord, JobState

KEYLESS = {"TIME"}
"""Commands the scripts run that take no key."""

CALL = re.compile(r"\bredis\.p?call\(\s*'(\w+)'\s*")
KEYS_ITEM = re.compile(r"KEYS\[[^\].]*\]")
"""``KEYS[...]`` with an index that holds no concatenation (``KEYS[13 + 2 * i]``)."""
NAME = re.compile(r"([A-Za-z_]\w*)(\[[^\]]*\])?")
STRING = re.compile(r"'[^']*'")
ASSIGNMENT = re.compile(r"^[ \t]*(?:local[ \t]+)?([A-Za-z_][\w \t,\[\]#+*-]*?)[ \t]*=(?!=)", re.M)
"""An assignment at the start of a line: its targets (``local a, b``, ``spec[#spec + 1]``)."""


def code_of(lua: str) -> str:
    """``lua`` without its comments (``--`` to the end of a line, outside a string)."""
    out = []
    for line in lua.splitlines():
        quoted, cut = False, len(line)
        for i, ch in enumerate(line):
            if ch == "'":
                quoted = not quoted
            elif not quoted and line.startswith("--", i):
                cut = i
                break
        out.append(line[:cut])
    return "\n".join(out)


def argument(code: str, start: int, line: bool = False) -> tuple[str, int]:
    """The expression at ``start`` up to the next ``,`` or closing bracket at its own depth (``line``: or
    the end of the line there, for the value of an assignment), and where it ends."""
    depth, i, quoted = 0, start, False
    while i < len(code):
        ch = code[i]
        if ch == "'":
            quoted = not quoted
        elif not quoted:
            if line and ch == "\n" and depth == 0:
                break
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                if depth == 0:
                    break
                depth -= 1
            elif ch == "," and depth == 0:
                break
        i += 1
    return code[start:i].strip(), i


def arguments(code: str, start: int, line: bool = False) -> list[str]:
    """The arguments of a call whose ``(`` is just before ``start`` (``line``: the values of an
    assignment, up to the end of its line at their depth)."""
    out = []
    i = start
    while True:
        arg, i = argument(code, i, line)
        if arg:
            out.append(arg)
        if i >= len(code) or code[i] != ",":
            return out
        i += 1


def table_items(expr: str) -> list[str] | None:
    """The items of a table constructor ``{a, b, ...}``; None when ``expr`` is not one."""
    if not (expr.startswith("{") and expr.endswith("}")):
        return None
    return arguments(expr[1:-1] + ")", 0)


class Reader:
    """One script's text (its preludes, then its file), read for the keys it names."""

    def __init__(self, lua: str) -> None:
        self.code = code_of(lua)
        self.functions = {
            m.group(1): [p.strip() for p in m.group(2).split(",") if p.strip()]
            for m in re.finditer(r"\blocal function (\w+)\(([^)]*)\)", self.code)
        }

    def keys_named(self) -> list[str]:
        """The key expression of every ``redis.call`` and ``redis.pcall`` that takes a key."""
        out = []
        for m in CALL.finditer(self.code):
            if m.group(1).upper() in KEYLESS:
                continue
            rest = self.code[m.end() :]
            assert rest.startswith(","), f"redis.call('{m.group(1)}' without a key"
            out.append(argument(self.code, m.end() + 1)[0])
        return out

    def is_key(self, expr: str, seen: frozenset[str] = frozenset()) -> bool:
        """Whether ``expr`` can only be a key from ``KEYS``: ``KEYS[...]``, or a name (or an item of a
        table) every binding of which is one."""
        if KEYS_ITEM.fullmatch(expr):
            return True
        m = NAME.fullmatch(expr)
        if m is None or ".." in expr:
            return False
        name, item = m.group(1), m.group(2) is not None
        if name in seen:
            return True
        seen |= {name}
        bindings = self.bindings(name)
        if not bindings:  # a parameter of a function this script never calls (a prelude's) is never given
            return any(name in params for params in self.functions.values())
        return all(self._bound_to_keys(b, item, seen) for b in bindings)

    def _bound_to_keys(self, value: str, item: bool, seen: frozenset[str]) -> bool:
        if not item:
            return self.is_key(value, seen)
        # a table of keys and their types (``wrong_type``'s spec): each item a key or a type's name
        items = table_items(value)
        if items is None:
            items = [value]  # an item set on its own (``spec[#spec + 1] = ...``), or the table passed on
        return all(STRING.fullmatch(i) or self.is_key(i, seen) for i in items)

    def bindings(self, name: str) -> list[str]:
        """What ``name`` is ever given: assignments (``local x = ...``, ``x = ...``, ``x[...] = ...``), and
        the argument in its place at every call of a function it is a parameter of."""
        out = []
        for m in ASSIGNMENT.finditer(self.code):
            targets = [t.strip() for t in m.group(1).split(",")]
            values = arguments(self.code, m.end(), line=True)
            for i, target in enumerate(targets):
                bound = NAME.fullmatch(target)
                if bound is not None and bound.group(1) == name:
                    # a value past the last given is nil, or one of several a call returns: not a key
                    out.append(values[i] if i < len(values) and len(values) >= len(targets) else "nil")
        if re.search(rf"\bfor\s+\w+\s*,\s*{name}\s+in\s+ipairs\(KEYS\)", self.code):
            out.append("KEYS[i]")
        for function, params in self.functions.items():
            if name in params:
                at = params.index(name)
                for call in re.finditer(rf"(?<!function )\b{function}\(", self.code):
                    args = arguments(self.code, call.end())
                    out.append(args[at] if at < len(args) else "nil")
        return out


@pytest.mark.parametrize("name", scripts.NAMES)
def test_every_key_a_script_names_comes_from_keys(name: str) -> None:
    reader = Reader(scripts.source(name))
    named = reader.keys_named()
    assert named, f"{name}.lua names no key"
    made = [k for k in named if not reader.is_key(k)]
    assert made == [], f"{name}.lua names keys not handed to it in KEYS: {made}"


@pytest.mark.parametrize(
    "lua",
    [
        "local node_prefix = ARGV[3]\nredis.call('GET', node_prefix .. ARGV[4])",
        "local key = ARGV[1] .. 'x'\nredis.call('HLEN', key)",
        "local function f(k) return redis.call('GET', k) end\nf(KEYS[1])\nf('mp:job:' .. ARGV[1])",
        "local spec = {KEYS[1], 'hash'}\nspec[#spec + 1] = ARGV[2] .. ':x'\n"
        "local function t(spec) return redis.call('TYPE', spec[1]) end\nt(spec)",
        "redis.call('GET', ARGV[1])",
        "local held_key, node_key = KEYS[1], ARGV[1] .. ':x'\nredis.call('HLEN', node_key)",
        "local node_key, held_key = KEYS[1]\nredis.call('HLEN', held_key)",
        "local key\nkey = KEYS[1]\nkey = key .. ':x'\nredis.call('GET', key)",
    ],
)
def test_the_reader_finds_a_key_made_in_the_script(lua: str) -> None:
    reader = Reader(lua)
    assert not all(reader.is_key(k) for k in reader.keys_named())


def test_the_reader_follows_keys_through_names_and_calls() -> None:
    lua = (
        "local function f(k, n) redis.call('HLEN', k) end\n"
        "local held_key = KEYS[4 + 2 * i]\nf(held_key, ARGV[1] .. 'x')\n"
        "local spec = {KEYS[2], 'stream'}\nspec[#spec + 1] = KEYS[3]\nredis.call('TYPE', spec[1])\n"
        "redis.call('TIME')\nlocal a, b = KEYS[1], KEYS[2]\nredis.call('GET', b)\n"
        "for _, key in ipairs(KEYS) do redis.call('TYPE', key) end"
    )
    reader = Reader(lua)
    assert reader.keys_named() == ["k", "spec[1]", "b", "key"]
    assert all(reader.is_key(k) for k in reader.keys_named())


GUARD = """
local handed = {}
for _, k in ipairs(KEYS) do handed[k] = true end
local function checked(command, key)
  if string.upper(command) ~= 'TIME' and not handed[key] then
    error('key not handed in KEYS: ' .. tostring(key) .. ' (' .. command .. ')')
  end
end
local function guarded_call(command, key, ...)
  checked(command, key)
  if key == nil then
    return redis.call(command)
  end
  return redis.call(command, key, ...)
end
local function guarded_pcall(command, key, ...)
  checked(command, key)
  return redis.pcall(command, key, ...)
end
"""


def guarded(lua: str) -> str:
    """``lua`` with every ``redis.call`` and ``redis.pcall`` refusing a key not in ``KEYS``."""
    return GUARD + re.sub(r"\bredis\.(p?)call\(", lambda m: f"guarded_{m.group(1)}call(", lua)


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> Iterator[set[str]]:
    """The scripts run with the guard, as scripts (``EVALSHA``): the names of those that ran."""
    plain = scripts.source
    monkeypatch.setattr(scripts, "source", lambda name: guarded(plain(name)))
    monkeypatch.setenv(scripts.MODE_ENV, "eval")
    names: set[str] = set()
    call, queue = scripts.Script.__call__, scripts.Script.queue

    def counted_call(self: scripts.Script, *a: object, **kw: object) -> object:
        names.add(self.name)
        return call(self, *a, **kw)  # type: ignore[arg-type]

    def counted_queue(self: scripts.Script, *a: object) -> None:
        names.add(self.name)
        queue(self, *a)  # type: ignore[arg-type]

    monkeypatch.setattr(scripts.Script, "__call__", counted_call)
    monkeypatch.setattr(scripts.Script, "queue", counted_queue)
    yield names


def test_the_guard_refuses_a_key_not_handed(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    lua = guarded("return redis.call('GET', ARGV[1] .. ':x')")
    with pytest.raises(redis.ResponseError, match="key not handed in KEYS: mp:job:1:x"):
        r.eval(lua, 0, "mp:job:1")
    assert r.eval(guarded("return redis.call('SET', KEYS[1], 'v')"), 1, "mp:x") == b"OK"
    r.close()


def test_every_script_run_by_its_caller_touches_only_the_keys_it_was_handed(
    redis_url: str, ran: set[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    client = Client.from_url(redis_url)
    k, r = client.keys, client.redis
    # heartbeats: nodes joining in a batch, a refresh, a change, a restart, then two agents on one id
    assert client.heartbeats([hb("gpu-1", gpus=2), hb("gpu-2"), hb("gpu-3")]) == [True, True, True]
    assert client.heartbeat(hb("gpu-1", gpus=2, seq=2))
    assert client.heartbeat(hb("gpu-2", free=0, seq=2))
    # jobs: claimed and placed by a worker, one left waiting, a wake-up pass, a release
    first = client.submit(request(replicas=2))
    drain(client)
    second = client.submit(request(replicas=2))  # one card left: a replica waits
    drain(client)
    assert client.get(first).state is JobState.PLACED
    client.store.signal_pass(full=True)
    classes, picked = client.store.take_wake(full=True)
    assert "*" in classes and [(j, rec.job_id if isinstance(rec, JobRecord) else rec) for j, rec in picked] == [
        (second, second)
    ]
    assert client.heartbeat(hb("gpu-1", gpus=2, seq=3, boot="boot-2"))  # a restart with holds on it
    assert client.heartbeat(hb("gpu-1", gpus=2, seq=4, boot="boot-1")) is False  # the old boot: a conflict
    assert client.publish(hb("gpu-1", gpus=2, seq=5, boot="boot-2")).value == "conflict"
    drain(client)
    client.release(first)
    assert client.store.recount_pending() == 1
    # a record that does not parse, failed with its hold freed; a hold no job owns, reclaimed
    r.set(k.job("ghost"), "not json")
    r.hset(k.held("gpu-3"), "ghost:0:1", json.dumps({"gpus": 1, "host_gb": 0, "boot_id": "boot-1"}))
    r.hset(k.held("gpu-3"), "nobody:0:1", json.dumps({"gpus": 1, "host_gb": 0, "boot_id": "boot-1"}))
    r.sadd(k.held_nodes, "gpu-3")
    bad = BadRecord(k.job("ghost"), "not a record", b"not json")
    assert client.store.fail_unreadable_job("ghost", bad)
    monkeypatch.setattr(C, "ORPHAN_GRACE_S", 0.0)
    state = maintenance.SweepState()
    maintenance.sweep(client.store, force=True, state=state)
    maintenance.sweep(client.store, force=True, state=state)
    assert client.redis.hgetall(k.held("gpu-3")) == {}
    assert ran == set(scripts.NAMES)
    client.redis.close()


def test_a_nodes_keys_for_the_heartbeat_are_its_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keys_module, "NODE_KEYS_KEPT", 3)
    k = Keys("mp")
    for n in range(5):  # past the bound: forgotten and made again
        node = f"gpu-{n}"
        assert k.node_keys(node) == (k.node(node), k.held(node), k.boots(node), k.conflict(node), k.beat(node))
        assert k.node_keys(node) == (k.node(node), k.held(node), k.boots(node), k.conflict(node), k.beat(node))
        assert len(k._node_keys) <= 3
    for _ in range(2):  # refused each time, never kept
        with pytest.raises(BadId):
            k.node_keys("gpu-1:x")
