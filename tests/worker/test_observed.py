"""What the engines were measured to hold reaches the workers through the heartbeats' footprints and
counts in the next plan for the same model (``worker.observations``, ``planner.observed``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from planner.constants import GIB
from planner.model import Option
from producer import Client
from producer.metrics import exposition
from producer.render import job_text, status_text
from tests.worker.helpers import drain, hb, request
from worker import maintenance, metrics, observations, observed
from worker.footprints import Footprint
from worker.records import JobState, utcnow
from worker.reports import FOOTPRINTS
from worker.scripts import text

SEQ = iter(range(1, 1_000_000))


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    FOOTPRINTS.take()  # what another test's mirrors read
    observed.forget()
    metrics.forget()
    yield
    observed.forget()
    metrics.forget()


def placed(client: Client) -> tuple[str, Option, str]:
    """A job for the 8B model placed on one card: its id, its option, its hold id."""
    job = client.submit(request())
    drain(client)
    rec = client.get(job)
    assert rec.state is JobState.PLACED and rec.option is not None
    return job, rec.option, rec.placement[0].hold_id


def report(client: Client, node: str, footprints: dict[str, Footprint], gpus: int = 2) -> None:
    """A heartbeat of ``node`` (an H100 node of ``gpus`` cards) with these footprints, then a sweep."""
    started = tuple(footprints)
    client.heartbeat(hb(node, "h100-80g", gpus=gpus, free=0, seq=next(SEQ), started=started) | {
        "footprints": {h: f.model_dump(mode="json") for h, f in footprints.items()}
    })  # fmt: skip
    settle(client)


def settle(client: Client) -> None:
    """A worker's mirror keeps up with the pool (reading the changed node records), then its sweep runs."""
    client.store.snapshot()
    maintenance.sweep(client.store, force=True)


def vllm(gib: float, version: str = "0.11.0", kv: float = 0.0) -> Footprint:
    return Footprint(
        engine="vllm", version=version, source="nvml", card_bytes=(int(gib * GIB),), kv_bytes=int(kv * GIB)
    )


def counted(name: str) -> int:
    return int(metrics._pending.get(name, 0))


def kept(client: Client) -> observed.Observed | None:
    return observed.read(client.store, observed.identity(request()))


def test_a_second_job_for_the_same_model_is_planned_observed_and_gets_more_memory(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the deployment takes one node's word (``MODELPLAN_OBSERVED_QUORUM=1``); by default two nodes
    must agree (tests/worker/test_observed_nodes.py)."""
    monkeypatch.setenv(observed.QUORUM_ENV, "1")
    client.heartbeat(hb("g1", "h100-80g", gpus=2, seq=next(SEQ)))
    _, first, hold = placed(client)
    assert first.estimate == "measured"
    over = first.need_gb * 1.3
    report(client, "g1", {hold: vllm(over)})
    observed.forget()  # as another worker: read from Redis
    client.heartbeat(hb("g2", "h100-80g", gpus=2, seq=1))
    job, second, _ = placed(client)
    assert second.estimate == "observed" and second.runs == 1 and second.since
    assert second.need_gb == pytest.approx(over * 1.05, rel=1e-3)
    assert second.need_gb > first.need_gb and second.formula_gb == first.need_gb
    assert second.to_json()["estimate"] == "observed" and second.to_json()["runs"] == 1
    said = job_text(client.get(job))
    assert f"{second.need_gb:.1f} GiB, observed (1 run since {second.since}; the formula {first.need_gb:.1f})" in said


def test_the_same_footprint_again_adds_nothing(client: Client) -> None:
    client.heartbeat(hb("g1", "h100-80g", gpus=2, seq=next(SEQ)))
    _, first, hold = placed(client)
    for _ in range(3):
        report(client, "g1", {hold: vllm(first.need_gb)})
        maintenance.sweep(client.store, force=True)  # a sweeper that starts afresh takes it once more
    got = kept(client)
    assert got is not None and [len(k.runs) for k in got.kinds] == [1]


def test_a_footprint_for_a_hold_not_on_its_node_is_refused(client: Client) -> None:
    client.heartbeat(hb("g1", "h100-80g", gpus=2, seq=next(SEQ)))
    client.heartbeat(hb("g2", "h100-80g", gpus=2, seq=next(SEQ)))
    _, first, hold = placed(client)
    other = "g2" if client.get(hold.split(":")[0]).placement[0].node_id == "g1" else "g1"
    report(client, other, {hold: vllm(first.need_gb)})
    assert kept(client) is None
    assert counted("observations_refused") == 1


def test_a_card_figure_past_the_card_is_refused(client: Client) -> None:
    client.heartbeat(hb("g1", "h100-80g", gpus=2, seq=next(SEQ)))
    _, _, hold = placed(client)
    report(client, "g1", {hold: vllm(81)})
    assert kept(client) is None
    assert counted("observations_refused") == 1


def test_an_outlier_is_kept_flagged_and_plans_nothing(client: Client) -> None:
    client.heartbeat(hb("g1", "h100-80g", gpus=2, seq=next(SEQ)))
    _, first, hold = placed(client)
    report(client, "g1", {hold: vllm(first.need_gb * 2.5)})
    got = kept(client)
    assert got is not None and not got.kinds[0].runs
    assert got.kinds[0].flagged[0].flagged and got.kinds[0].flagged[0].ratio > 2
    assert counted("observations_flagged") == 1 and counted("observations_refused") == 0
    client.heartbeat(hb("g2", "h100-80g", gpus=2, seq=1))
    _, second, _ = placed(client)
    assert second.estimate == "measured"
    metrics.flush(client.redis, client.keys)
    ratio = client.redis.hget(client.keys.stats, f"{observations.RATIO_FIELD}:vllm:h100-80g")
    assert ratio is not None and float(text(ratio)) > 2


def test_a_nodes_run_of_another_release_replaces_its_own_run(client: Client) -> None:
    """A node's slot keeps its peak at the release it reported last: another release's figure replaces it
    (that node's engine changed), lower or not; the same release's lower figure adds nothing."""
    client.heartbeat(hb("g1", "h100-80g", gpus=2, seq=next(SEQ)))
    _, first, old = placed(client)
    _, _, new = placed(client)
    report(client, "g1", {old: vllm(first.need_gb * 1.2)})
    report(client, "g1", {old: vllm(first.need_gb * 1.2), new: vllm(first.need_gb * 1.1, "0.12.0")})
    got = kept(client)
    assert got is not None and len(got.kinds) == 1
    assert [(r.hold_id, r.version) for r in got.kinds[0].runs] == [(new, "0.12.0")]
    report(client, "g1", {new: vllm(first.need_gb * 1.05, "0.12.0")})
    got = kept(client)
    assert got is not None and [(r.hold_id, r.bytes) for r in got.kinds[0].runs] == [
        (new, int(first.need_gb * 1.1 * GIB))
    ]


def test_status_lists_the_model_furthest_off(client: Client) -> None:
    client.heartbeat(hb("g1", "h100-80g", gpus=2, seq=next(SEQ)))
    _, first, hold = placed(client)
    report(client, "g1", {hold: vllm(first.need_gb * 1.5)})
    (model, kind, run), *_ = observed.furthest_off(client.store)
    assert model == request().model and kind.engine == "vllm" and run.ratio == pytest.approx(1.5, rel=1e-3)
    said = status_text(client.pool(), client.counts(), [], off=observed.furthest_off(client.store))
    assert "estimates furthest off what the engines held:" in said
    assert f"{model}: original on 1 × h100-80g (vllm 0.11.0, context 8192): seen" in said
    assert "(x1.50) (unconfirmed: 1 node of the 2 a plan needs)" in said


def test_the_ratio_reaches_the_metric(client: Client) -> None:
    client.heartbeat(hb("g1", "h100-80g", gpus=2, seq=next(SEQ)))
    _, first, hold = placed(client)
    report(client, "g1", {hold: vllm(first.need_gb * 1.2)})
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(exposition(client))
        for s in f.samples
    }
    assert got[("modelplan_estimate_observed_ratio", (("engine", "vllm"), ("gpu_class", "h100-80g")))] == (
        pytest.approx(1.2, rel=1e-3)
    )


def test_a_cpu_replica_of_the_same_model_holds_the_ram_its_engine_was_seen_to_take(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(observed.QUORUM_ENV, "1")  # one node's word taken
    client.heartbeat(hb("cpu-1", "", host=128, seq=next(SEQ)))
    gguf = request("llama-3-8b-gguf", context=4096)
    first = client.submit(gguf)
    drain(client)
    rec = client.get(first)
    assert rec.state is JobState.PLACED and rec.option is not None and rec.option.cpu
    held = rec.placement[0].host_gb
    fp = Footprint(engine="llamacpp", version="b6500", source="proc", ram_bytes=int(held * 1.2 * GIB))
    beat = hb("cpu-1", "", host=128, seq=next(SEQ), started=(rec.placement[0].hold_id,))
    client.heartbeat(beat | {"footprints": {rec.placement[0].hold_id: fp.model_dump(mode="json")}})
    settle(client)
    second = client.get(client.submit(gguf))
    assert second.state is JobState.QUEUED
    drain(client)
    second = client.get(second.job_id)
    assert second.option is not None and second.option.estimate == "observed"
    assert second.placement[0].host_gb == pytest.approx(held * 1.2 * 1.05, rel=1e-3)
    assert second.placement[0].host_gb > held


@pytest.mark.parametrize(
    "fp",
    [
        Footprint(engine="vllm", version="0.11.0", source="proc", ram_bytes=GIB),
        Footprint(engine="vllm", version="0.11.0", source="nvml"),
    ],
    ids=["RAM only for a card's hold", "nothing measured yet"],
)
def test_a_footprint_with_no_card_figure_for_a_cards_hold_keeps_nothing(client: Client, fp: Footprint) -> None:
    client.heartbeat(hb("g1", "h100-80g", gpus=2, seq=next(SEQ)))
    _, _, hold = placed(client)
    report(client, "g1", {hold: fp})
    record = client.store.snapshot().records["g1"]
    assert observations.ingest(client.store, {"g1": record}) == 0  # taken afresh: nothing, and no error
    assert kept(client) is None and counted("observations_refused") == 0


def test_a_footprint_of_another_engine_than_the_options_is_refused(client: Client) -> None:
    client.heartbeat(hb("g1", "h100-80g", gpus=2, seq=next(SEQ)))
    _, _, hold = placed(client)
    report(client, "g1", {hold: Footprint(engine="llamacpp", source="nvml", card_bytes=(GIB,))})
    assert kept(client) is None and counted("observations_refused") == 1


def test_a_run_written_by_another_sweeper_meanwhile_is_not_lost(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two sweepers may meet (one overran its lock): each writes over only what it read."""
    ident = observed.identity(request())
    kind = observed.Kind(artifact="original", engine="vllm", gpu_class="h100-80g", gpus_per_node=1, nodes=1,
                             context=8192)  # fmt: skip
    now = utcnow()

    def run(hold: str, node: str) -> observed.Run:
        return observed.Run(hold_id=hold, node=node, at=now, bytes=GIB, formula_bytes=GIB, ratio=1.0)

    real, calls = observed.parsed, []

    def meanwhile(ident_: str, raw: object) -> observed.Observed | None:
        calls.append(ident_)
        if len(calls) == 1:  # another sweeper writes between this one's read and its write
            other = observations.added(None, "m", kind, run("j-2:0:1", "g2"))
            assert other is not None
            client.redis.set(client.keys.observed(ident), other.model_dump_json())
        return real(ident_, raw)

    monkeypatch.setattr(observations, "parsed", meanwhile)
    assert observations.keep(client.store, ident, "m", kind, run("j-1:0:1", "g1"))
    got = observed.read(client.store, ident)
    assert got is not None and sorted(r.hold_id for r in got.kinds[0].runs) == ["j-1:0:1", "j-2:0:1"]
