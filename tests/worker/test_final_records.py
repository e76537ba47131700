"""What a final record says: ``cancel`` ends only a job none of whose replicas runs; ``release`` ends one
that ran, and its record and summary say, in the past, where each replica was and that it was freed."""

from __future__ import annotations

import pytest

from producer import Client
from producer.render import job_text
from tests.worker.helpers import drain, hb, request, whole_state
from worker import maintenance
from worker.errors import StillRunning, WrongState
from worker.records import JobState


def test_a_partly_placed_job_is_not_cancelled_but_released(client: Client) -> None:
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=2, seq=1))
    job = client.submit(request(replicas=3), job_id="j")
    drain(client)
    before = whole_state(client)
    assert client.get(job).summary == "placed 2 of 3"
    with pytest.raises(StillRunning) as refused:
        client.cancel(job)
    assert isinstance(refused.value, WrongState)  # a caller that handles WrongState handles this too
    assert str(refused.value) == (
        "job 'j' is waiting with 2 of 3 replica(s) running: cancel applies only to jobs with none running; "
        "use release() to free them"
    )
    assert whole_state(client) == before  # nothing freed, nothing changed

    rec = client.release(job)
    assert rec.state is JobState.RELEASED and rec.summary == "2 of 3 were running; freed"
    assert whole_state(client)["held"] == {}
    lines = job_text(client.get(job)).splitlines()
    assert lines[0] == "job j: released (2 of 3 were running; freed)"
    assert lines[3] == "  replica 0: was placed, original on 1 × h100-80g: gpu-1 (1 card) (freed)"
    assert lines[4] == "  replica 1: was placed, original on 1 × h100-80g: gpu-1 (1 card) (freed)"
    assert lines[5] == "  replica 2: was waiting [resources]"


def test_a_released_job_that_lost_its_node_says_none_was_running(client: Client) -> None:
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=1, seq=1))
    job = client.submit(request(), job_id="j")
    drain(client)
    assert client.get(job).state is JobState.PLACED
    client.redis.delete(client.keys.node("gpu-1"))  # its heartbeat lapses: its key goes, its score passes
    client.redis.zadd(client.keys.nodes, {"gpu-1": 0})
    maintenance.sweep(client.store)
    drain(client)
    assert client.get(job).state is JobState.WAITING
    rec = client.release(job)
    assert rec.summary == "none was running"
    text = job_text(rec)
    assert text.startswith("job j: released (none was running)\n") and "replica 0: was waiting" in text


def test_a_waiting_job_with_nothing_running_is_cancelled(client: Client) -> None:
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=1, free=0, seq=1))
    job = client.submit(request(), job_id="j")
    drain(client)
    rec = client.cancel(job)
    assert rec.state is JobState.CANCELLED and rec.summary == "none was running"
    assert job_text(rec).startswith("job j: cancelled (none was running)\n")
    assert whole_state(client)["index"] == {"cancelled": ["j"]}
