"""``modelplan status`` says each thing once: one line for an empty pool, a job's identical replicas as one
group, and a node's RAM in words that say what each figure is; a prefix with nothing under it named as such,
failed jobs by name with why, and only the ACL log's recent refusals."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import redis

from producer import Client
from producer.cli import main
from tests.worker.helpers import drain, hb, request
from worker.keys import Keys


def status(url: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    capsys.readouterr()
    assert main(["status", "--redis-url", url]) == 0
    return capsys.readouterr().out.splitlines()


def test_an_empty_pool_is_one_line(redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    client = Client.from_url(redis_url)
    client.submit(request(), job_id="first")
    said = status(redis_url, capsys)
    assert [line for line in said if "pool" in line] == ["no node in the pool"], said
    client.redis.close()


def test_a_prefix_with_nothing_under_it_is_named(redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    client = Client.from_url(redis_url)
    client.heartbeat(hb("gpu-1"))
    client.submit(request(), job_id="placed-here")
    capsys.readouterr()
    assert main(["status", "--redis-url", redis_url, "--prefix", "modelplam"]) == 0
    said = capsys.readouterr().out
    assert said == (
        f"nothing under prefix 'modelplam' on {redis_url}: no node reports, no job was submitted and no worker "
        "runs under it; is --prefix (or $MODELPLAN_PREFIX) right?\n"
    )
    assert "modelplan:" in str(client.redis.keys("*"))  # what there is, under the default prefix
    client.redis.close()


def test_identical_replicas_are_said_once(redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    client = Client.from_url(redis_url)
    client.heartbeat(hb("gpu-1", gpus=4))
    job = client.submit(request(replicas=3), job_id="three")
    drain(client)
    assert [r.state for r in client.get(job).replicas] == ["placed"] * 3
    said = status(redis_url, capsys)
    [row] = [line for line in said if line.split()[:2] == ["three", "placed"]]
    assert row.count("runs original on 1 × h100-80g at gpu-1") == 1, row
    assert row.endswith("3 replicas: runs original on 1 × h100-80g at gpu-1"), row
    client.redis.close()


def test_a_nodes_ram_says_what_each_figure_is(redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    client = Client.from_url(redis_url)
    client.heartbeat(hb("cpu-1", gpu_class="", host=128, host_free=120))
    client.submit(request("llama-3-8b-gguf", context=2048), job_id="small")
    drain(client)
    reserved = sum(h.host_gb for h in client.pool().held["cpu-1"].values())
    assert reserved > 0
    [row] = [line for line in status(redis_url, capsys) if line.startswith("cpu-1 ")]
    ram = row[row.index("RAM") :]
    said = f"RAM 120 of 128 GiB unused at the last heartbeat, {reserved:.1f} GiB of it reserved for replicas"
    assert ram == said + " not yet started", row
    client.redis.close()


@pytest.mark.parametrize("nodes, line", [(1, "1 node in the pool"), (2, "2 nodes in the pool")])
def test_the_node_count_reads_as_words(
    redis_url: str, capsys: pytest.CaptureFixture[str], nodes: int, line: str
) -> None:
    client = Client.from_url(redis_url)
    for i in range(nodes):
        client.heartbeat(hb(f"gpu-{i}", gpus=1))
    assert status(redis_url, capsys)[0] == line
    client.redis.close()


def test_failed_jobs_are_named_with_why_a_few_then_how_many_more(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    client = Client.from_url(redis_url)
    client.heartbeat(hb("cpu-1", gpu_class="", host=8))
    for i in range(5):
        client.submit(request("llama-3.1-70b-instruct"), job_id=f"big-{i}")
    drain(client)
    said = status(redis_url, capsys)
    assert "jobs: 5 failed" in said, said
    named = [line for line in said if line.startswith("failed big-")]
    assert len(named) == 3, said
    why = client.get("big-0").reason
    assert all(line.split(": ", 1)[1] == (why if len(why) <= 100 else why[:97] + "...") for line in named), named
    assert said[said.index(named[-1]) + 1] == "2 more failed: modelplan job JOB_ID says why", said
    client.redis.close()


def test_one_failed_job_is_named_without_a_count_of_more(redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    client = Client.from_url(redis_url)
    client.heartbeat(hb("cpu-1", gpu_class="", host=8))
    client.submit(request("llama-3.1-70b-instruct"), job_id="too-big")
    drain(client)
    said = status(redis_url, capsys)
    assert [line.split(":")[0] for line in said if "failed" in line] == ["jobs", "failed too-big"], said


class LogOnly:
    """A Redis connection as far as ``refusals`` reads one: its login and its ACL log."""

    def __init__(self, entries: list[dict[str, Any]]) -> None:
        self.connection_pool = SimpleNamespace(connection_kwargs={})
        self.entries = entries

    def acl_log(self) -> list[dict[str, Any]]:
        return self.entries


def entry(user: str, key: str, age_s: float, count: int = 1) -> dict[str, Any]:
    """An ACL log entry as redis-py gives one."""
    return {"username": user, "reason": "key", "object": key, "count": count, "age-seconds": age_s}


def test_only_recent_refusals_are_shown_with_since_when() -> None:
    from producer.refusals import RECENT_REFUSALS_S, recent_refusals

    now = 1_700_000_000.0
    log = LogOnly(
        [
            entry("modelplan.agent.n1", "modelplan:node:n2", 30.0, count=4),
            entry("modelplan.agent.n1", "modelplan:node:n3", RECENT_REFUSALS_S + 60.0),
            entry("modelplan.agent.n9", "modelplan:node:n1", RECENT_REFUSALS_S * 24),
            entry("other.user", "x", 1.0),
        ]
    )
    found = recent_refusals(log, Keys(), now=now)  # type: ignore[arg-type]
    assert found is not None
    assert [(f.user, f.target, f.count) for f in found.shown] == [("modelplan.agent.n1", "modelplan:node:n2", 4)]
    assert (found.older, found.since.timestamp()) == (2, now - RECENT_REFUSALS_S)
    since = found.since.isoformat(timespec="seconds")
    assert found.lines() == [
        f"ACL refusals since {since} (the last hour; 2 older in the log, which ACL LOG RESET clears):",
        "refused by Redis: modelplan.agent.n1 tried a key outside its rules (modelplan:node:n2), 4 time(s)",
    ]
    # nothing recent: nothing said, however much is older
    assert recent_refusals(LogOnly(log.entries[1:]), Keys(), now=now).lines() == []  # type: ignore[arg-type, union-attr]


def test_status_shows_a_refusal_just_made(redis_url: str, r: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    r.acl_setuser("modelplan.agent.n1", enabled=True, nopass=True, keys=["modelplan:node:n1"], commands=["+@all"])
    try:
        agent = redis.Redis.from_url(redis_url, username="modelplan.agent.n1", password="x")
        with pytest.raises(redis.exceptions.NoPermissionError):
            agent.set("modelplan:node:n2", "{}")
        agent.close()
        Client.from_url(redis_url).submit(request(), job_id="something")
        said = status(redis_url, capsys)
        [head] = [line for line in said if line.startswith("ACL refusals since ")]
        assert head.endswith("(the last hour):"), head
        assert said[said.index(head) + 1].startswith("refused by Redis: modelplan.agent.n1 tried a key"), said
    finally:
        r.acl_deluser("modelplan.agent.n1")
