"""The mirror with no Redis: fed readings and parsed entries, it keeps the pool and hands back what it could
not read, and the modules it is made of import no Redis client and no store."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from tests.worker.helpers import hb
from worker.changes import ChangeKind, PoolChange
from worker.keys import Keys
from worker.mirror import NEVER, Mirror, Named, NodesRead, WholeRead
from worker.pool import Held
from worker.records import utcnow

ROOT = Path(__file__).resolve().parents[2]
PURE = ("worker/mirror.py", "worker/changes.py", "worker/pool.py")
"""The modules of the mirror: values in, values out."""
NOT_IN_PURE = {"redis", "rq", "worker.store", "worker.poolread", "worker.mirrored", "worker.scripts"}

HOLD = json.dumps({"gpus": 1, "host_gb": 0.0, "boot_id": "boot-1", "nominated": False}).encode()


def stored(node_id: str, **kw: object) -> bytes:
    return json.dumps({**hb(node_id, **kw), "received_at": utcnow().isoformat()}).encode()  # type: ignore[arg-type]


def test_the_mirror_modules_import_no_redis_and_no_store() -> None:
    found = []
    for name in PURE:
        for node in ast.walk(ast.parse((ROOT / name).read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            found += [(name, n) for n in names if n in NOT_IN_PURE or n.split(".")[0] in NOT_IN_PURE]
    assert found == []


def test_a_whole_read_keeps_what_parses_and_hands_back_the_rest() -> None:
    keys = Keys("t")
    read = WholeRead(
        last_id="5-0",
        server_ms=1_000,
        epoch="3",
        nodes={"a": (stored("a", gpus=2), 4_000), "b": (b"{not json", 4_000), "c": (stored("c"), -1)},
        holds={"a": {b"j:0:1": HOLD, b"not a hold": HOLD}},
    )
    mirror, unread = Mirror.whole(read, keys)
    assert sorted(mirror.pool.records) == ["a", "c"] and mirror.pool.epoch == "3" and mirror.last_id == "5-0"
    assert mirror.pool.held["a"]["j:0:1"] == Held(1, 0.0, "boot-1")
    assert mirror.pool.held["a"]["not a hold"].unreadable == "not a hold id"
    assert sorted((u.bad.container, u.action) for u in unread) == [
        ("t:held:a", "its node's cards kept taken"),
        ("t:node:b", "left out of the pool"),
    ]
    # a node leaves when its record is gone (a gone entry), never by a TTL as read: a refresh moves the
    # TTL and tells no worker
    assert mirror.due(5_000) == []
    assert mirror._lapses["a"] == mirror._lapses["c"] == NEVER


def test_entries_name_what_to_read_again_and_readings_change_the_pool() -> None:
    keys = Keys("t")
    mirror, _ = Mirror.whole(WholeRead("1-0", 0, "0", {"a": (stored("a"), 9_000)}, {"a": {b"j:0:1": HOLD}}), keys)
    named = mirror.note(
        [
            PoolChange("2-0", ChangeKind.HEARTBEAT, "b"),
            PoolChange("3-0", ChangeKind.HOLD, "a", hold_id="j:0:1", hold=HOLD),  # as held: nothing to read
            PoolChange("4-0", ChangeKind.GONE, "zz"),  # not held: nothing to read
            PoolChange("5-0", ChangeKind.HOLD, "a", hold_id="k:0:1", hold=HOLD),
            PoolChange("6-0", ChangeKind.NONE),
        ]
    )
    assert named == Named({"b"}, {"a"}) and mirror.last_id == "6-0"
    unread = mirror.put(
        NodesRead(100, {"b": (stored("b", gpus=4), 5_000), "a": (b"[]", 5_000)}, {"a": {b"k:0:1": HOLD}})
    )
    assert [(u.bad.container, u.action) for u in unread] == [("t:node:a", "left out of the pool")]
    assert sorted(mirror.pool.records) == ["b"]
    assert [n.free_gpus for n in mirror.pool.nodes] == [4]
