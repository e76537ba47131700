"""A job whose cards another worker takes each time it is planned: after the last attempt it waits, and
its record says for what, as every waiting replica's does."""

from __future__ import annotations

from typing import Any

import pytest

from producer import Client
from tests.worker.helpers import drain, hb, request
from worker import constants as C
from worker import planning
from worker.records import JobState


def test_a_job_whose_cards_are_taken_each_time_waits_for_them_with_its_reason(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    client.heartbeat(hb("gpu-1", "h100-80g", gpus=1))
    job = client.submit(request())
    real = planning.commit
    tries: list[int] = []

    def refused(*args: Any) -> tuple[str, Any]:
        # the commit script's answer when a node lacks the room: the cards went to another job meanwhile
        tries.append(len(args[2].place))
        return ("full", None) if len(tries) < C.PLAN_ATTEMPTS else real(*args)

    monkeypatch.setattr(planning, "commit", refused)
    drain(client)
    assert tries[0] == 1 and len(tries) == C.PLAN_ATTEMPTS and tries[-1] == 0  # the last takes no card
    rec = client.get(job)
    assert rec.state is JobState.WAITING
    (replica,) = rec.replicas
    wait = replica.wait
    assert replica.state == "waiting" and wait is not None
    assert wait.kind == "resources" and wait.option is not None and wait.option == rec.option
    assert wait.nodes == ("gpu-1",) and wait.missing == {"gpu-1": 1}
    assert wait.text.endswith("its cards were taken each time it was planned")
