"""What a heartbeat says that the sweep refuses is logged by node, not by entry: an agent may list thousands
of made-up holds as started and ended in every heartbeat, and each sweep says so in one line for its node
(how many, a few of them), with the lines of one sweep bounded however many nodes do it."""

from __future__ import annotations

import json
from collections.abc import Iterator, MutableMapping, Sequence
from itertools import count
from typing import Any

import pytest
from structlog.testing import capture_logs

from producer import Client
from tests.worker.helpers import hb
from worker import maintenance, metrics, refused
from worker.reports import FOOTPRINTS, MAX_STARTED

SEQ = count(1)


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    FOOTPRINTS.take()
    metrics.forget()
    yield
    FOOTPRINTS.take()
    metrics.forget()


def made_up(node: str, holds: tuple[str, ...], why: str) -> dict[str, Any]:
    """A heartbeat of ``node`` listing ``holds`` (none of them on it) as started, each ended for ``why``."""
    return hb(node, gpus=1, free=0, seq=next(SEQ), started=holds) | {"ended": dict.fromkeys(holds, why)}


def refusals(logged: Sequence[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [e for e in logged if str(e["event"]).startswith("engine_ended_refused")]


def test_thousands_of_made_up_ends_are_one_line_a_sweep(client: Client) -> None:
    holds = tuple(f"made-up-{i}:0:1" for i in range(MAX_STARTED))
    state = maintenance.SweepState()
    with capture_logs() as logged:
        for sweep in range(3):  # a new reason each time: nothing the sweeps said already
            client.heartbeat(made_up("g1", holds, f"exit status {sweep}"))
            client.store.snapshot()  # the worker's mirror reads the record; its sweep takes it
            maintenance.sweep(client.store, force=True, state=state)
    lines = refusals(logged)
    assert len(lines) == 3, [e["event"] for e in logged]
    for line in lines:
        assert (line["event"], line["node_id"], line["refused"]) == ("engine_ended_refused", "g1", MAX_STARTED)
        assert len(line["holds"]) == refused.EXAMPLES and set(line["holds"]) <= set(holds)
        assert len(json.dumps(line)) < 1000
    assert metrics._pending["observations_refused"] == 3 * MAX_STARTED  # each is still counted


def test_the_same_ends_again_are_not_said_again(client: Client) -> None:
    holds = ("made-up:0:1",)
    state = maintenance.SweepState()
    with capture_logs() as logged:
        for _ in range(3):
            client.heartbeat(made_up("g1", holds, "exit status 1"))
            client.store.snapshot()
            maintenance.sweep(client.store, force=True, state=state)
    assert [(e["node_id"], e["refused"], e["holds"]) for e in refusals(logged)] == [("g1", 1, ["made-up:0:1"])]


def test_the_lines_of_one_sweep_are_bounded_however_many_nodes_make_up_ends(client: Client) -> None:
    nodes = [f"n{i:03}" for i in range(refused.NODES_LOGGED * 3)]
    client.heartbeats([made_up(n, (f"{n}-fake:0:1", f"{n}-fake:1:1"), "killed") for n in nodes])
    client.store.snapshot()
    with capture_logs() as logged:
        maintenance.sweep(client.store, force=True)
    lines = refusals(logged)
    by_node = [e for e in lines if e["event"] == "engine_ended_refused"]
    [rest] = [e for e in lines if e["event"] == "engine_ended_refused_elsewhere"]
    assert len(by_node) == refused.NODES_LOGGED and len(lines) == refused.NODES_LOGGED + 1
    assert all(e["refused"] == 2 for e in by_node)
    assert (rest["nodes"], rest["refused"]) == (
        len(nodes) - refused.NODES_LOGGED,
        2 * (len(nodes) - refused.NODES_LOGGED),
    )
    assert metrics._pending["observations_refused"] == 2 * len(nodes)


def test_thousands_of_made_up_footprints_are_one_line_a_sweep(client: Client) -> None:
    """Footprints for holds not on the node, with figures that change every heartbeat (so none is a repeat
    the sweep skips): one line a sweep for the node, every one counted."""
    holds = tuple(f"made-up-{i}:0:1" for i in range(MAX_STARTED))
    state = maintenance.SweepState()
    with capture_logs() as logged:
        for sweep in range(3):
            fp = {"engine": "vllm", "source": "nvml", "card_bytes": [2**30 + sweep]}
            beat = hb("g1", gpus=1, free=0, seq=next(SEQ), started=holds) | {"footprints": dict.fromkeys(holds, fp)}
            client.heartbeat(beat)
            client.store.snapshot()
            maintenance.sweep(client.store, force=True, state=state)
    lines = [e for e in logged if str(e["event"]).startswith("footprint_refused")]
    assert [(e["event"], e["node_id"], e["refused"]) for e in lines] == [("footprint_refused", "g1", MAX_STARTED)] * 3
    assert all(len(e["holds"]) == refused.EXAMPLES and len(json.dumps(e)) < 1000 for e in lines)
    assert metrics._pending["observations_refused"] == 3 * MAX_STARTED
