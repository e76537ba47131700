"""Two agents publishing under one node id (a cloned machine image): each heartbeat carries the other's
boot, which must not read as a restart every time."""

from __future__ import annotations

import pytest

from producer import Client
from tests.worker.helpers import drain, hb, queued_functions, request

RESTART = "worker.jobs.node_restarted"


class Twins:
    """Two agents that were given one node id, each with its own boot and its own rising seq."""

    def __init__(self, client: Client, node_id: str = "gpu-1", gpus: int = 2) -> None:
        self.client, self.node_id, self.gpus = client, node_id, gpus
        self.seqs = {"boot-a": 1_000, "boot-b": 5_000}

    def beat(self, boot: str) -> bool:
        self.seqs[boot] += 1
        return self.client.heartbeat(hb(self.node_id, gpus=self.gpus, seq=self.seqs[boot], boot=boot))


@pytest.mark.xfail(strict=True, reason="each heartbeat from the other agent reads as a restart")
def test_two_agents_on_one_node_id_do_not_re_plan_its_jobs_at_every_heartbeat(client: Client) -> None:
    twins = Twins(client)
    twins.beat("boot-a")
    job = client.submit(request())
    drain(client)
    assert [p.node_id for p in client.get(job).placement] == ["gpu-1"]
    restarts = 0
    for boot in ["boot-b", "boot-a"] * 4:
        twins.beat(boot)
        restarts += queued_functions(client).count(RESTART)
        drain(client)  # a worker runs what each heartbeat queued before the next one comes
    # the first new boot cannot be told from a restart; the old one heard again can
    assert restarts == 1
    assert "gpu-1" not in client.pool().records
