"""A submit of an id already recorded, told to refuse one (``exists_ok=False``, as the CLI submits), says
what that job is; a refusal that another call would serve names that call."""

from __future__ import annotations

import pytest

from producer import Client
from producer.clients import add
from tests.worker.helpers import drain, hb, request
from tests.worker.test_owners import A, B, serving
from worker.errors import AlreadySubmitted, JobExists, JobTaken, StillRunning, WrongState, cli_words
from worker.records import JobState

BIG = "llama-3.1-70b-instruct"


def test_a_submit_of_a_recorded_id_says_what_that_job_is(client: Client) -> None:
    client.heartbeat(hb("small", "rtx4090-24g", gpus=1, host=32))
    client.submit(request(BIG), "early1")
    drain(client)
    assert client.submit(request(BIG), "early1") == "early1"  # by default the same request again is one job
    with pytest.raises(AlreadySubmitted) as again:
        client.submit(request(BIG), "early1", exists_ok=False)
    said = str(again.value)
    assert said.startswith("job 'early1' already exists: failed (nothing could hold it): nothing in the pool can")
    assert said.endswith("; use retry() to plan it again")
    assert isinstance(again.value, JobExists) and again.value.state == "failed"
    assert cli_words(said, "early1").endswith("; use modelplan retry early1 to plan it again")
    # another request under the id says so too; nothing is queued either way
    with pytest.raises(AlreadySubmitted, match=r"^job 'early1' already exists with a different request: failed \("):
        client.submit(request(), "early1", exists_ok=False)
    assert client.store.queue.get_job_ids() == [] and client.get("early1").version == 2


def test_a_live_job_is_said_with_its_state_and_reason(client: Client) -> None:
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=1, free=0))
    client.submit(request(), "w-1")
    drain(client)
    with pytest.raises(AlreadySubmitted) as again:
        client.submit(request(), "w-1", exists_ok=False)
    assert str(again.value) == (
        "job 'w-1' already exists: waiting (placed 0 of 1): waiting for 1 × h100-80g for original: 1 node(s) could "
        "hold it; gpu-1 lacks 1 card(s)"
    )


def test_a_client_acting_through_its_stream_is_told_the_same(client: Client) -> None:
    for who in (A, B):
        add(client.redis, client.keys, who)
    a = Client(client.redis, client.keys.prefix, client_id=A)
    b = Client(client.redis, client.keys.prefix, client_id=B)
    with serving(client):
        a.submit(request(), "p-1")
        with pytest.raises(AlreadySubmitted, match=r"^job 'p-1' already exists: queued \(placed 0 of 1\)$"):
            a.submit(request(), "p-1", exists_ok=False)
        with pytest.raises(JobTaken):  # another client's id is taken, and what it is not said
            b.submit(request(), "p-1", exists_ok=False)


def test_cancel_of_a_placed_job_names_release(client: Client) -> None:
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=1))
    client.submit(request(), "p-1")
    drain(client)
    with pytest.raises(WrongState) as refused:
        client.cancel("p-1")
    said = str(refused.value)
    assert said == (
        "job 'p-1' is placed: cancel applies only to queued, planning or waiting jobs; use release() to end it "
        "and free its cards"
    )
    assert cli_words(said, "p-1").endswith("; use modelplan release p-1 to end it and free its cards")
    assert client.get("p-1").state is JobState.PLACED


def test_cancel_of_a_job_with_a_replica_running_names_release(client: Client) -> None:
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=1))
    client.submit(request(replicas=2), "p-2")
    drain(client)
    with pytest.raises(StillRunning, match=r"; use release\(\) to free them$"):
        client.cancel("p-2")
