"""The ``observed`` estimate: an option of a kind the engines were measured running is counted no lower
than the largest footprint seen (with the margin), and lower than the formula only within the margin."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.constants import GIB
from planner.decide import plan_job
from planner.model import Option, PoolNode
from planner.observed import MARGIN, Seen, with_observed
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


def seen(gib: float, *, kv: float = 0.0, context: int = 8192, **kw: object) -> Seen:
    base = Seen("a.gguf", "llamacpp", "l4-24g", 1, 1, context, ("-c", str(context), "-fa", "on"), int(gib * GIB))
    return replace(base, kv_bytes=int(kv * GIB), since="2026-12-01", **kw)  # type: ignore[arg-type]


def counted(*runs: Seen, context: int = 8192, option: Option = CARD) -> list[Option]:
    return with_observed([option], runs, context, lambda o: KV, lambda need: (2, 50.0, True))


def test_a_footprint_over_the_formula_is_counted_with_the_margin() -> None:
    (o,) = counted(seen(12.0), seen(11.0))
    assert o.estimate == "observed" and o.runs == 2 and o.since == "2026-12-01"
    assert o.need_gb == pytest.approx(12.0 * (1 + MARGIN)) and o.formula_gb == 10.0


def test_a_footprint_under_the_formula_lowers_it_only_within_the_margin() -> None:
    (o,) = counted(seen(4.0))
    assert o.estimate == "observed" and o.need_gb == pytest.approx(10.0 * (1 - MARGIN))


def test_with_its_kv_cache_known_a_run_at_another_context_counts_the_rest_and_this_contexts_cache() -> None:
    (o,) = counted(seen(13.0, kv=4.0, context=16_384))
    assert o.need_gb == pytest.approx((13.0 - 4.0 + 2.0) * (1 + MARGIN))


def test_without_its_kv_cache_only_a_run_at_the_same_context_counts() -> None:
    assert counted(seen(13.0, context=16_384)) == [CARD]


def test_a_run_of_another_kind_counts_nothing() -> None:
    for other in (seen(13.0, gpu_class="h100-80g"), seen(13.0, gpus_per_node=2), seen(13.0, artifact="b.gguf")):
        assert counted(other) == [CARD]
    changed = replace(seen(13.0), settings=("-c", "8192", "-fa", "off"))
    assert counted(changed) == [CARD]


def test_an_option_whose_cards_no_longer_hold_what_was_seen_is_dropped() -> None:
    assert counted(seen(21.0)) == []


def test_a_cpu_replica_holds_more_ram_than_the_formula_gave() -> None:
    req = example_request("llama-3-8b-gguf", context=4096)
    nodes = [PoolNode(id="cpu-1", host_mem_gb=128, host_free_gb=128)]
    art = req.planned_artifacts()
    before = plan_job(art, req.shape, nodes, req.context)
    target = before.target
    assert target is not None and target.cpu
    hold = before.replicas[0].holds[0].host_gb
    run = Seen(target.artifact, "llamacpp", "", 0, 0, req.context, target.settings, int(hold * 1.4 * GIB))
    after = plan_job(art, req.shape, nodes, req.context, seen=[replace(run, since="2026-12-01")])
    assert after.target is not None and after.target.estimate == "observed" and after.target.artifact == target.artifact
    assert after.replicas[0].holds[0].host_gb == pytest.approx(hold * 1.4 * (1 + MARGIN), rel=1e-3)
