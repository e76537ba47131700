"""A relay's client validates a node's heartbeat text once: the next that differs only in its seq is known
by the rest of it, and gives what validating it would, down to the stored record."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from planner.errors import InvalidInput
from producer import Client, relayed
from producer.relayed import Relayed
from tests.worker.helpers import hb
from worker.reports import SEQ_MAX, parse_heartbeat, stored_json, stored_tail

AT = datetime(2026, 12, 2, 1, 2, 3, 456789, tzinfo=UTC)


@pytest.fixture
def validations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts ``Relayed`` validates in full."""
    seen: list[str] = []

    def counted(data: Any, source: str = "heartbeat") -> Any:
        seen.append(data)
        return parse_heartbeat(data, source)

    monkeypatch.setattr(relayed, "parse_heartbeat", counted)
    return seen


def text(seq: int, **kw: Any) -> str:
    return json.dumps(hb("g1", gpus=4, seq=seq, **{"free": 2, **kw}), separators=(",", ":"))


def stored(relay: Relayed, data: str) -> str:
    """The record ``Client.heartbeats`` stores for ``data``."""
    return relay.stored(data, stored_tail(AT))[2]


def validated(data: str) -> tuple[str, str, str]:
    """What ``Relayed.stored`` gives for ``data`` by validating it."""
    beat = parse_heartbeat(data)
    return beat.node_id, beat.boot_id, stored_json([beat], AT)[0]


def test_a_refresh_is_known_by_its_text_and_stores_what_validating_it_would(validations: list[str]) -> None:
    relay = Relayed()
    first = stored(relay, text(1))
    for seq in (2, 10, 11, SEQ_MAX):
        assert stored(relay, text(seq)) == stored_json([parse_heartbeat(text(seq))], AT)[0]
    assert first == stored_json([parse_heartbeat(text(1))], AT)[0]
    assert validations == [text(1)]  # the refreshes were not validated again
    assert relay.stored(text(12), stored_tail(AT)) == validated(text(12))


def test_a_change_of_anything_but_the_seq_is_validated(validations: list[str]) -> None:
    relay = Relayed()
    relay.stored(text(1), stored_tail(AT))
    for changed in (text(2, free=3), text(3, boot="boot-2"), text(4, started=("j:0:1",)), text(5, fabric="ib")):
        assert relay.stored(changed, stored_tail(AT)) == validated(changed)
    assert len(validations) == 5


def _spelled(old: str, new: str) -> Any:
    return lambda seq: text(seq).replace(old.replace("N", str(seq)), new.replace("N", str(seq)), 1)


UNKNOWABLE = {
    "an escape in it": _spelled('"node_id":"g1"', '"node_id":"g\\u0031"'),
    "the key escaped": _spelled('"seq":N', '"s\\u0065q":N'),
    "two seq keys": lambda seq: text(seq)[:-1] + f',"seq":{seq}}}',
    "a seq of one digit more than any": _spelled('"seq":N', '"seq":12345678901234567'),
}


@pytest.mark.parametrize("name", sorted(UNKNOWABLE))
def test_a_text_not_known_by_its_seq_is_validated_each_time(name: str, validations: list[str]) -> None:
    """Where the seq cannot stand for the text's (an escape anywhere, the key spelled twice or otherwise),
    each text is validated, and gives (or refuses) what validating it gives."""
    relay = Relayed()
    make = UNKNOWABLE[name]
    for seq in (1, 2):
        data = make(seq)
        try:
            want: Any = validated(data)
        except InvalidInput as e:
            want = type(e)
        if isinstance(want, type):
            with pytest.raises(want):
                relay.stored(data, stored_tail(AT))
        else:
            assert relay.stored(data, stored_tail(AT)) == want
    assert len(validations) == 2 and len(relay) == 0


@pytest.mark.parametrize("seq", ["-1", "1.5", "2e3", "007", '"9"', str(SEQ_MAX + 1), "true"])
def test_a_bad_seq_after_a_known_text_is_refused_as_validation_refuses_it(seq: str) -> None:
    relay = Relayed()
    relay.stored(text(1), stored_tail(AT))
    bad = text(1).replace('"seq":1', f'"seq":{seq}', 1)
    with pytest.raises(InvalidInput):
        parse_heartbeat(bad)
    with pytest.raises(InvalidInput):
        relay.stored(bad, stored_tail(AT))


def test_what_a_relay_keeps_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relayed, "LIMIT", 3)
    relay = Relayed()
    for node in range(7):
        relay.stored(json.dumps(hb(f"n{node}", seq=1)), stored_tail(AT))
        assert len(relay) <= 3


def test_a_relays_refreshes_store_what_a_new_client_would(client: Client, redis_url: str) -> None:
    """Through ``Client.heartbeats``: a known text's refresh is stored (its seq; the record's TTL moved),
    exactly as a client that never saw the node stores it, and goes on no stream."""
    assert client.heartbeats([text(1).encode()]) == [True]
    assert client.heartbeats([text(2)]) == [True]
    assert client.heartbeats([text(2)]) == [False]  # the same seq again: older than its node's last
    kept = json.loads(client.redis.get(client.keys.node("g1")) or b"{}")
    fresh = Client.from_url(redis_url)
    try:
        assert fresh.heartbeats([text(3)]) == [True]
    finally:
        fresh.redis.close()
    again = json.loads(client.redis.get(client.keys.node("g1")) or b"{}")
    assert {**kept, "received_at": ""} == {**again, "received_at": ""}
    assert client.last_seq("g1", kept["boot_id"]) == 3
    entries: Any = client.redis.xrange(client.keys.pool_changes)
    assert [sorted(k.decode() for k in fields) for _, fields in entries] == [["n", "r", "t"]]
