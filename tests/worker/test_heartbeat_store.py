"""How ``heartbeat.lua`` stores a heartbeat: the record's layout, which lets it tell a refresh from the text
alone, and what it does with a record in any other layout (an older version's, one written by hand)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from producer import Client
from tests.worker.helpers import hb
from worker.records import utcnow
from worker.reports import parse_heartbeat, stored_json

TAIL = re.compile(r',"seq":(\d+),"schema_version":1,"received_at":"[^"]*"\}$')


def stored(client: Client, node_id: str) -> str:
    raw = client.redis.get(client.keys.node(node_id))
    assert isinstance(raw, bytes)
    return raw.decode()


def kinds(client: Client) -> list[list[str]]:
    """What each pool:changes entry carries: a record (n, r, t) or a call's refreshes (ns, t)."""
    entries: Any = client.redis.xrange(client.keys.pool_changes)
    return [sorted(k.decode() for k in fields) for _, fields in entries]


def older_layout(raw: str) -> str:
    """A record as versions before this layout wrote it: the seq between the figures and the boot."""
    record = json.loads(raw)
    seq = record.pop("seq")
    head = {k: record.pop(k) for k in list(record) if k not in ("boot_id", "started", "schema_version", "received_at")}
    return json.dumps({**head, "seq": seq, **record}, separators=(",", ":"))


@pytest.mark.parametrize("path", ["one", "batch"])
def test_a_stored_record_ends_with_its_seq_and_when_it_arrived(client: Client, path: str) -> None:
    """Both publish paths store the layout the script reads a refresh from: the view, then the seq, the
    schema version and the time, last."""
    beat = hb("g1", gpus=2, seq=7, started=("j-1:0:1",))
    if path == "one":
        client.heartbeat(beat)
    else:
        client.heartbeats([json.dumps(beat)])
    raw = stored(client, "g1")
    m = TAIL.search(raw)
    assert m is not None and m.group(1) == "7", raw
    assert '"seq"' not in raw[: m.start()] and '"boot_id":"boot-1","started":["j-1:0:1"]' in raw[: m.start()]


@pytest.mark.parametrize(
    "change",
    [{"free": 1}, {"boot": "boot-2"}, {"started": ("j-1:0:1",)}, {"host_free": 100}, {"fabric": "ib-1"}],
    ids=["free cards", "boot", "started", "host memory", "fabric"],
)
def test_whatever_a_plan_or_a_restart_reads_is_not_a_refresh(client: Client, change: dict[str, Any]) -> None:
    """Every field but the seq and the time is in the view: a heartbeat that changes one is a change (the
    refresh between moves only the record's TTL, and goes on no stream)."""
    client.heartbeat(hb("g1", gpus=2, seq=1))
    client.heartbeat(hb("g1", gpus=2, seq=2))
    client.heartbeat(hb("g1", gpus=2, seq=3, **change))
    assert kinds(client) == [["n", "r", "t"], ["n", "r", "t"]]


def test_a_record_an_older_version_stored_is_taken_as_a_change_once(client: Client) -> None:
    """A node's record in an older version's layout is never compared by its text: the next heartbeat,
    with the same figures, is decoded and stored whole, and the ones after it are refreshes again."""
    client.heartbeat(hb("g1", gpus=2, seq=1))
    key = client.keys.node("g1")
    client.redis.set(key, older_layout(stored(client, "g1")), px=60_000)
    client.redis.delete(client.keys.pool_changes)
    assert client.heartbeats([json.dumps(hb("g1", gpus=2, seq=2))]) == [True]
    assert client.heartbeats([json.dumps(hb("g1", gpus=2, seq=1))]) == [False]  # older: refused, as before
    assert client.heartbeats([json.dumps(hb("g1", gpus=2, seq=3))]) == [True]
    assert kinds(client) == [["n", "r", "t"]]
    assert TAIL.search(stored(client, "g1")) is not None


def test_a_new_boot_over_an_older_versions_record_is_a_restart(client: Client) -> None:
    """The same figures from a new boot, over a record in an older version's layout on a node that holds a
    reservation: the node restarted, and the caller is told so."""
    client.heartbeat(hb("g1", gpus=2, seq=5))
    client.redis.set(client.keys.node("g1"), older_layout(stored(client, "g1")), px=60_000)
    client.redis.hset(client.keys.held("g1"), "j-1:0:1", "{}")
    assert [(ok, restarted) for ok, _, restarted in put(client, hb("g1", gpus=2, seq=1, boot="boot-2"))] == [
        (True, True)
    ]


def put(client: Client, *beats: dict[str, Any], raw: str | None = None) -> list[tuple[bool, bool, bool]]:
    """``Store.put_stored`` of ``beats`` as the client makes their records, the first one's replaced by
    ``raw`` where it is given."""
    parsed = [parse_heartbeat(b) for b in beats]
    records = stored_json(parsed, utcnow())
    if raw is not None:
        records[0] = raw
    return client.store.put_stored([(hb.node_id, raw) for hb, raw in zip(parsed, records, strict=True)])


def test_a_record_that_does_not_decode_is_not_stored(client: Client) -> None:
    """The script is given records modelplan made; one that does not decode (never sent by modelplan) is
    not stored and leaves the node as it was, while the rest of the call is stored."""
    client.heartbeat(hb("g1", gpus=2, seq=1))
    before = stored(client, "g1")
    replies = put(client, hb("g1", gpus=2, seq=2), hb("g2", gpus=2, seq=1), raw="{not json")
    assert [ok for ok, _, _ in replies] == [False, True]
    assert stored(client, "g1") == before
    assert json.loads(stored(client, "g2"))["node_id"] == "g2"
