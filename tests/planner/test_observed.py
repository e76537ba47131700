"""The ``observed`` estimate: an option of a kind the engines were measured running on enough nodes is
counted no lower than the figure those nodes agree on (with the margin), and lower than the formula only
within the margin; one node's word moves nothing, and no observation rules out an option."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from planner.constants import GIB
from planner.decide import plan_job
from planner.model import Option, PoolNode
from planner.observed import MARGIN, Seen, agreed, with_observed
from producer.examples import example_request

CARD = Option(
    artifact="a.gguf",
    format="gguf",
    engine="llamacpp",
    gpu_class="l4-24g",
    gpus_per_node=1,
    nodes=1,
    need_gb=10.0,
    have_gb=21.6,
    hosts=3,
    free_now=True,
    estimate="measured",
    settings=("-c", "8192", "-fa", "on"),
)
KV = 2 * GIB
"""The KV cache the formula counts on the card for the request."""


def seen(gib: float, node: str = "n1", *, kv: float = 0.0, context: int = 8192, **kw: object) -> Seen:
    base = Seen("a.gguf", "llamacpp", "l4-24g", 1, 1, context, ("-c", str(context), "-fa", "on"), int(gib * GIB))
    return replace(base, kv_bytes=int(kv * GIB), since="2026-12-01", node=node, release="b6500", **kw)  # type: ignore[arg-type]


def two(gib: float, **kw: Any) -> tuple[Seen, Seen]:
    """The same figure from two nodes: enough to count."""
    return seen(gib, "n1", **kw), seen(gib, "n2", **kw)


def counted(*runs: Seen, context: int = 8192, option: Option = CARD, quorum: int = 2) -> list[Option]:
    return with_observed([option], runs, context, lambda o: KV, lambda need: (2, 50.0, True), quorum)


def test_a_footprint_over_the_formula_is_counted_with_the_margin() -> None:
    (o,) = counted(seen(12.0, "n1"), seen(11.0, "n2"))
    assert o.estimate == "observed" and o.runs == 2 and o.since == "2026-12-01"
    assert o.need_gb == pytest.approx(11.0 * (1 + MARGIN)) and o.formula_gb == 10.0


def test_a_footprint_under_the_formula_lowers_it_only_within_the_margin() -> None:
    (o,) = counted(*two(4.0))
    assert o.estimate == "observed" and o.need_gb == pytest.approx(10.0 * (1 - MARGIN))


def test_with_its_kv_cache_known_a_run_at_another_context_counts_the_rest_and_this_contexts_cache() -> None:
    (o,) = counted(*two(13.0, kv=4.0, context=16_384))
    assert o.need_gb == pytest.approx((13.0 - 4.0 + 2.0) * (1 + MARGIN))


def test_without_its_kv_cache_only_a_run_at_the_same_context_counts() -> None:
    assert counted(*two(13.0, context=16_384)) == [CARD]


def test_a_run_of_another_kind_counts_nothing() -> None:
    for kw in ({"gpu_class": "h100-80g"}, {"gpus_per_node": 2}, {"artifact": "b.gguf"}):
        assert counted(*two(13.0, **kw)) == [CARD]
    changed = [replace(s, settings=("-c", "8192", "-fa", "off")) for s in two(13.0)]
    assert counted(*changed) == [CARD]


def test_one_nodes_runs_leave_the_option_to_the_formula() -> None:
    assert counted(seen(13.0, "n1"), seen(14.0, "n1")) == [CARD]
    assert counted(*two(13.0), quorum=3) == [CARD]


def test_a_deployment_that_takes_one_nodes_word_counts_it() -> None:
    (o,) = counted(seen(13.0, "n1"), quorum=1)
    assert o.estimate == "observed" and o.need_gb == pytest.approx(13.0 * (1 + MARGIN))


def test_the_figure_is_what_the_quorum_of_nodes_reached_not_the_largest() -> None:
    """One node saying more than the others moves nothing: the second-largest of the nodes' figures."""
    (o,) = counted(seen(12.0, "n1"), seen(11.0, "n2"), seen(20.0, "liar"))
    assert o.need_gb == pytest.approx(12.0 * (1 + MARGIN))
    (o,) = counted(seen(12.0, "n1"), seen(13.0, "n2"), seen(14.0, "n3"), quorum=3)
    assert o.need_gb == pytest.approx(12.0 * (1 + MARGIN))


def test_a_nodes_many_runs_count_as_one_node() -> None:
    (o,) = counted(seen(12.0, "n1"), seen(14.0, "n1"), seen(11.0, "n2"))
    assert o.runs == 2 and o.need_gb == pytest.approx(11.0 * (1 + MARGIN))


def test_releases_are_kept_apart_and_the_one_most_nodes_run_counts() -> None:
    old = [replace(seen(12.0, f"n{i}"), release="b6500") for i in range(3)]
    new = [replace(seen(16.0, f"m{i}"), release="b7000") for i in range(2)]
    (o,) = counted(*old, *new)
    assert o.runs == 3 and o.need_gb == pytest.approx(12.0 * (1 + MARGIN))


def test_a_release_one_node_names_is_its_own_and_drops_nothing() -> None:
    made_up = replace(seen(5.0, "liar"), release="999.0")
    (o,) = counted(*two(12.0), made_up)
    assert o.runs == 2 and o.need_gb == pytest.approx(12.0 * (1 + MARGIN))
    assert agreed([(made_up, made_up.bytes)]) is None


def test_an_option_whose_cards_would_not_hold_what_was_seen_stays_as_the_formula_counted_it() -> None:
    (o,) = counted(*two(21.0))
    assert replace(o, margin="") == CARD
    assert o.margin == "seen to need 22.1 GiB on 2 nodes, past the 21.6 GiB its cards offer: counted by the formula"


def test_a_cpu_option_no_node_would_hold_as_seen_stays_as_the_formula_counted_it() -> None:
    cpu = replace(CARD, cpu=True, gpu_class="", gpus_per_node=0, nodes=0, have_gb=100.0)
    runs = [replace(s, gpu_class="", gpus_per_node=0, nodes=0) for s in two(130.0)]
    (o,) = with_observed([cpu], runs, 8192, lambda o: KV, lambda need: (0, 0.0, False))
    assert replace(o, margin="") == cpu and "past any node's share of RAM" in o.margin


def test_a_cpu_replica_holds_more_ram_than_the_formula_gave() -> None:
    req = example_request("llama-3-8b-gguf", context=4096)
    nodes = [PoolNode(id="cpu-1", host_mem_gb=128, host_free_gb=128)]
    art = req.planned_artifacts()
    before = plan_job(art, req.shape, nodes, req.context)
    target = before.target
    assert target is not None and target.cpu
    hold = before.replicas[0].holds[0].host_gb
    run = Seen(target.artifact, "llamacpp", "", 0, 0, req.context, target.settings, int(hold * 1.4 * GIB))
    runs = [replace(run, since="2026-12-01", node=n) for n in ("cpu-1", "cpu-2")]
    after = plan_job(art, req.shape, nodes, req.context, seen=runs)
    assert after.target is not None and after.target.estimate == "observed" and after.target.artifact == target.artifact
    assert after.replicas[0].holds[0].host_gb == pytest.approx(hold * 1.4 * (1 + MARGIN), rel=1e-3)
