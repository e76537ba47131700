"""The records' schema version is spelled once (``worker.constants.SCHEMA_VERSION``): the models take it
from there, the scripts that write or match a record's text are handed it, and no other code spells it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

from producer import Client
from tests.worker.helpers import hb, request
from worker.constants import SCHEMA_VERSION, SchemaVersion
from worker.records import JobRecord
from worker.reports import NodeRecord

ROOT = Path(__file__).resolve().parents[2]

SPELLINGS = (
    re.compile(r'"schema_version\\?"\s*:\s*\d'),
    re.compile(r"schema_version\s*:\s*Literal\[\s*\d"),
    re.compile(r"schema_version\s*(?::[^=\n]*)?=\s*\d"),
    re.compile(r"SCHEMA_VERSION\s*(?::[^=\n]*)?=\s*\d"),
    re.compile(r"SchemaVersion\s*=\s*Literal"),
)
"""A version spelled as a number: in a record's text (a Lua string, a JSON literal), as a model's field,
or as the constant."""

OWN_VERSION = {("producer/hub.py", "    schema_version: Literal[1] = 1")}
"""Lines that spell a version of something else: the Hub cache's entries (``hub:{repo}@{revision}``) are
versioned on their own, since an entry of another version is fetched anew, never read as a record."""


def spelled() -> list[str]:
    found = []
    paths = [*sorted((ROOT / "worker").rglob("*.py")), *sorted((ROOT / "worker" / "lua").glob("*.lua"))]
    paths += sorted((ROOT / "producer").rglob("*.py")) + sorted((ROOT / "planner").rglob("*.py"))
    for path in paths:
        name = path.relative_to(ROOT).as_posix()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if any(p.search(line) for p in SPELLINGS) and (name, line) not in OWN_VERSION:
                found.append(f"{name}:{n}: {line.strip()}")
    return found


def test_the_version_is_spelled_in_constants_alone() -> None:
    found = spelled()
    assert [f for f in found if not f.startswith("worker/constants.py:")] == []
    assert len(found) == 2  # the type and the value, side by side


def test_the_check_finds_each_spelling() -> None:
    lines = [
        'local head = \'{"schema_version":1,"job_id":"\'',
        "    schema_version: Literal[1] = 1",
        '    return \',"schema_version":2,"received_at":\'',
        "SCHEMA_VERSION = 1",
    ]
    assert all(any(p.search(line) for p in SPELLINGS) for line in lines)
    assert not any(p.search("    schema_version: SchemaVersion = SCHEMA_VERSION") for p in SPELLINGS)


def test_the_type_and_the_value_agree() -> None:
    assert get_args(SchemaVersion) == (SCHEMA_VERSION,)
    assert JobRecord.model_fields["schema_version"].default == SCHEMA_VERSION
    assert NodeRecord.model_fields["schema_version"].default == SCHEMA_VERSION


def test_records_the_scripts_write_carry_the_version(client: Client) -> None:
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=2))
    job = client.submit(request())
    got = client.store.claim_and_pool(job, "w1")  # claim.lua matches the record's head and rewrites it
    assert got is not None and got[0] and got[1].worker == "w1"
    raw = client.redis.get(client.keys.job(job))
    assert raw is not None
    assert JobRecord.model_validate_json(raw).schema_version == SCHEMA_VERSION
    node = client.redis.get(client.keys.node("gpu-1"))
    assert node is not None and NodeRecord.model_validate_json(node).schema_version == SCHEMA_VERSION
