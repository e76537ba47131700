"""Scaling a job to zero replicas keeps the job: its cards are freed in the same step, it stays ``placed``
with nothing to place and says it is scaled to zero, nothing plans it meanwhile, and scaling it up again
plans it. No card stays held for it while no replica is placed."""

from __future__ import annotations

from typing import Any

import pytest

from planner.errors import InvalidInput
from producer import Client
from producer.cli import main
from tests.worker.helpers import drain, hb, request, whole_state
from tests.worker.test_fallbacks_replicas import big_request
from worker.operations import check_replicas
from worker.planning import claim, settle
from worker.records import JobRecord, JobState
from worker.requests import Consumer
from worker.scripts import text


def zero(rec: JobRecord) -> None:
    """What a job scaled to zero is: kept, placed with no replica, holding nothing, not pending."""
    assert (rec.state, rec.wanted, rec.replicas, rec.nomination) == (JobState.PLACED, 0, (), None)
    assert rec.summary == "scaled to zero"
    assert rec.reason == "scaled to 0: its replicas were freed; scaling it up plans it again"
    assert not rec.pending


def test_a_placed_job_scaled_to_zero_frees_its_cards_and_comes_back(client: Client) -> None:
    client.heartbeat(hb("gpu-1", gpus=2, seq=1))
    job = client.submit(request(replicas=2), job_id="two")
    other = client.submit(request(), job_id="other")  # waits for a card "two" holds
    drain(client)
    assert client.get(other).state is JobState.WAITING
    down = client.scale(job, 0)
    zero(down)
    assert client.get(job) == down
    drain(client)  # the freed cards wake the waiting job
    state = whole_state(client)
    assert state["held"] == {"gpu-1": {other: 1}}, state
    assert state["records"] == {job: "placed", other: "placed"}
    assert client.redis.zscore(client.keys.pending, job) is None
    assert client.get(job).version == down.version  # nothing planned it meanwhile
    up = client.scale(job, 1)
    assert (up.state, up.summary) == (JobState.PLACED, "placed 1 of 1")
    assert whole_state(client)["held"] == {"gpu-1": {other: 1, job: 1}}


def test_a_waiting_job_scaled_to_zero_lets_its_held_cards_go(client: Client) -> None:
    client.heartbeat(hb("gpu-big", gpus=8, seq=1))
    small = [client.submit(request()) for _ in range(8)]
    big = client.submit(big_request(), job_id="big")
    drain(client)
    client.release(small[0])
    drain(client)
    assert client.get(big).nomination is not None  # a card held for it
    zero(client.scale(big, 0))
    drain(client)
    state = whole_state(client)
    assert "nominated" not in state and big not in state["held"].get("gpu-big", {}), state
    assert client.redis.hget(client.keys.pending_for, big) is None


def test_a_queued_job_scaled_to_zero_is_not_planned_until_scaled_up(client: Client) -> None:
    client.heartbeat(hb("gpu-1", gpus=1, seq=1))
    job = client.submit(request(), job_id="early")
    zero(client.scale(job, 0))
    drain(client)  # its queue entry finds nothing to plan
    zero(client.get(job))
    assert whole_state(client)["held"] == {}
    assert client.scale(job, 1).summary == "placed 1 of 1"


def test_a_job_scaled_to_zero_while_a_worker_plans_it_stays_at_zero(client: Client) -> None:
    client.heartbeat(hb("gpu-1", gpus=1, seq=1))
    job = client.submit(request(), job_id="in-plan")
    claimed = claim(client.store, job, "w-1")
    assert claimed is not None and claimed.state is JobState.PLANNING
    zero(client.scale(job, 0))
    assert settle(client.store, claimed) is None  # its commit is stale: nothing is placed
    zero(client.get(job))
    assert whole_state(client)["held"] == {}
    assert client.redis.zscore(client.keys.jobs(JobState.PLANNING), job) is None


def test_scale_to_zero_through_the_request_stream(client: Client) -> None:
    client.heartbeat(hb("gpu-1", gpus=1, seq=1))
    job = client.submit(request(), job_id="streamed")
    drain(client)
    k = client.keys
    client.redis.xadd(k.requests, {"op": "scale", "job_id": job, "replicas": "0", "reply_to": "svc"})
    Consumer(client.store, "w1").drain()
    zero(client.get(job))
    entries: Any = client.redis.xrange(k.reply("svc"))
    assert [(text(f[b"ok"]), text(f[b"state"])) for _, f in entries] == [("true", "placed")]
    assert whole_state(client)["held"] == {}


def test_a_job_at_zero_is_released_as_any_other(client: Client) -> None:
    client.heartbeat(hb("gpu-1", gpus=1, seq=1))
    job = client.submit(request())
    drain(client)
    client.scale(job, 0)
    done = client.release(job)
    assert (done.state, done.summary) == (JobState.RELEASED, "none was running")


def test_replicas_from_zero_to_the_bound() -> None:
    for n in (0, 1, 256):
        check_replicas(n)
    for bad in (-1, 257):
        with pytest.raises(InvalidInput, match=rf"must be a whole number from 0 to 256 \(given {bad}\)"):
            check_replicas(bad)


def test_the_command_scales_to_zero(client: Client, redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    client.heartbeat(hb("gpu-1", gpus=1, seq=1))
    job = client.submit(request(), job_id="cli")
    drain(client)
    capsys.readouterr()
    assert main(["scale", job, "0", "--redis-url", redis_url]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "job cli: placed (scaled to zero)", out
    assert "  reason:  scaled to 0: its replicas were freed; scaling it up plans it again" in out
    assert whole_state(client)["held"] == {}
