"""Two agents publishing under one node id (a cloned machine image): each heartbeat carries the other's
boot, which must not read as a restart every time. The node id is in conflict instead: out of the pool,
its jobs handed on once, its heartbeats refused and counted, until one agent alone is heard."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from producer import Beat, Client
from producer.agent import Agent
from producer.cli import main
from producer.metrics import exposition
from tests.producer.agent.test_agent import IDLE, FakeReader
from tests.worker.helpers import drain, event_reasons, hb, queued_functions, request, whole_state
from worker import constants as C
from worker import maintenance
from worker.conflicts import BootHeard, ConflictRecord
from worker.keys import Keys
from worker.scripts import text

SILENT = "worker.jobs.node_silent"


class Twins:
    """Two agents that were given one node id, each with its own boot and its own rising seq."""

    def __init__(self, client: Client, node_id: str = "gpu-1", gpus: int = 2) -> None:
        self.client, self.node_id, self.gpus = client, node_id, gpus
        self.seqs = {"boot-a": 1_000, "boot-b": 5_000}

    def next(self, boot: str) -> dict[str, Any]:
        """``boot``'s agent's next heartbeat."""
        self.seqs[boot] += 1
        return hb(self.node_id, gpus=self.gpus, seq=self.seqs[boot], boot=boot)

    def beat(self, boot: str) -> Beat:
        return self.client.publish(self.next(boot))

    def flap(self, times: int) -> list[Beat]:
        """The two take turns, ``times`` heartbeats each, B first; a worker runs what each one queued
        before the next comes. Nothing may be queued but by the first."""
        out = []
        for boot in ["boot-b", "boot-a"] * times:
            out.append(self.beat(boot))
            drain(self.client)
        return out


def conflict(client: Client, node_id: str = "gpu-1") -> dict[str, Any]:
    """A node id's conflict record, its times left out."""
    raw = client.redis.get(client.keys.conflict(node_id))
    assert raw is not None
    record = json.loads(raw)
    assert record["since_ms"] <= record["last_heard_ms"]
    return {
        **{k: v for k, v in record.items() if not k.endswith("_ms")},
        "boots": [{k: v for k, v in b.items() if k != "heard_ms"} for b in record["boots"]],
    }


def remembered(client: Client, node_id: str = "gpu-1") -> dict[str, int]:
    """The boots remembered on a node (``boots:{id}``), each with its last seq."""
    raw = client.redis.get(client.keys.boots(node_id))
    return {boot: seq for boot, (_, seq) in json.loads(raw).items()} if raw else {}


def refused(client: Client) -> int:
    return int(client.redis.hget(client.keys.stats, "conflict_heartbeats") or 0)


def test_two_agents_on_one_node_id_do_not_re_plan_its_jobs_at_every_heartbeat(client: Client) -> None:
    twins = Twins(client)
    twins.beat("boot-a")
    job = client.submit(request())
    drain(client)
    assert [p.node_id for p in client.get(job).placement] == ["gpu-1"]
    restarts = 0
    replies = []
    for boot in ["boot-b", "boot-a"] * 4:
        replies.append(twins.beat(boot))
        restarts += len(client.redis.smembers(client.keys.restarts))
        drain(client)  # a worker runs what each heartbeat queued before the next one comes
    # the first new boot cannot be told from a restart (its jobs planned again, there); the old one heard
    # again is a second agent: the node leaves the pool, and no heartbeat after is a restart
    assert replies == [Beat.OK] + [Beat.CONFLICT] * 7
    assert restarts == 1
    assert "gpu-1" not in client.pool().records
    assert client.redis.get(client.keys.node("gpu-1")) is None
    assert conflict(client) == {
        "node_id": "gpu-1",
        "boots": [{"boot_id": "boot-a", "seq": 1_005}, {"boot_id": "boot-b", "seq": 5_004}],
        "last_boot": "boot-a",
        "flips": 7,
        "refused": 7,
        "schema_version": 1,
    }
    assert [text(n) for n in client.redis.zrange(client.keys.conflicts, 0, -1)] == ["gpu-1"]
    assert remembered(client) == {"boot-a": 1_005, "boot-b": 5_004}
    assert refused(client) == 7
    placed_once = client.get(job).version

    # the sweep finds the node without a heartbeat and hands its jobs on, once, as for a silent node
    client.heartbeat(hb("gpu-2", gpus=2))
    drain(client)
    assert maintenance.sweep(client.store, force=True)["node_silent"] == 1
    assert queued_functions(client) == [SILENT]
    drain(client)
    rec = client.get(job)
    assert rec.version == placed_once + 1 and [p.node_id for p in rec.placement] == ["gpu-2"]
    assert event_reasons(client, job)[2:] == [
        "placed original on 1 × h100-80g: gpu-1",
        "node gpu-1 restarted; placed original on 1 × h100-80g: gpu-1",
        "node gpu-1 is claimed by two agents; placed original on 1 × h100-80g: gpu-2",
    ]
    assert client.store.node_ids() == ["gpu-2"]

    # the two go on: nothing moves, and a job submitted now goes where a node is
    assert twins.flap(3) == [Beat.CONFLICT] * 6
    assert queued_functions(client) == [] and client.get(job).version == rec.version
    assert maintenance.sweep(client.store, force=True)["node_silent"] == 0
    later = client.submit(request())
    drain(client)
    assert [p.node_id for p in client.get(later).placement] == ["gpu-2"]
    assert whole_state(client) == {
        "index": {"placed": sorted([job, later])},
        "records": {job: "placed", later: "placed"},
        "held": {"gpu-2": {job: 1, later: 1}},
        "held_nodes": ["gpu-2"],
    }
    assert conflict(client)["flips"] == 13 and refused(client) == 13
    assert client.store.node_ids() == ["gpu-2"]
    assert client.store.snapshot().records.keys() == {"gpu-2"}


def test_a_restart_whose_old_boot_is_never_heard_again_stays_a_restart(client: Client) -> None:
    """A new boot is a restart, as it always was; the old one is remembered, and a heartbeat of it that
    was sent before the restart and arrives late (its seq no later than its last) changes nothing."""
    client.heartbeat(hb("gpu-1", gpus=1, seq=7, boot="boot-1"))
    job = client.submit(request())
    drain(client)
    assert client.publish(hb("gpu-1", gpus=1, seq=1, boot="boot-2")) is Beat.OK
    assert client.redis.smembers(client.keys.restarts) == {b"gpu-1"}
    drain(client)
    assert event_reasons(client, job)[-1] == "node gpu-1 restarted; placed original on 1 × h100-80g: gpu-1"
    assert client.publish(hb("gpu-1", gpus=1, free=0, seq=2, boot="boot-2")) is Beat.OK
    assert client.publish(hb("gpu-1", gpus=1, seq=7, boot="boot-1")) is Beat.STALE  # late
    assert client.publish(hb("gpu-1", gpus=1, seq=6, boot="boot-1")) is Beat.STALE
    assert remembered(client) == {"boot-1": 7}
    assert queued_functions(client) == []
    stored = client.pool().records["gpu-1"]
    assert (stored.boot_id, stored.seq) == ("boot-2", 2)
    assert client.redis.exists(client.keys.conflict("gpu-1"), client.keys.conflicts) == 0
    assert client.conflicts() == [] and refused(client) == 0
    assert [h.boot_id for h in client.store.held_on("gpu-1").values()] == ["boot-2"]


def test_the_node_rejoins_once_one_agent_alone_is_heard(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """Heartbeats of one boot do not keep a conflict on; one boot alone for ``CONFLICT_CLEAR_MS`` past the
    last flip ends it, and the next heartbeat is the node joining. The other agent heard again after that
    is a conflict at once, not a restart."""
    twins = Twins(client)
    twins.beat("boot-a")
    assert twins.flap(1) == [Beat.OK, Beat.CONFLICT]
    key = client.keys.conflict("gpu-1")
    left = client.redis.pttl(key)
    assert twins.beat("boot-a") is Beat.CONFLICT  # the same boot again: not a flip, its time runs on
    assert 0 < client.redis.pttl(key) <= left and conflict(client)["flips"] == 1
    monkeypatch.setattr(C, "CONFLICT_CLEAR_MS", 300)
    assert twins.beat("boot-b") is Beat.CONFLICT  # a flip: its time starts again, now 300 ms
    time.sleep(0.4)
    assert client.conflicts() == []
    assert twins.beat("boot-b") is Beat.OK
    assert client.pool().records["gpu-1"].boot_id == "boot-b" and queued_functions(client) == []
    maintenance.sweep(client.store, force=True)
    assert client.redis.zcard(client.keys.conflicts) == 0
    assert twins.beat("boot-a") is Beat.CONFLICT
    assert queued_functions(client) == [] and "gpu-1" not in client.pool().records
    assert conflict(client)["boots"] == [{"boot_id": "boot-a", "seq": 1_004}, {"boot_id": "boot-b", "seq": 5_003}]


def test_both_agents_in_one_relay_batch(client: Client) -> None:
    """A relay forwarding both agents' heartbeats in one call: each checked against the one before it, as
    one call each would. The intake takes the call's outcome: the node gone, its conflict indexed."""
    twins = Twins(client)
    twins.beat("boot-a")
    client.redis.delete(client.keys.pool_changes)
    beats = [twins.next("boot-a"), twins.next("boot-b"), twins.next("boot-a"), twins.next("boot-b")]
    assert client.publish_all([json.dumps(b) for b in beats]) == [Beat.OK, Beat.OK, Beat.CONFLICT, Beat.CONFLICT]
    entries: Any = client.redis.xrange(client.keys.pool_changes)
    assert [sorted(text(k) for k in fields) for _, fields in entries] == [["gone", "n"]]
    assert "gpu-1" not in client.store.snapshot().records
    assert conflict(client)["flips"] == 2 and refused(client) == 2


def test_a_conflict_shows_in_status_and_in_the_metrics(client: Client, capsys: pytest.CaptureFixture[str]) -> None:
    kw = client.redis.get_connection_kwargs()
    url = f"redis://{kw['host']}:{kw['port']}/0"
    twins = Twins(client)
    client.heartbeat(hb("gpu-2", gpus=1))
    twins.beat("boot-a")
    twins.flap(2)
    args = ["heartbeat", "--redis-url", url, "--node-id", "gpu-1", "--gpu-class", "h100-80g", "--gpus", "2"]
    args += ["--free-gpus", "2", "--host-mem-gb", "256", "--host-free-gb", "256", "--boot-id", "boot-b"]
    assert main([*args, "--seq", "9000"]) == 0
    assert main(["status", "--redis-url", url]) == 0
    said = capsys.readouterr().out.splitlines()
    assert said[0] == "conflict: another agent publishes as node gpu-1; not stored (see modelplan status)"
    [since] = [c.since for c in client.conflicts()]
    line = f"node gpu-1 claimed by 2 agents (boots boot-a, boot-b) since {since.isoformat(timespec='seconds')}, 4 flips"
    assert [s for s in said if "claimed" in s] == [line + ": out of the pool"]
    assert said[1] == "1 node in the pool"

    got = {
        (s.name, tuple(s.labels.items())): s.value
        for f in text_string_to_metric_families(exposition(client))
        for s in f.samples
    }
    assert got[("modelplan_node_conflicts", ())] == 1
    assert got[("modelplan_conflict_heartbeats_total", ())] == 4
    assert got[("modelplan_nodes", (("gpu_class", "h100-80g"),))] == 1


def test_each_agent_says_once_that_another_publishes_under_its_node_id(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = Agent("gpu-1", FakeReader(IDLE), client, boot_id="boot-a", first_seq=100)
    b = Agent("gpu-1", FakeReader(IDLE), client, boot_id="boot-b", first_seq=900)
    with capture_logs() as logs:
        for agent in [a, b] * 4:
            agent.tick()
        monkeypatch.setattr(C, "CONFLICT_CLEAR_MS", 300)
        a.tick()  # the last flip: B is heard no more
        time.sleep(0.4)
        a.tick()
        a.tick()
    said = [(e["event"], e.get("boot_id")) for e in logs if e["event"].startswith("node_conflict")]
    assert said == [("node_conflict", "boot-a"), ("node_conflict", "boot-b"), ("node_conflict_cleared", "boot-a")]
    warning = next(e for e in logs if e["event"] == "node_conflict")
    assert warning["log_level"] == "warning" and warning["node_id"] == "gpu-1"
    assert client.pool().records["gpu-1"].boot_id == "boot-a"


def test_ids_named_after_fixed_keys_have_their_own_conflict(client: Client) -> None:
    """A node whose id is the name of the index (``conflicts``) or of a key family: its record and the
    index stay apart."""
    k = Keys("mp")
    assert [k.conflict("n1"), k.conflicts, k.boots("n1")] == ["mp:conflict:n1", "mp:conflicts", "mp:boots:n1"]
    for node_id in ("conflicts", "boots", "conflict"):
        twins = Twins(client, node_id)
        twins.beat("boot-a")
        assert twins.flap(1) == [Beat.OK, Beat.CONFLICT]
    assert [c.node_id for c in client.conflicts()] == ["boots", "conflict", "conflicts"]
    assert client.redis.type(client.keys.conflicts) == b"zset"
    assert client.conflicts()[2] == ConflictRecord(
        node_id="conflicts",
        boots=(
            BootHeard(boot_id="boot-a", heard_ms=client.conflicts()[2].boots[0].heard_ms, seq=1_002),
            BootHeard(boot_id="boot-b", heard_ms=client.conflicts()[2].boots[1].heard_ms, seq=5_001),
        ),
        last_boot="boot-a",
        flips=1,
        since_ms=client.conflicts()[2].since_ms,
        last_heard_ms=client.conflicts()[2].last_heard_ms,
        refused=1,
    )
