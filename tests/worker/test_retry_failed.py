"""``retry``: a failed job queued for planning again under the same id, on the pool as it is now; only a
failed job, and only by whoever may release or cancel it."""

from __future__ import annotations

import pytest

from producer import Client
from producer.clients import add
from tests.worker.helpers import drain, event_reasons, hb, queued_functions, request, whole_state
from tests.worker.test_owners import A, B, answers, carry_out, owned, send
from worker.errors import JobNotFound, NotOwner, WrongState
from worker.owners import Quotas
from worker.records import JobState

BIG = "llama-3.1-70b-instruct"


def failed_job(client: Client, job_id: str = "big", **kw: object) -> str:
    """A job that fails on the only node there is, a small card."""
    client.heartbeat(hb("small", "rtx4090-24g", gpus=1, host=32))
    client.submit(request(BIG, **kw), job_id)  # type: ignore[arg-type]
    drain(client)
    assert client.get(job_id).state is JobState.FAILED
    return job_id


def test_retry_queues_a_failed_job_again_and_it_is_planned_on_the_pool_now(client: Client) -> None:
    job = failed_job(client)
    k = client.keys
    assert client.redis.ttl(k.job(job)) > 0  # a final record expires
    client.heartbeat(hb("gpu-8", "h100-80g", gpus=8))  # the node it needs joins: a failed job stays failed
    drain(client)
    assert client.get(job).state is JobState.FAILED

    failed = client.get(job)
    rec = client.retry(job)
    assert (rec.state, rec.version, rec.reason) == (JobState.QUEUED, failed.version + 1, "retried")
    assert rec.request == failed.request and rec.replicas == () and rec.option is None
    assert client.get(job) == rec
    # live again: neither its record nor its stream expires, and it is on the planning queue
    assert client.redis.ttl(k.job(job)) == -1 and client.redis.ttl(k.job_events(job)) == -1
    assert queued_functions(client) == ["worker.jobs.plan_job"]
    assert whole_state(client)["index"] == {"queued": [job]}

    drain(client)
    rec = client.get(job)
    assert rec.state is JobState.PLACED and {p.node_id for p in rec.placement} == {"gpu-8"}
    reasons = event_reasons(client, job)
    assert reasons[-3] == "retried" and reasons[-2].startswith("planning on ")


def test_retry_applies_only_to_failed_jobs(client: Client) -> None:
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=1))
    job = client.submit(request(), "placed-1")
    drain(client)
    with pytest.raises(WrongState, match=r"^job 'placed-1' is placed: retry applies only to failed jobs$"):
        client.retry(job)
    with pytest.raises(JobNotFound, match=r"^job 'none': no such job$"):
        client.retry("none")
    assert client.get(job).state is JobState.PLACED


def test_only_its_owner_retries_a_job_and_within_its_count(client: Client) -> None:
    k = client.keys
    for who in (A, B):
        add(client.redis, k, who)
    client.heartbeat(hb("small", "rtx4090-24g", gpus=1, host=32))
    send(client, A, op="submit", job_id="a-big", request=request(BIG, replicas=3).model_dump_json())
    send(client, A, op="submit", job_id="a-small", request=request(replicas=3).model_dump_json())
    carry_out(client)
    assert client.get("a-big").state is JobState.FAILED and owned(client, A) == {"a-big": 3, "a-small": 3}

    send(client, B, op="retry", job_id="a-big")
    send(client, None, op="retry", job_id="a-big", reply_to="svc")
    send(client, A, op="retry", job_id="a-big")  # 3 more with a-small's 3: past the client's 5
    carry_out(client, Quotas(max_replicas=4, client_replicas=5))
    said = [(a["ok"], a["reason"], a["error"]) for a in answers(client, B) + answers(client, A)[2:]]
    assert said == [
        ("false", "job 'a-big' belongs to another client", "NotOwner"),
        (
            "false",
            "job 'a-big': 3 replicas with the 3 this client's other live jobs want would pass the 5 one client may "
            "have (MODELPLAN_CLIENT_REPLICAS); nothing was changed",
            "OverQuota",
        ),
    ]
    assert client.get("a-big").state is JobState.FAILED
    with pytest.raises(NotOwner):
        client.operations.retry("a-big", as_client=B)

    send(client, A, op="retry", job_id="a-big")
    carry_out(client, Quotas(max_replicas=4, client_replicas=6))
    assert answers(client, A)[-1]["ok"] == "true"
    assert client.get("a-big").state is JobState.FAILED  # planned again: the small card still cannot hold it
    assert client.get("a-big").reason.startswith("nothing in the pool can hold it")
    assert client.get("a-big").attempts == 2


def test_a_client_acting_through_its_own_stream_retries_as_a_direct_call_does(client: Client) -> None:
    from tests.worker.test_owners import serving

    add(client.redis, client.keys, A)
    a = Client(client.redis, client.keys.prefix, client_id=A)
    client.heartbeat(hb("small", "rtx4090-24g", gpus=1, host=32))
    with serving(client):
        a.submit(request(BIG), "own-1")
        drain(client)
        assert client.get("own-1").state is JobState.FAILED
        rec = a.retry("own-1")
        assert rec.state is JobState.QUEUED and rec.owner == A
        with pytest.raises(WrongState, match="retry applies only to failed jobs"):
            a.retry("own-1")
