"""A heartbeat carries what its started holds' engines were measured to hold (``footprints``): stored in
the node record before the seq, so that a footprint that changes is a change the workers read and one
that does not is a refresh; left out of the record when there is none; only for a hold in ``started``."""

from __future__ import annotations

import json

import pytest

from planner import InvalidInput
from producer import Client
from tests.worker.helpers import hb
from tests.worker.test_heartbeat_store import kinds, stored
from worker.footprints import Footprint
from worker.reports import NodeRecord, parse_heartbeat

HOLD = "j-1:0:1"


def beat(seq: int, card_bytes: int | None = None) -> dict[str, object]:
    b = hb("g1", gpus=2, free=1, seq=seq, started=(HOLD,))
    if card_bytes is not None:
        b["footprints"] = {HOLD: {"engine": "vllm", "version": "0.11.0", "source": "nvml", "card_bytes": [card_bytes]}}
    return b


def test_a_record_without_footprints_has_no_such_field(client: Client) -> None:
    client.heartbeat(beat(1))
    assert '"footprints"' not in stored(client, "g1")


def test_footprints_are_stored_before_the_seq_and_read_back(client: Client) -> None:
    client.heartbeat(beat(1, 30 * 2**30))
    raw = stored(client, "g1")
    assert raw.index('"footprints"') < raw.index(',"seq":')
    record = NodeRecord.model_validate_json(raw)
    assert record.footprints == {
        HOLD: Footprint(engine="vllm", version="0.11.0", source="nvml", card_bytes=(30 * 2**30,))
    }


def test_the_same_footprint_again_is_a_refresh_and_a_new_one_a_change(client: Client) -> None:
    client.heartbeat(beat(1, 2**30))
    client.heartbeat(beat(2, 2**30))
    client.heartbeat(beat(3, 2**31))
    assert kinds(client) == [["n", "r", "t"], ["n", "r", "t"]]  # the refresh moves only the TTL


@pytest.mark.parametrize(
    "footprints, said",
    [
        ({"j-2:0:1": {"engine": "vllm", "source": "nvml"}}, "not in started"),
        ({HOLD: {"engine": "vllm", "source": "nvml", "card_bytes": [-1]}}, "card_bytes"),
        ({HOLD: {"engine": "vllm", "source": "nvml", "version": 'a"b'}}, "version"),
        ({HOLD: {"engine": "tgi", "source": "nvml"}}, "engine"),
    ],
    ids=["not started", "negative", "a quote", "unknown engine"],
)
def test_a_footprint_that_is_not_one_is_refused_naming_the_field(footprints: object, said: str) -> None:
    with pytest.raises(InvalidInput) as e:
        parse_heartbeat(json.dumps({**beat(1), "footprints": footprints}))
    assert said in str(e.value) and "footprints" in str(e.value)
