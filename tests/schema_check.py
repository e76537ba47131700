"""Every job record, node record and conflict record a test leaves in Redis is checked against the published
JSON Schemas (``docs/schemas``), as a service in another language would read it."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import redis
from pydantic import BaseModel

from worker.conflicts import ConflictRecord
from worker.errors import BadRecord
from worker.records import JobRecord, read_record
from worker.reports import NodeRecord

SCHEMAS = Path(__file__).resolve().parents[1] / "docs" / "schemas"
MODELS: dict[str, tuple[type[BaseModel], str]] = {
    "job": (JobRecord, "record"),
    "node": (NodeRecord, "node"),
    "conflict": (ConflictRecord, "conflict"),
}
"""The key families checked: each one's model and its schema's name."""


@cache
def validator(name: str) -> Any:
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def check_stored_records(client: redis.Redis) -> int:
    """Validate each record modelplan reads as valid against its schema; how many were checked. A record a
    test wrote broken on purpose (modelplan quarantines it) is not one modelplan would write, and is left."""
    checked = 0
    for raw_key in client.scan_iter(match="*", _type="string", count=1000):
        key = raw_key.decode() if isinstance(raw_key, bytes) else str(raw_key)
        parts = key.split(":")
        if len(parts) != 3 or parts[1] not in MODELS:
            continue
        model, name = MODELS[parts[1]]
        raw = client.get(key)
        if raw is None:
            continue
        try:
            read_record(model, raw, key)
        except BadRecord:
            continue
        errors = [e.message for e in validator(name).iter_errors(json.loads(raw))]
        assert not errors, f"{key} does not match docs/schemas/{name}.schema.json: {errors[:3]}"
        checked += 1
    return checked
