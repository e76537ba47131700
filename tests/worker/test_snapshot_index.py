"""Pure: a snapshot whose nodes are indexed, changed through every path a worker changes it by (heartbeats,
nodes leaving, holds written and cleared, commits, copies), sees each job's nodes as a snapshot built anew
from the same records and holds does, and as the rule for what is free says."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from planner import PoolNode
from planner.index import PoolIndex
from tests.worker.helpers import hb
from worker.ids import job_of_hold
from worker.pool import Held, HoldSpec, ParsedNode, Snapshot
from worker.records import utcnow
from worker.reports import NodeRecord

NODES = [f"node-{i}" for i in range(6)]
JOBS = ["job-a", "job-b", "job-c"]
HOLDS = [f"{job}:0:1" for job in JOBS] + [f"{job}:nominated" for job in JOBS]


def parsed(node_id: str, **kw: Any) -> ParsedNode:
    record = {**hb(node_id, **kw), "received_at": utcnow().isoformat()}
    return ParsedNode.of(NodeRecord.model_validate_json(json.dumps(record)))


@st.composite
def heartbeats(draw: st.DrawFn) -> tuple[str, ParsedNode]:
    node_id = draw(st.sampled_from(NODES))
    gpus = draw(st.integers(1, 8))
    host = draw(st.sampled_from([0, 64, 256]))
    return node_id, parsed(
        node_id,
        gpu_class=draw(st.sampled_from(["h100-80g", "a100-40g", ""])),
        gpus=gpus,
        free=draw(st.integers(0, gpus)),
        host=host,
        host_free=draw(st.integers(0, host)),
        fabric=draw(st.sampled_from(["", "ib"])),
        started=tuple(draw(st.lists(st.sampled_from(HOLDS), max_size=2))),
    )


def holds() -> st.SearchStrategy[Held]:
    return st.builds(Held, st.integers(0, 4), st.sampled_from([0.0, 8.0]), st.just("boot-1"), st.booleans())


step = st.one_of(
    st.tuples(st.just("put"), heartbeats()),
    st.tuples(st.just("drop"), st.sampled_from(NODES)),
    st.tuples(st.just("hold"), st.sampled_from(NODES), st.sampled_from(HOLDS), st.none() | holds()),
    st.tuples(
        st.just("apply"),
        st.lists(
            st.builds(
                HoldSpec, st.sampled_from(NODES), st.sampled_from(HOLDS), st.integers(0, 4), st.just(0.0), st.booleans()
            ),
            max_size=3,
        ),
        st.lists(st.tuples(st.sampled_from(NODES), st.sampled_from(HOLDS), st.just("h100-80g")), max_size=3),
    ),
    st.tuples(st.just("copy")),
    st.tuples(st.just("plan"), st.sampled_from([None, *JOBS])),
)


def expected(snap: Snapshot, job_id: str | None) -> list[PoolNode]:
    """What is free for ``job_id``: what the agent reports, less what holds it does not show yet, but for
    the job's own nomination."""
    out = []
    for node_id, rec in snap.records.items():
        node = rec.to_pool_node()
        unseen = [
            h
            for hid, h in snap.held.get(node_id, {}).items()
            if hid not in rec.started and not (h.nominated and job_of_hold(hid) == job_id)
        ]
        if unseen:
            node = replace(
                node,
                free_gpus=max(0, node.free_gpus - sum(h.gpus for h in unseen)),
                host_free_gb=max(0, int(node.host_free_gb - sum(h.host_gb for h in unseen))),
            )
        out.append(node)
    return out


def others(snap: Snapshot, job_id: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for node_id, hs in snap.held.items():
        for hid, h in hs.items():
            if h.nominated and job_of_hold(hid) != job_id:
                out[node_id] = out.get(node_id, 0) + h.gpus
    return {n: c for n, c in out.items() if c}


@given(st.lists(step, max_size=40))
@settings(max_examples=300, deadline=None)
def test_an_indexed_snapshot_kept_up_to_date_sees_what_one_built_anew_sees(steps: list[tuple[Any, ...]]) -> None:
    snap = Snapshot("0", {}, {})
    snap.nodes_for(None)  # indexed from the start, so that every change goes through the index
    for what, *args in steps:
        if what == "put":
            snap.put_node(args[0][0], args[0][1])
        elif what == "drop":
            snap.drop_node(args[0])
        elif what == "hold":
            snap.set_hold(*args)
        elif what == "apply":
            snap.apply(*args)
        elif what == "copy":
            before = list(snap.nodes_for(None))
            copy = snap.copy()
            copy.drop_node(NODES[0])
            copy.apply([HoldSpec(NODES[1], HOLDS[0], 8)], [])
            assert list(snap.nodes_for(None)) == before  # the copy changes apart
            snap = snap.copy()
        else:
            list(snap.nodes_for(args[0]))
    built = Snapshot("0", dict(snap.records), {n: dict(h) for n, h in snap.held.items()})
    for job in [None, *JOBS]:
        assert list(snap.nodes_for(job)) == list(built.nodes_for(job)) == expected(snap, job)
    for job in JOBS:
        assert snap.held_for_others(job) == built.held_for_others(job) == others(snap, job)
    assert snap.nodes == built.nodes == expected(snap, None)
    index = snap.nodes_for(None).index
    fresh = PoolIndex(expected(snap, None))
    assert [getattr(index, s) for s in PoolIndex.__slots__ if s != "_group_list"] == [
        getattr(fresh, s) for s in PoolIndex.__slots__ if s != "_group_list"
    ]


def test_a_snapshot_not_yet_planned_on_lists_its_nodes_without_indexing_them() -> None:
    snap = Snapshot("0", {}, {})
    snap.put_node("a", parsed("a", gpus=4))
    snap.set_hold("a", "job-a:0:1", Held(3, 0.0, "boot-1"))
    assert [n.free_gpus for n in snap.nodes] == [1]
    view = snap.nodes_for("job-a")
    assert list(view) == snap.nodes and not view.over
