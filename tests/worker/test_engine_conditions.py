"""A replica's engine as a condition of the replica: the heartbeat's ``engines`` say starting, serving (with
the endpoint and model), ended or failed to start, and the job's record and stream say so, once each; the
job's own state stays. An out-of-memory at start raises the model's need and plans the replica again."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from producer import Client
from producer.render import job_row, job_text
from tests.worker.helpers import drain, event_reasons, hb, request
from worker import maintenance, metrics, observed
from worker.records import JobState
from worker.reports import FOOTPRINTS
from worker.startfailures import OOM_REPLANS_MAX

SEQ = iter(range(1, 1_000_000))


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    FOOTPRINTS.take()
    metrics.forget()
    observed.forget()
    yield
    metrics.forget()
    observed.forget()


def beat(client: Client, node: str, started: tuple[str, ...], engines: dict[str, dict[str, Any]]) -> None:
    client.heartbeat(hb(node, gpus=1, free=0, seq=next(SEQ), started=started) | {"engines": engines})
    client.store.snapshot()  # a worker's mirror reads the changed record, then its sweep takes it
    maintenance.sweep(client.store, force=True)


def placed(client: Client) -> tuple[str, str]:
    client.heartbeat(hb("g1", gpus=1, seq=next(SEQ)))
    job = client.submit(request())
    drain(client)
    rec = client.get(job)
    assert rec.state is JobState.PLACED, rec.reason
    return job, rec.placement[0].hold_id


def test_starting_then_serving_is_the_replicas_condition_with_its_endpoint_and_stream(client: Client) -> None:
    job, hold = placed(client)
    beat(client, "g1", (hold,), {hold: {"condition": "starting"}})
    rec = client.get(job)
    assert rec.state is JobState.PLACED
    assert rec.replicas[0].engine is not None and rec.replicas[0].engine.state == "starting"
    serving = {"condition": "serving", "endpoint": "g1:45197", "model": "llama-3.1-8b-instruct"}
    beat(client, "g1", (hold,), {hold: serving})
    rec = client.get(job)
    cond = rec.replicas[0].engine
    assert cond is not None
    assert (cond.state, cond.endpoint, cond.model, cond.node_id, cond.hold_id) == (
        "serving",
        "g1:45197",
        "llama-3.1-8b-instruct",
        "g1",
        hold,
    )
    assert rec.state is JobState.PLACED and rec.replicas[0].placement[0].hold_id == hold
    beat(client, "g1", (hold,), {hold: serving})  # said again: written once
    assert client.get(job).version == rec.version
    said = event_reasons(client, job)
    assert said[-2:] == [
        "the engine of replica 0 on g1 is starting",
        "the engine of replica 0 on g1 serves llama-3.1-8b-instruct at g1:45197",
    ]
    assert "serving since" in job_text(rec) and "g1:45197" in job_text(rec)
    assert "runs " in job_row(rec)[3]


def test_an_engine_that_ended_is_not_shown_as_running(client: Client) -> None:
    job, hold = placed(client)
    beat(client, "g1", (hold,), {hold: {"condition": "serving", "endpoint": "g1:1234"}})
    beat(client, "g1", (hold,), {hold: {"condition": "ended", "reason": "killed by signal SIGKILL", "restarts": 3}})
    rec = client.get(job)
    assert rec.state is JobState.PLACED and client.redis.hexists(client.keys.held("g1"), hold)
    assert rec.replicas[0].engine is not None and rec.replicas[0].engine.dead
    assert not rec.replicas[0].running
    assert rec.reason == (
        "the engine of replica 0 on g1 ended (killed by signal SIGKILL); its cards stay held until it is released"
    )
    row = job_row(rec)[3]
    assert "runs " not in row and "engine ended" in row, row
    assert "ended since" in job_text(rec)


def test_a_start_failure_says_the_engines_last_lines(client: Client) -> None:
    job, hold = placed(client)
    why = "exited with status 1: error: unknown argument --bogus"
    beat(client, "g1", (hold,), {hold: {"condition": "failed", "reason": why}})
    rec = client.get(job)
    assert rec.replicas[0].engine is not None and rec.replicas[0].engine.state == "failed to start"
    assert (
        rec.reason == f"the engine of replica 0 on g1 failed to start ({why}); its cards stay held until it is released"
    )
    assert "engine failed to start" in job_row(rec)[3]


def test_a_report_for_a_hold_on_another_node_is_refused(client: Client) -> None:
    job, hold = placed(client)
    before = client.get(job)
    beat(client, "g2", (hold,), {hold: {"condition": "serving", "endpoint": "evil:80"}})
    assert client.get(job).version == before.version
    assert metrics._pending.get("observations_refused", 0) == 1


def test_out_of_memory_at_start_raises_the_need_and_plans_the_replica_again(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(observed.QUORUM_ENV, "1")  # one node: its word is taken
    job, hold = placed(client)
    before = client.get(job)
    need = before.replicas[0].option.need_gb  # type: ignore[union-attr]
    oom = {"condition": "failed", "reason": "torch.OutOfMemoryError: CUDA out of memory.", "out_of_memory": True}
    beat(client, "g1", (hold,), {hold: oom})
    rec = client.get(job)
    assert not client.redis.hexists(client.keys.held("g1"), hold)  # the dead engine's card is let go at once
    assert rec.state is JobState.WAITING and rec.replicas[0].start_failures == 1, rec.reason
    client.heartbeat(hb("g1", gpus=1, seq=next(SEQ)))  # its agent stopped the dead engine: the card reads free
    client.store.snapshot()
    drain(client)
    rec = client.get(job)
    assert rec.state is JobState.PLACED, rec.reason
    again = rec.replicas[0]
    assert again.placement[0].hold_id != hold and not client.redis.hexists(client.keys.held("g1"), hold)
    assert again.start_failures == 1
    assert again.option is not None and again.option.need_gb > need and again.option.estimate == "observed"
    said = "the engine of replica 0 on g1 ran out of memory at start (torch.OutOfMemoryError: CUDA out of memory.)"
    assert any(r.startswith(said + "; planned again with more") for r in event_reasons(client, job))


def test_out_of_memory_past_the_replans_is_a_failed_start(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(observed.QUORUM_ENV, "1")
    job, hold = placed(client)
    oom = {"condition": "failed", "reason": "CUDA out of memory", "out_of_memory": True}
    for _ in range(OOM_REPLANS_MAX):
        beat(client, "g1", (hold,), {hold: oom})
        client.heartbeat(hb("g1", gpus=1, seq=next(SEQ)))
        client.store.snapshot()
        drain(client)
        hold = client.get(job).placement[0].hold_id
    beat(client, "g1", (hold,), {hold: oom})
    rec = client.get(job)
    assert rec.placement[0].hold_id == hold and rec.replicas[0].start_failures == OOM_REPLANS_MAX
    assert rec.replicas[0].engine is not None and rec.replicas[0].engine.state == "failed to start"
