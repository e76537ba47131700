"""A watched record's reason follows its state: a job taken into planning (whose claim rewrites only the
record's head) says who plans it, as its stream does, rather than the reason it was queued with."""

from __future__ import annotations

from producer import Client
from producer.render import job_text
from tests.worker.helpers import drain, event_reasons, hb, request
from worker.planning import claim
from worker.records import JobState


def test_a_job_taken_into_planning_says_who_plans_it(client: Client) -> None:
    job = client.submit(request(), job_id="watched")
    seen = client.watch(job, timeout=5)
    first = next(seen)
    assert (first.state, first.reason) == (JobState.QUEUED, "queued")
    assert claim(client.store, job, "worker-7") is not None
    second = next(seen)
    assert (second.state, second.reason) == (JobState.PLANNING, "planning on worker-7")
    assert event_reasons(client, job)[-1] == second.reason  # the words its stream carries for that change
    # a watch started while it is planned, the job's own view and the status table say so too
    assert next(client.watch(job, timeout=5)).reason == "planning on worker-7"
    assert "  reason:  planning on worker-7" in job_text(client.get(job)).splitlines()
    assert [r.reason for r in client.jobs(JobState.PLANNING)] == ["planning on worker-7"]
    assert client.get(job).reason == "queued"  # what is stored: the record as it is, unchanged


def test_a_planned_job_keeps_the_reason_its_plan_gave(client: Client) -> None:
    client.heartbeat(hb("gpu-1", gpus=1))
    job = client.submit(request(), job_id="planned")
    drain(client)
    [rec] = list(client.watch(job, timeout=5))
    assert rec.state is JobState.PLACED and rec.reason.startswith("placed "), rec.reason
    assert client.get(job) == rec
