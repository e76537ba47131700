"""A job followed from submit to an engine that serves, with the shipped stand-in engine
(``producer/standin.py``) as real processes: the record's endpoint answers over HTTP; an engine killed
after serving is started again, then said to have ended (in ``job``, ``status`` and the client); and an
engine out of memory at start is said, planned again, and planned with more the next time."""

from __future__ import annotations

import json
import os
import signal
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from planner.errors import InvalidInput
from producer import Client
from producer.agent import Agent, SystemReader, run_from_args
from producer.agent.endpoints import bind_address
from producer.agent.engine_state import EngineRecord, Store
from producer.agent.supervise import Supervisor
from producer.errors import NotServing
from producer.render import job_row, job_text
from tests.producer.agent.conftest import STANDIN
from tests.producer.agent.test_agent import agent_args
from tests.producer.agent.test_supervise import BOOT, HOLD_MIB, CpuReader, until
from tests.worker.helpers import drain, event_reasons, request
from worker import maintenance, observed
from worker.records import JobState
from worker.reports import FOOTPRINTS


@pytest.fixture(autouse=True)
def _fresh() -> None:
    FOOTPRINTS.take()
    observed.forget()


def standin(tag: Path, fail_first: str = "") -> Callable[[list[str]], list[str]]:
    """The engine's command line run by the stand-in (the engine's name kept, so that it answers as that
    engine), the first start told to fail with ``fail_first``."""
    starts: list[int] = []

    def wrap(argv: list[str]) -> list[str]:
        starts.append(1)
        fail = ["--fail", fail_first] if fail_first and len(starts) == 1 else []
        return [sys.executable, "-P", STANDIN, *argv, "--hold-mib", str(HOLD_MIB), "--tag", str(tag), *fail]

    return wrap


def agent(client: Client, state: Path, wrap: Callable[[list[str]], list[str]], **kw: Any) -> tuple[Agent, Supervisor]:
    reader = SystemReader(nvml=lambda: None, smi=lambda _: None, cgroup=None)
    sup = Supervisor(state, boot_id=BOOT, reader=reader, wrap=wrap, **kw)
    return Agent("cpu-1", CpuReader(), client, boot_id=BOOT, supervisor=sup), sup


def step(client: Client, a: Agent) -> None:
    """One tick of the agent, then what a worker does with it: its mirror reads the node, its sweep writes
    the engines' conditions, and the planning queue is run."""
    a.tick()
    client.store.snapshot()
    maintenance.sweep(client.store, force=True)
    drain(client)


def engine_of(client: Client, job: str) -> str:
    cond = client.get(job).replicas[0].engine
    return cond.state if cond is not None else ""


def call(endpoint: str, path: str, body: object | None = None, key: str = "") -> tuple[int, dict[str, object]]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://{endpoint}{path}", data=data)
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as answer:
            return int(answer.status), json.loads(answer.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def submitted(client: Client, a: Agent) -> str:
    a.tick()  # the node is in the pool
    job = client.submit(request("llama-3-8b-gguf"))
    drain(client)
    assert client.get(job).state is JobState.PLACED
    return job


def test_from_submit_to_serving_then_a_killed_engine_is_restarted_and_then_ended(
    client: Client, tmp_path: Path, engines: list[int]
) -> None:
    a, sup = agent(client, tmp_path / "state", standin(tmp_path), max_restarts=1, restart_backoff=0.0)
    job = submitted(client, a)
    step(client, a)
    assert engine_of(client, job) == "starting"
    until(lambda: engine_of(client, job) == "serving", lambda: step(client, a))
    rec = client.wait_serving(job, timeout=5)
    cond = rec.replicas[0].engine
    assert cond is not None and cond.endpoint.startswith("127.0.0.1:") and cond.hold_id == rec.placement[0].hold_id
    assert cond.model == rec.request.model  # what its /v1/models says: the --alias its command line gives
    # the engine wants the job's API key, which the record does not hold and its submitter reads
    key = client.api_key(job)
    assert key and key not in client.redis.get(client.keys.job(job)).decode()  # type: ignore[union-attr]
    assert call(cond.endpoint, "/v1/models")[0] == 401
    assert call(cond.endpoint, "/v1/models", key="wrong")[0] == 401
    code, models = call(cond.endpoint, "/v1/models", key=key)
    assert code == 200 and models["data"] == [{"id": cond.model, "object": "model", "owned_by": "llamacpp"}]
    code, answer = call(cond.endpoint, "/v1/completions", {"model": cond.model, "prompt": "hi"}, key=key)
    assert code == 200 and answer["choices"][0]["text"] == "a stand-in answer"  # type: ignore[index]
    assert f"serving since {cond.since.isoformat(timespec='seconds')}: {cond.endpoint}" in job_text(rec)
    assert any(r.endswith(f"serves {cond.model} at {cond.endpoint}") for r in event_reasons(client, job))

    # killed after serving: started again, once, and serving again
    [pid] = sup.pids().values()
    engines.append(pid)
    os.kill(pid, signal.SIGKILL)
    until(lambda: bool(sup.pids()) and pid not in sup.pids().values(), lambda: step(client, a))
    engines.extend(sup.pids().values())
    until(lambda: engine_of(client, job) == "serving", lambda: step(client, a))
    assert client.get(job).replicas[0].engine.restarts == 1  # type: ignore[union-attr]

    # killed again: past its restarts it has ended, and nothing shows it as running
    [pid] = sup.pids().values()
    os.kill(pid, signal.SIGKILL)
    until(lambda: engine_of(client, job) == "ended", lambda: step(client, a))
    rec = client.get(job)
    assert rec.state is JobState.PLACED and not rec.replicas[0].running
    assert "killed by signal SIGKILL (after 1 restarts)" in rec.reason
    row = job_row(rec)[3]
    assert row.startswith("engine ended at cpu-1") and "runs " not in row
    assert "ended since" in job_text(rec)
    with pytest.raises(NotServing, match="killed by signal SIGKILL"):
        client.wait_serving(job, timeout=1)
    client.release(job)
    until(lambda: not sup.pids() and not sup.ended(), lambda: step(client, a))


def test_out_of_memory_at_start_is_said_planned_again_and_planned_with_more(
    client: Client, tmp_path: Path, engines: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(observed.QUORUM_ENV, "1")  # one node: its word is taken
    a, sup = agent(client, tmp_path / "state", standin(tmp_path, fail_first="oom"))
    job = submitted(client, a)
    first = client.get(job)
    hold, need = first.placement[0].hold_id, first.replicas[0].option.need_gb  # type: ignore[union-attr]

    def planned_again() -> bool:
        rec = client.get(job)
        return bool(rec.placement) and rec.placement[0].hold_id != hold

    until(planned_again, lambda: step(client, a))
    oom = "llama_model_load: error loading model: unable to allocate CUDA0 buffer"
    assert any(
        f"ran out of memory at start (exited with status 1: {oom}); planned again" in r
        for r in event_reasons(client, job)
    )
    rec = client.get(job)
    assert rec.replicas[0].start_failures == 1
    option = rec.replicas[0].option
    assert option is not None and option.need_gb > need and option.estimate == "observed"
    until(lambda: engine_of(client, job) == "serving", lambda: step(client, a))
    engines.extend(sup.pids().values())
    client.wait_serving(job, timeout=5)
    client.release(job)
    until(lambda: not sup.pids(), lambda: step(client, a))


def test_advertise_binds_engines_to_that_address_and_says_it_as_the_endpoint(
    client: Client, tmp_path: Path, engines: list[int], redis_url: str, logging_restored: None
) -> None:
    assert bind_address("127.0.0.1") == "127.0.0.1" and bind_address("localhost") == "127.0.0.1"
    for bad in ("host name", "a:b", "-lead", "x" * 254):
        with pytest.raises(InvalidInput, match="--advertise"):
            bind_address(bad)
    state = tmp_path / "state"
    once = ("--once", "--node-id", "cpu-1", "--gpu-class", "", "--redis-url", redis_url, "--engines", "run")
    run_from_args(agent_args(*once, "--state-dir", str(state), "--advertise", "localhost"), reader=CpuReader())
    job = client.submit(request("llama-3-8b-gguf"))
    drain(client)
    hold = client.get(job).placement[0].hold_id
    with pytest.MonkeyPatch.context() as m:
        m.setattr(Supervisor, "__init__", _wrapped(Supervisor.__init__, standin(tmp_path)))
        run_from_args(agent_args(*once, "--state-dir", str(state), "--advertise", "localhost"), reader=CpuReader())
    record = EngineRecord.from_json(Store(state).record_path(hold).read_text())
    engines.append(record.pid)
    assert record.command[record.command.index("--host") + 1] == "127.0.0.1"  # localhost's address
    # an agent of another boot: the job is planned again there, and its engine says where it serves
    a, sup = agent(client, state, standin(tmp_path), advertise="localhost")
    until(lambda: engine_of(client, job) == "serving", lambda: step(client, a))
    engines.extend(sup.pids().values())
    rec = client.get(job)
    cond = rec.replicas[0].engine
    now = EngineRecord.from_json(Store(state).record_path(rec.placement[0].hold_id).read_text())
    assert cond is not None and cond.endpoint == f"localhost:{now.port}"
    assert call(cond.endpoint, "/v1/models", key=client.api_key(job))[0] == 200
    client.release(job)
    until(lambda: not sup.pids(), lambda: step(client, a))


def _wrapped(init: Callable[..., None], wrap: Callable[[list[str]], list[str]]) -> Callable[..., None]:
    """``Supervisor.__init__`` with the stand-in in place of the engine, whatever the command line gave."""

    def patched(self: Supervisor, *args: object, **kw: object) -> None:
        init(self, *args, **{**kw, "wrap": wrap})

    return patched
