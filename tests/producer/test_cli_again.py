"""The commands that meet a job or a node that is already there: a submit of a recorded id, a failed job
tried again, a cancel that release serves, a heartbeat older than the stored one."""

from __future__ import annotations

import pytest

from producer import Client
from producer.cli import main
from tests.producer.test_cli_jobs import MODELS
from tests.worker.helpers import drain, hb


def submit(url: str, job_id: str, model: str = "llama-3.1-8b-instruct") -> list[str]:
    d = MODELS / model
    files = ["--files", str(d / "files.json"), "--config", str(d / "config.json")]
    return ["submit", "--redis-url", url, *files, "--job-id", job_id]


def test_a_submit_of_a_recorded_id_says_what_that_job_is(redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    client = Client.from_url(redis_url)
    assert main(submit(redis_url, "early1", "llama-3.1-70b-instruct")) == 0
    assert capsys.readouterr().out == "early1\n"
    drain(client)  # no node has reported: it waits
    assert main(submit(redis_url, "early1", "llama-3.1-70b-instruct")) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err == (
        "modelplan submit: job 'early1' already exists: waiting (placed 0 of 1): no node has reported to the pool "
        "yet (or every node has gone silent); waiting for one\n"
    )

    client.heartbeat(hb("small", "rtx4090-24g", gpus=1, host=32))  # wakes it; it cannot hold it
    drain(client)
    assert main(submit(redis_url, "early1", "llama-3.1-70b-instruct")) == 2
    err = capsys.readouterr().err
    assert err.startswith("modelplan submit: job 'early1' already exists: failed (nothing could hold it): nothing")
    assert err.endswith("; use modelplan retry early1 to plan it again\n") and err.count("\n") == 1

    client.heartbeat(hb("gpu-8", "h100-80g", gpus=8))
    assert main(["retry", "--redis-url", redis_url, "early1"]) == 0
    assert capsys.readouterr().out.startswith("job early1: queued (placed 0 of 1)\n")
    drain(client)
    assert client.get("early1").state.value == "placed"
    assert main(["retry", "--redis-url", redis_url, "early1"]) == 2
    assert capsys.readouterr().err == ("modelplan retry: job 'early1' is placed: retry applies only to failed jobs\n")


def test_cancel_of_a_placed_job_says_to_release_it(redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    client = Client.from_url(redis_url)
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=1))
    assert main(submit(redis_url, "p-1")) == 0
    drain(client)
    capsys.readouterr()
    assert main(["cancel", "--redis-url", redis_url, "p-1"]) == 2
    assert capsys.readouterr().err == (
        "modelplan cancel: job 'p-1' is placed: cancel applies only to queued, planning or waiting jobs; use "
        "modelplan release p-1 to end it and free its cards\n"
    )


def beat(url: str, *seq: str) -> list[str]:
    return ["heartbeat", "--redis-url", url, "--node-id", "n1", "--host-mem-gb", "64", "--host-free-gb", "64", *seq]


def test_a_stale_heartbeat_says_what_seq_would_do(redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    client = Client.from_url(redis_url)
    assert main(beat(redis_url)) == 0  # the default seq: the clock in microseconds
    assert capsys.readouterr().out == "stored\n"
    [last] = [n.seq for n in client.pool().records.values()]
    assert main(beat(redis_url, "--seq", "5")) == 0
    assert capsys.readouterr().out == (
        f"stale: node n1's last seq was {last} (the default seq is the clock in microseconds); give a seq above "
        f"{last} or leave --seq out; nothing changed\n"
    )
    # a seq past the clock: leaving --seq out is stale too, and the answer says so
    ahead = last * 2
    assert main(beat(redis_url, "--seq", str(ahead))) == 0
    capsys.readouterr()
    assert main(beat(redis_url)) == 0
    assert capsys.readouterr().out == (
        f"stale: node n1's last seq was {ahead}, ahead of the clock in microseconds (the default seq); give a seq "
        f"above {ahead}; nothing changed\n"
    )
