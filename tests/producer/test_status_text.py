"""``modelplan status`` says each thing once: one line for an empty pool, a job's identical replicas as one
group, and a node's RAM in words that say what each figure is."""

from __future__ import annotations

import pytest

from producer import Client
from producer.cli import main
from tests.worker.helpers import drain, hb, request


def status(url: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    capsys.readouterr()
    assert main(["status", "--redis-url", url]) == 0
    return capsys.readouterr().out.splitlines()


def test_an_empty_pool_is_one_line(redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    said = status(redis_url, capsys)
    assert [line for line in said if "pool" in line] == ["no node in the pool"], said


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
