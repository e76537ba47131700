"""The published JSON Schemas: what `modelplan schema` prints, kept in docs/schemas, and true to the
records modelplan writes."""

from __future__ import annotations

import json

import jsonschema
import pytest
import redis

from producer import Client
from producer.cli import main
from producer.schema import NAMES, schema_text
from tests.schema_check import SCHEMAS, check_stored_records, validator
from tests.worker.helpers import drain, hb, request


@pytest.mark.parametrize("name", NAMES)
def test_the_cli_prints_the_schema_docs_carries(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", name]) == 0
    printed = capsys.readouterr().out
    assert printed == schema_text(name) == (SCHEMAS / f"{name}.schema.json").read_text(), (
        f"docs/schemas/{name}.schema.json is out of date: write it again with `modelplan schema {name}`"
    )
    validator(name)  # a valid draft 2020-12 schema


def test_records_written_through_the_flow_match_and_broken_ones_do_not(redis_url: str, r: redis.Redis) -> None:
    client = Client.from_url(redis_url)
    client.heartbeat(hb("gpu-a", gpus=1))
    client.submit(request(), "fits")
    client.submit(request(replicas=2), "waits")
    drain(client)
    assert check_stored_records(r) == 3  # two job records, one node
    validator("request").validate(json.loads(request().model_dump_json()))
    validator("heartbeat").validate(hb("gpu-b"))
    for option in json.loads(r.get(client.keys.job("fits")) or b"{}")["alternatives"]:
        validator("option").validate(option)
    record = json.loads(r.get(client.keys.job("fits")) or b"{}")
    with pytest.raises(jsonschema.ValidationError):
        validator("record").validate({**record, "state": "exploded"})
    with pytest.raises(jsonschema.ValidationError):
        validator("request").validate({**json.loads(request().model_dump_json()), "priority": "high"})
    client.redis.close()


def test_the_request_schema_takes_a_vllm_release_and_refuses_what_is_not_one() -> None:
    req = json.loads(request().model_dump_json())
    ok = {**req, "settings": {"vllm": {"vllm_version": "0.10.2"}, "llamacpp": {}}}
    validator("request").validate(ok)
    with pytest.raises(jsonschema.ValidationError):
        validator("request").validate({**req, "settings": {"vllm": {"vllm_version": "0.10.x"}, "llamacpp": {}}})
