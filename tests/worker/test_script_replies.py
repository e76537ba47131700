"""Every code a Lua script returns is a member of ``Reply``, every member is returned by some script, and
no worker module compares a script's code with a bare string."""

from __future__ import annotations

import hashlib
import re
import time
from pathlib import Path

import pytest

from producer import Client
from worker import orphans
from worker.errors import BadRecord
from worker.replies import Reply

ROOT = Path(__file__).resolve().parents[2]
LUA = ROOT / "worker" / "lua"

RETURNED = re.compile(r"\breturn\s*\{?\s*'([^']*)'(?:\s*,\s*'([^']*)')?")
"""A string a script returns: ``return 'stale', 0`` (a helper's code), ``return {'gone', ''}``, and the
detail beside a code when it is a literal too (``{'stale', 'unreadable', 0}``)."""

COMPARED = re.compile(r"\b(?:code|out\.code)\s*(?:==|!=|\bin\b|\bnot in\b)\s*\(?\s*[\"']")
"""A script's code compared with a bare string (``code == "gone"``, ``out.code in ("full", ...)``)."""


def without_comments(lua: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in lua.splitlines())


def returned_codes() -> dict[str, set[str]]:
    """Each string literal the scripts return, by file."""
    out: dict[str, set[str]] = {}
    for path in sorted(LUA.glob("*.lua")):
        for match in RETURNED.finditer(without_comments(path.read_text(encoding="utf-8"))):
            for code in match.groups():
                if code:
                    out.setdefault(code, set()).add(path.name)
    return out


def test_the_reader_finds_the_codes_of_each_script() -> None:
    codes = returned_codes()
    assert {"planning", "as_is", "gone", "wrongtype"} <= set(codes)  # claim.lua
    assert {"ok", "stale", "bad", "conflict"} <= set(codes)  # heartbeat.lua's helpers
    assert codes["changed"] == {"quarantine_job.lua"}
    assert codes["unreadable"] == {"transition.lua"}


def test_every_code_a_script_returns_is_a_reply() -> None:
    unknown = {code: files for code, files in returned_codes().items() if code not in set(Reply)}
    assert not unknown, f"codes the scripts return that Reply lacks: {unknown}"


def test_every_reply_is_returned_by_some_script() -> None:
    codes = returned_codes()
    assert [r for r in Reply if r.value not in codes] == []


@pytest.mark.parametrize("reply", list(Reply))
def test_a_reply_reads_from_text_and_from_bytes(reply: Reply) -> None:
    assert Reply.of(reply.value) is reply
    assert Reply.of(reply.value.encode()) is reply


def test_an_unknown_code_is_named() -> None:
    with pytest.raises(ValueError, match="replied 'placed', which is none of ok, stale"):
        Reply.of(b"placed")
    with pytest.raises(ValueError, match="replied '1'"):
        Reply.of(1)


def test_no_worker_module_compares_a_code_with_a_bare_string() -> None:
    found = []
    for path in sorted((ROOT / "worker").glob("*.py")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if COMPARED.search(line):
                found.append(f"{path.name}:{n}: {line.strip()}")
    assert found == []


def test_the_comparison_check_finds_one() -> None:
    assert COMPARED.search('        if out.code in ("full", "silent"):')
    assert COMPARED.search("if code == 'gone':")
    assert not COMPARED.search("if code is Reply.GONE:")


def test_reclaiming_holds_past_a_key_of_another_type_writes_nothing_and_names_it(client: Client) -> None:
    k = client.keys
    client.redis.hset(k.held("gpu-1"), "ghost:0:1", '{"gpus":1,"host_gb":0}')
    client.redis.set(k.held_nodes, "not a set")
    seen = orphans.Seen()
    value_sum = hashlib.sha1(b'{"gpus":1,"host_gb":0}', usedforsecurity=False).hexdigest()
    orphan = orphans.Orphan("gpu-1", "ghost:0:1", "its job has no record", value_sum, "", time.monotonic() - 3600)
    seen.orphans[("gpu-1", "ghost:0:1")] = orphan
    with pytest.raises(BadRecord, match=f"{k.held_nodes}.*not of the type"):
        orphans.reclaim(client.store, seen)
    assert client.redis.hgetall(k.held("gpu-1")) == {b"ghost:0:1": b'{"gpus":1,"host_gb":0}'}
