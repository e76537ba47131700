"""A request's estimate, and the deployment's default for requests that name none."""

from __future__ import annotations

from typing import Any

import pytest

from planner import InvalidInput
from producer import Client
from tests.worker.helpers import drain, hb, request
from worker import config
from worker.config import ESTIMATE_ENV
from worker.records import JobState, parse_request


def placed_estimate(client: Client, **kw: Any) -> str:
    job = client.submit(request(context=16_384, **kw))
    drain(client)
    rec = client.get(job)
    assert rec.state is JobState.PLACED and rec.option is not None
    return f"{rec.option.estimate} {rec.option.label}"


def test_a_request_names_its_estimate_and_the_rest_take_the_deployments(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    client.heartbeat(hb("l4-1", "l4-24g", gpus=2))
    monkeypatch.delenv(ESTIMATE_ENV, raising=False)
    assert placed_estimate(client, estimate="seed") == "seed 2 × l4-24g"
    client.heartbeat(hb("l4-2", "l4-24g", gpus=2))
    assert placed_estimate(client) == "measured 1 × l4-24g"
    client.heartbeat(hb("l4-3", "l4-24g", gpus=2))
    monkeypatch.setenv(ESTIMATE_ENV, "seed")
    assert placed_estimate(client) == "seed 2 × l4-24g"


def test_an_unknown_estimate_is_refused_where_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    data = request().model_dump(mode="json") | {"estimate": "guess"}
    with pytest.raises(InvalidInput, match="estimate"):
        parse_request(data)
    monkeypatch.setenv(ESTIMATE_ENV, "guess")
    with pytest.raises(InvalidInput, match="MODELPLAN_ESTIMATE: \\(setting\\): must be one of measured, seed"):
        config.estimate()
    assert config.estimate("seed") == "seed"
