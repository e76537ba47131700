"""JSON Schemas of what crosses Redis, from the pydantic models themselves, so that services in other
languages can generate their types (``modelplan schema NAME``; ``docs/schemas/NAME.schema.json``).

======================  ==========================================================================
name                    what it describes
======================  ==========================================================================
``request``             a serve request: the ``request`` field of a submit on the request stream, and
                        what ``Client.submit`` takes
``record``              a job record, ``GET {prefix}:job:{job_id}``
``heartbeat``           what a node agent publishes
``node``                a heartbeat as stored, ``GET {prefix}:node:{node_id}``
``conflict``            a node id two agents publish under, ``GET {prefix}:conflict:{node_id}``
``option``              one way a model can run: ``modelplan plan --json`` and a record's ``option``
======================  ==========================================================================
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pydantic import TypeAdapter

from planner import Option
from worker.conflicts import ConflictRecord
from worker.records import JobRecord, ServeRequest
from worker.reports import Heartbeat, NodeRecord

DIALECT = "https://json-schema.org/draft/2020-12/schema"

_SOURCES: dict[str, tuple[Callable[[], dict[str, Any]], str]] = {
    # inputs are described as they are validated, outputs as they are written
    "request": (lambda: ServeRequest.model_json_schema(mode="validation"), "A serve request"),
    "record": (lambda: JobRecord.model_json_schema(mode="serialization"), "A job record as stored"),
    "heartbeat": (lambda: Heartbeat.model_json_schema(mode="validation"), "A node's heartbeat"),
    "node": (lambda: NodeRecord.model_json_schema(mode="serialization"), "A heartbeat as stored"),
    "conflict": (lambda: ConflictRecord.model_json_schema(mode="serialization"), "A node id two agents publish under"),
    "option": (lambda: TypeAdapter(Option).json_schema(mode="serialization"), "One way a model can run"),
}
NAMES = tuple(_SOURCES)


def schema(name: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``name``, one of ``NAMES``."""
    build, title = _SOURCES[name]
    out = build()
    out["title"] = title
    return {"$schema": DIALECT, "$id": f"modelplan/{name}.schema.json", **out}


def schema_text(name: str) -> str:
    return json.dumps(schema(name), indent=2, sort_keys=True) + "\n"
