"""An engine that ended while its hold is on the node: the heartbeat says so (``ended``), and the job's
record says so in its reason, once; the replica keeps its cards. Only for a hold on the reporting node."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from producer import Client
from tests.worker.helpers import drain, hb, request
from worker import maintenance, metrics
from worker.records import JobState
from worker.reports import FOOTPRINTS

SEQ = iter(range(1, 1_000_000))


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    FOOTPRINTS.take()
    metrics.forget()
    yield
    metrics.forget()


def beat(client: Client, node: str, started: tuple[str, ...], ended: dict[str, str]) -> None:
    client.heartbeat(hb(node, gpus=1, free=0, seq=next(SEQ), started=started) | {"ended": ended})
    client.store.snapshot()  # a worker's mirror reads the changed record, then its sweep takes it
    maintenance.sweep(client.store, force=True)


def test_the_jobs_record_says_its_engine_ended_once_and_keeps_the_cards(client: Client) -> None:
    client.heartbeat(hb("g1", gpus=1, seq=next(SEQ)))
    job = client.submit(request())
    drain(client)
    placed = client.get(job)
    hold = placed.placement[0].hold_id
    beat(client, "g1", (hold,), {hold: "exit status 1"})
    rec = client.get(job)
    assert rec.state is JobState.PLACED and rec.placement == placed.placement
    assert rec.reason == "the engine of replica 0 on g1 ended (exit status 1); its cards stay held until it is released"
    assert client.redis.hexists(client.keys.held("g1"), hold)
    beat(client, "g1", (hold,), {hold: "exit status 1"})  # said again: written once
    assert client.get(job).version == rec.version


def test_an_end_for_a_hold_on_another_node_is_refused(client: Client) -> None:
    client.heartbeat(hb("g1", gpus=1, seq=next(SEQ)))
    job = client.submit(request())
    drain(client)
    before = client.get(job)
    hold = before.placement[0].hold_id
    beat(client, "g2", (hold,), {hold: "killed by signal SIGKILL"})
    assert client.get(job).version == before.version
    assert metrics._pending.get("observations_refused", 0) == 1
