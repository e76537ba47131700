"""One node's agent cannot steer what the fleet learns of a model (``worker.observations``,
``planner.observed``): its runs are one node's, a made-up engine release drops no other node's runs, a
figure past what the cards offer never makes a job fail, and flagged footprints never push out accepted
ones."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from structlog.testing import capture_logs

from planner.constants import GIB
from planner.errors import InvalidInput
from planner.model import Option
from producer import Client
from tests.worker.helpers import hb, request
from tests.worker.test_observed import placed, settle, vllm
from worker import constants as C
from worker import metrics, observations, observed
from worker.footprints import Footprint
from worker.records import JobState, utcnow
from worker.reports import FOOTPRINTS

SEQ = iter(range(1, 1_000_000))


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    FOOTPRINTS.take()  # what another test's mirrors read
    observed.forget()
    metrics.forget()
    yield
    observed.forget()
    metrics.forget()


def on(client: Client, node: str, gpu_class: str = "h100-80g", gpus: int = 1) -> tuple[str, Option, str]:
    """A node of ``gpus`` cards joins and a job for the 8B model is placed on it (the others' cards are
    held): the job's id, its option and its hold."""
    client.heartbeat(hb(node, gpu_class, gpus=gpus, seq=next(SEQ)))
    job, option, hold = placed(client)
    assert client.get(job).placement[0].node_id == node
    return job, option, hold


def report(client: Client, node: str, footprints: dict[str, Footprint], gpu_class: str = "h100-80g") -> None:
    """A heartbeat of ``node`` (its cards all taken) with these footprints, then a sweep."""
    gpus = max(len(footprints), 1)
    client.heartbeat(hb(node, gpu_class, gpus=gpus, free=0, seq=next(SEQ), started=tuple(footprints)) | {
        "footprints": {h: f.model_dump(mode="json") for h, f in footprints.items()}
    })  # fmt: skip
    settle(client)


def kept(client: Client) -> observed.Observed | None:
    return observed.read(client.store, observed.identity(request()))


def test_one_nodes_runs_leave_the_plan_to_the_formula_and_two_nodes_agreeing_move_it(client: Client) -> None:
    _, first, h1 = on(client, "g1")
    report(client, "g1", {h1: vllm(first.need_gb * 1.3)})
    observed.forget()
    _, second, h2 = on(client, "g2")
    assert second.estimate == "measured" and second.need_gb == first.need_gb  # one node's word: unconfirmed
    report(client, "g2", {h2: vllm(first.need_gb * 1.2)})
    observed.forget()
    _, third, _ = on(client, "g3")
    assert third.estimate == "observed" and third.runs == 2
    # the figure both nodes reached: the second-largest, never the largest one node said
    assert third.need_gb == pytest.approx(first.need_gb * 1.2 * 1.05, rel=1e-3)


def test_a_made_up_engine_release_drops_no_other_nodes_runs(client: Client) -> None:
    """One node reporting release 999.0 used to drop every honest run of the kind, and honest reports at
    the real release were then refused as older for 30 days."""
    _, first, h1 = on(client, "g1")
    _, _, h2 = on(client, "g2")
    _, _, h3 = on(client, "g3")
    seen = first.need_gb * 1.4
    report(client, "g1", {h1: vllm(seen)})
    report(client, "g2", {h2: vllm(seen)})
    report(client, "g3", {h3: vllm(first.need_gb * 0.6, "999.0")})  # within judgement: kept, not flagged
    observed.forget()
    _, fourth, h4 = on(client, "g4")
    assert fourth.estimate == "observed" and fourth.need_gb == pytest.approx(seen * 1.05, rel=1e-3)
    report(client, "g4", {h4: vllm(seen)})  # a later honest report at the real release is kept
    got = kept(client)
    assert got is not None
    assert sorted((r.node, r.version) for r in got.kinds[0].runs) == [
        ("g1", "0.11.0"),
        ("g2", "0.11.0"),
        ("g3", "999.0"),
        ("g4", "0.11.0"),
    ]


def test_one_node_reporting_its_card_full_does_not_make_a_job_fail(client: Client) -> None:
    """A 24 GiB card reported as 23.5 GiB used passes judgement (within the card, within twice the
    formula); a plan counting it needs 24.7 GiB, past the card, and the next job failed."""
    _, first, h1 = on(client, "g1", "l4-24g")
    report(client, "g1", {h1: vllm(23.5)}, "l4-24g")
    observed.forget()
    job, second, _ = on(client, "g2", "l4-24g")
    assert client.get(job).state is JobState.PLACED
    assert second.estimate == "measured" and second.need_gb == first.need_gb


def test_nodes_agreeing_on_more_than_the_cards_offer_leave_the_option_to_the_formula(client: Client) -> None:
    _, first, h1 = on(client, "g1", "l4-24g")
    _, _, h2 = on(client, "g2", "l4-24g")
    report(client, "g1", {h1: vllm(23.5)}, "l4-24g")
    report(client, "g2", {h2: vllm(23.5)}, "l4-24g")
    observed.forget()
    job, third, _ = on(client, "g3", "l4-24g")
    assert client.get(job).state is JobState.PLACED
    assert third.estimate == "measured" and third.need_gb == first.need_gb
    assert "seen to need 24.7 GiB on 2 nodes" in third.margin


def test_a_flagged_footprint_of_the_same_hold_keeps_its_accepted_run(client: Client) -> None:
    """An engine's figure past twice the formula, after an accepted one, used to replace it."""
    _, first, h1 = on(client, "g1")
    report(client, "g1", {h1: vllm(first.need_gb * 1.2)})
    report(client, "g1", {h1: vllm(first.need_gb * 2.5)})
    got = kept(client)
    assert got is not None
    assert [(r.hold_id, r.flagged) for r in got.kinds[0].runs] == [(h1, False)]
    assert [(r.hold_id, r.flagged) for r in got.kinds[0].flagged] == [(h1, True)]


def test_flagged_footprints_of_many_holds_never_push_out_an_accepted_run(client: Client) -> None:
    """Load-time readings, flagged, used to fill the window of runs and drop the one accepted."""
    _, first, h1 = on(client, "g1")
    report(client, "g1", {h1: vllm(first.need_gb * 1.2)})
    client.heartbeat(hb("g2", "h100-80g", gpus=9, seq=next(SEQ)))
    holds = [placed(client)[2] for _ in range(9)]
    report(client, "g2", {h: vllm(first.need_gb * 0.3) for h in holds})
    got = kept(client)
    assert got is not None
    assert [(r.node, r.hold_id) for r in got.kinds[0].runs] == [("g1", h1)]
    assert [r.node for r in got.kinds[0].flagged] == ["g2"]  # one node, one slot


def test_flagged_footprints_are_not_planned_with(client: Client) -> None:
    _, first, h1 = on(client, "g1")
    _, _, h2 = on(client, "g2")
    report(client, "g1", {h1: vllm(first.need_gb * 2.5)})
    report(client, "g2", {h2: vllm(first.need_gb * 2.5)})
    observed.forget()
    _, third, _ = on(client, "g3")
    assert third.estimate == "measured"


def test_one_nodes_many_holds_fill_one_slot(client: Client) -> None:
    client.heartbeat(hb("g1", "h100-80g", gpus=3, seq=next(SEQ)))
    _, first, h1 = placed(client)
    holds = [h1, placed(client)[2], placed(client)[2]]
    report(client, "g1", {h: vllm(first.need_gb * (1.1 + i / 10)) for i, h in enumerate(holds)})
    got = kept(client)
    assert got is not None and [(r.node, r.hold_id) for r in got.kinds[0].runs] == [("g1", holds[2])]  # its peak


# --- the stored record: its bounds, and what an older modelplan wrote ------------------------------------

KIND = observed.Kind(artifact="original", engine="vllm", gpu_class="h100-80g", gpus_per_node=1, nodes=1, context=8192)


def run(node: str, gib: float = 1.0, *, version: str = "0.11.0", flagged: bool = False, **kw: Any) -> observed.Run:
    fields: dict[str, Any] = {"at": utcnow(), "formula_bytes": GIB, "ratio": gib} | kw
    return observed.Run(
        hold_id=f"j-{node}:0:1", node=node, version=version, bytes=int(gib * GIB), flagged=flagged, **fields
    )


def runs_of(*runs: observed.Run) -> observed.Observed:
    got: observed.Observed | None = None
    for r in runs:
        got = observations.added(got, "m", KIND, r) or got
    assert got is not None
    return got


def test_the_window_keeps_the_latest_nodes_at_its_edge() -> None:
    """Exactly ``OBSERVED_NODES_KEPT`` nodes' runs are kept; one more node's run drops the node written
    longest ago, and a node written again is the latest."""
    n = C.OBSERVED_NODES_KEPT
    full = runs_of(*(run(f"n{i}") for i in range(n)))
    assert [r.node for r in full.kinds[0].runs] == [f"n{i}" for i in range(n)]
    over = observations.added(full, "m", KIND, run(f"n{n}"))
    assert over is not None and [r.node for r in over.kinds[0].runs] == [f"n{i}" for i in range(1, n + 1)]
    again = observations.added(over, "m", KIND, run("n1", 1.5))
    assert again is not None and [r.node for r in again.kinds[0].runs][-1] == "n1"
    assert len(again.kinds[0].runs) == n


def test_flagged_runs_are_kept_apart_within_their_own_bound() -> None:
    many = runs_of(run("ok", 1.1), *(run(f"f{i}", 3.0, flagged=True) for i in range(C.OBSERVED_FLAGGED_KEPT + 3)))
    assert [r.node for r in many.kinds[0].runs] == ["ok"]
    assert len(many.kinds[0].flagged) == C.OBSERVED_FLAGGED_KEPT and many.kinds[0].flagged[-1].node == "f6"


def test_a_record_past_its_bytes_drops_the_kinds_written_longest_ago(monkeypatch: pytest.MonkeyPatch) -> None:
    kinds = [KIND.model_copy(update={"context": 1024 * (i + 1)}) for i in range(6)]
    one = observations.added(None, "m", kinds[0], run("n1"))
    assert one is not None
    monkeypatch.setattr(C, "OBSERVED_RECORD_BYTES", len(one.model_dump_json()) * 3)
    got: observed.Observed | None = None
    for k in kinds:
        got = observations.added(got, "m", k, run("n1"))
    assert got is not None and len(got.model_dump_json()) <= C.OBSERVED_RECORD_BYTES
    assert [k.context for k in got.kinds] == [k.context for k in kinds[-len(got.kinds) :]] and len(got.kinds) < 6


def test_runs_older_than_the_ttl_are_not_planned_with() -> None:
    old = utcnow() - timedelta(seconds=C.OBSERVED_TTL_S + 60)
    got = runs_of(run("n1", 1.2, at=old), run("n2"))
    assert [s.node for s in observed.as_seen(got)] == ["n2"]
    renewed = observations.added(got, "m", KIND, run("n1", 1.1))  # lower than its old peak, and taken now
    assert renewed is not None and [s.node for s in observed.as_seen(renewed)] == ["n2", "n1"]


OLDER = {
    "model": "llama-3.1-8b-instruct",
    "kinds": [
        {
            "artifact": "original",
            "engine": "vllm",
            "gpu_class": "h100-80g",
            "gpus_per_node": 1,
            "nodes": 1,
            "context": 8192,
            "settings": [],
            "version": "0.11.0",
            "runs": [
                {"hold_id": f"j{i}:0:1", "at": "2026-12-01T00:00:00Z", "bytes": (20 + i) * GIB,
                 "kv_bytes": 0, "formula_bytes": 19 * GIB, "ratio": 1.1, "flagged": i == 2}
                for i in range(4)
            ],
        }
    ],
}  # fmt: skip
"""A record as the modelplan before runs named their node wrote it: the release on the kind, a flagged run
among the others."""


def test_a_record_an_older_modelplan_wrote_is_read_its_unnamed_runs_as_one_node(client: Client) -> None:
    ident = observed.identity(request())
    client.redis.set(client.keys.observed(ident), json.dumps(OLDER))
    got = observed.read(client.store, ident)
    assert got is not None
    (kind,) = got.kinds
    assert [(r.hold_id, r.node, r.version) for r in kind.runs] == [("j3:0:1", "", "0.11.0")]  # the peak
    assert [(r.hold_id, r.version) for r in kind.flagged] == [("j2:0:1", "0.11.0")]
    # and it is written over as this one: a node's run beside the unnamed one
    new = observations.added(got, got.model, KIND, run("g1", 1.2))
    assert new is not None and [r.node for r in new.kinds[0].runs] == ["", "g1"]


@pytest.mark.parametrize(
    "raw",
    ["{not json", json.dumps({"model": 1}), "x" * (C.OBSERVED_RECORD_BYTES + 1)],
    ids=["not JSON", "another shape", "past its bytes"],
)
def test_a_record_that_does_not_parse_is_said_and_planned_without(client: Client, raw: str) -> None:
    client.heartbeat(hb("g1", "h100-80g", gpus=2, seq=next(SEQ)))
    client.redis.set(client.keys.observed(observed.identity(request())), raw)
    with capture_logs() as events:
        _, option, hold = placed(client)
    assert option.estimate == "measured"
    assert [e["event"] for e in events].count("observed_unreadable") == 1
    report(client, "g1", {hold: vllm(option.need_gb * 1.1)})  # and the next run writes over it
    got = kept(client)
    assert got is not None and [r.hold_id for r in got.kinds[0].runs] == [hold]


@pytest.mark.parametrize("given", ["0", "two", "99"])
def test_a_quorum_setting_out_of_range_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch, given: str) -> None:
    monkeypatch.setenv(observed.QUORUM_ENV, given)
    with pytest.raises(InvalidInput) as e:
        observed.quorum()
    assert str(e.value) == (
        f"{observed.QUORUM_ENV}: (setting): must be a whole number from 1 to {C.OBSERVED_NODES_KEPT} (given {given!r})"
    )
