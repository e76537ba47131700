"""The text layouts ``worker.layout`` names hold: the models write their fields in that order, the records
modelplan stores carry the markers where the scripts and ``jobtext`` look for them, and each script that
matches a layout spells the same fields in the same order."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from producer import Client
from tests.worker.helpers import drain, hb, request
from worker.layout import JOB_HEAD, JOB_VERSION_HEAD, NODE_TAIL, REQUEST_AT, REQUEST_END, SEQ_AT
from worker.records import JobRecord
from worker.reports import NodeRecord

LUA = Path(__file__).resolve().parents[2] / "worker" / "lua"
FIELD = re.compile(r'\\?"(\w+)\\?":')


def job_layout_problems(text: str) -> list[str]:
    """What of ``JOB_HEAD``, ``REQUEST_AT`` and ``REQUEST_END`` a job record's text does not hold."""
    problems = []
    keys = list(json.loads(text))
    if keys[: len(JOB_HEAD)] != list(JOB_HEAD):
        problems.append(f"starts with {keys[: len(JOB_HEAD)]}, not {list(JOB_HEAD)}")
    head = "{" + ",".join(f'"{name}":' for name in JOB_VERSION_HEAD)
    if FIELD.findall(text[: len(head) + 200])[: len(JOB_VERSION_HEAD)] != list(JOB_VERSION_HEAD):
        problems.append("its first four fields are not the version head")
    at = text.find(REQUEST_AT)
    end = text.find(REQUEST_END, at)
    if at < 0 or end < 0:
        problems.append("no request between its markers")
    elif json.loads(text[at + len(REQUEST_AT) : end]) != json.loads(text)["request"]:
        problems.append("the text between the markers is not its request")
    elif keys[len(JOB_HEAD) : len(JOB_HEAD) + 2] != ["request", "wanted"]:
        problems.append(f"the head is followed by {keys[len(JOB_HEAD) : len(JOB_HEAD) + 2]}")
    return problems


def node_layout_problems(text: str) -> list[str]:
    """What of ``NODE_TAIL`` and ``SEQ_AT`` a node record's text does not hold."""
    keys = list(json.loads(text))
    problems = [] if keys[-len(NODE_TAIL) :] == list(NODE_TAIL) else [f"ends with {keys[-len(NODE_TAIL) :]}"]
    at = text.find(SEQ_AT)
    if at < 0 or FIELD.findall(text[at:]) != list(NODE_TAIL):
        problems.append(f"the first {SEQ_AT} is not followed by the tail alone")
    return problems


def test_the_models_declare_the_layouts() -> None:
    assert list(JobRecord.model_fields)[: len(JOB_HEAD) + 2] == [*JOB_HEAD, "request", "wanted"]
    assert list(NodeRecord.model_fields)[-len(NODE_TAIL) :] == list(NODE_TAIL)


def test_every_stored_record_holds_its_layout(client: Client) -> None:
    """Job records as written at each step (submitted, claimed, placed, waiting) and node records as
    either publish path stores them."""
    client.heartbeat(hb("gpu-1", gpus=1))
    client.heartbeats([hb("gpu-2", gpus=1), hb("gpu-3", "", host=64)])
    jobs = [client.submit(request(), job_id=j) for j in ("a", "b", "c", "d")]
    raws: dict[str, Any] = {"queued": client.redis.get(client.keys.job("a"))}
    got = client.store.claim_and_pool("a", "w1")
    assert got is not None and got[0]
    raws["claimed"] = client.redis.get(client.keys.job("a"))
    drain(client)
    raws |= {j: client.redis.get(client.keys.job(j)) for j in jobs}
    states = [client.get(j).state.value for j in jobs]
    assert states[0] == "planning" and sorted(states[1:]) == ["placed", "placed", "waiting"]  # two cards
    for name, raw in raws.items():
        assert job_layout_problems(raw.decode()) == [], name
    for node in ("gpu-1", "gpu-2", "gpu-3"):
        stored: Any = client.redis.get(client.keys.node(node))
        assert stored is not None and node_layout_problems(stored.decode()) == [], node


def test_a_record_in_another_order_is_found_out() -> None:
    moved = {"job_id": "a", "schema_version": 1, "state": "queued", "version": 0}
    text = json.dumps({**moved, "updated_at": "x", "worker": None, "lease_until": None, "request": {}, "wanted": 1})
    assert job_layout_problems(text.replace(" ", "")) != []
    wanted_first = {name: None for name in JOB_HEAD} | {"wanted": 1, "request": {"a": 1}}
    assert job_layout_problems(json.dumps(wanted_first, separators=(",", ":"))) != []
    node = {"node_id": "n", "seq": 1, "boot_id": "b", "schema_version": 1, "received_at": "t"}
    assert node_layout_problems(json.dumps(node, separators=(",", ":"))) != []


def lua_fields(file: str, start: str) -> list[str]:
    """The fields spelled, in order, in the statement of ``file`` that starts with ``start`` (up to the
    next line that starts a statement of its own)."""
    lines = (LUA / file).read_text(encoding="utf-8").splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith(start))
    statement = [lines[at]]
    for line in lines[at + 1 :]:
        if not line.startswith(" ") or line.strip().startswith(("local ", "if ", "return ")):
            break
        statement.append(line)
    return FIELD.findall("\n".join(statement))


@pytest.mark.parametrize(
    ("file", "start", "fields"),
    [
        ("claim.lua", "local head =", JOB_VERSION_HEAD),
        ("claim.lua", "raw, '^(%d+)", JOB_HEAD[len(JOB_VERSION_HEAD) :]),
        ("claim.lua", "local record =", JOB_HEAD),
        ("transition.lua", "local v = string.match(raw,", JOB_VERSION_HEAD),
        ("heartbeat.lua", "local REST =", NODE_TAIL),
    ],
)
def test_each_script_spells_the_layout_it_matches(file: str, start: str, fields: tuple[str, ...]) -> None:
    assert lua_fields(file, start) == list(fields)


def test_heartbeat_finds_the_seq_by_its_marker() -> None:
    assert f"string.find(raw, '{SEQ_AT}', 1, true)" in (LUA / "heartbeat.lua").read_text(encoding="utf-8")
