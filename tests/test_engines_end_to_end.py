"""The loop closed with real processes: a job is placed on this machine as a CPU node; ``modelplan agent
--engines run`` (a process of its own) starts a stand-in engine for it (a process holding a known amount
of memory, answering its health check); what it holds reaches the workers in the heartbeat; the next job
for the same model is planned ``observed``, with more memory than the formula gave (a deployment of one
node takes its word: ``MODELPLAN_OBSERVED_QUORUM=1``). Release stops the
engine, and an agent killed and started again adopts the engine it left rather than starting a second."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from producer import Client
from producer.agent.engine_state import Store as EngineStore
from producer.agent.engine_state import proc_stat
from producer.client import request_from_listing
from tests.producer.agent.conftest import STANDIN, standins
from tests.worker.helpers import drain
from worker import maintenance, observed
from worker.records import JobState, ServeRequest
from worker.reports import FOOTPRINTS, NodeRecord

ROOT = Path(__file__).resolve().parents[1]
NODE = "e2e-cpu"
WAIT_S = 60.0
MODEL_MIB = 200
"""The GGUF's size in the listing: the formula counts it, and a little beside it."""


WIDE = {"hidden_size": 1024, "intermediate_size": 5120, "num_hidden_layers": 10, "num_attention_heads": 16}
"""The tiny Llama widened to some 212M parameters, so that its 200 MiB GGUF holds the 8 bits a weight its
Q8_0 names (the planner refuses a count its files' bytes belie), with one KV head of 64 to keep its
cache small."""


def tiny_gguf() -> ServeRequest:
    config = json.loads((ROOT / "examples/models/tiny-llama-safetensors/config.json").read_text())
    config |= {**WIDE, "num_key_value_heads": 1, "vocab_size": 32000, "tie_word_embeddings": True}
    files = [{"path": "tiny-Q8_0.gguf", "size": MODEL_MIB << 20}, {"path": "config.json", "size": 336}]
    return request_from_listing(files, config, None, model="tiny-gguf", context=4096)


def until(done: Callable[[], object], what: str) -> None:
    end = time.monotonic() + WAIT_S
    while not done():
        assert time.monotonic() < end, f"gave up waiting for {what}"
        time.sleep(0.1)


class Agents:
    """``modelplan agent --engines run`` processes for the node, each with a stand-in of ``hold_mib`` MiB
    on ``PATH`` as ``llama-server``."""

    def __init__(self, tmp_path: Path, redis_url: str) -> None:
        self.tmp_path, self.redis_url = tmp_path, redis_url
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, hold_mib: int) -> subprocess.Popen[bytes]:
        tmp_path, redis_url, started = self.tmp_path, self.redis_url, self.started
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        fake = bin_dir / "llama-server"
        fake.write_text(
            f'#!/bin/sh\nexec "{sys.executable}" -P "{STANDIN}" "$@" --hold-mib {hold_mib} --tag {tmp_path}\n'
        )
        fake.chmod(0o755)
        env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
        command = [sys.executable, "-c", "from producer.cli import main; raise SystemExit(main())"]
        command += ["agent", "--engines", "run", "--node-id", NODE]
        command += ["--gpu-class", "", "--interval", "0.3", "--state-dir", str(tmp_path / "state")]
        command += ["--redis-url", redis_url]
        with (tmp_path / f"agent-{len(started)}.log").open("wb") as log:
            proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        started.append(proc)
        return proc

    def kill(self) -> None:
        """Kill -9 every agent started (their engines run on)."""
        for proc in self.started:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()


@pytest.fixture
def agents(tmp_path: Path, redis_url: str) -> Iterator[Agents]:
    """Agents to start; every agent and stand-in started is killed at the end."""
    made = Agents(tmp_path, redis_url)
    yield made
    for proc in made.started:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()
    for pid in standins(tmp_path):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def footprint_of(client: Client, hold: str) -> int:
    """The RAM the node's record says the hold's engine holds (0 while it says nothing)."""
    raw = client.redis.get(client.keys.node(NODE))
    if raw is None:
        return 0
    fp = NodeRecord.model_validate_json(raw).footprints.get(hold)
    return fp.ram_bytes if fp is not None else 0


def test_an_engine_run_by_the_agent_is_measured_and_the_next_plan_uses_it(
    client: Client, tmp_path: Path, agents: Agents, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(observed.QUORUM_ENV, "1")  # the one node's word, as a deployment of one node takes it
    FOOTPRINTS.take()
    observed.forget()
    req = tiny_gguf()
    first_job = client.submit(req)
    # the formula's need, from the first plan; the stand-in holds a third more
    agents.start(1)
    until(lambda: client.redis.exists(client.keys.node(NODE)), "the node's first heartbeat")
    drain(client)
    first = client.get(first_job)
    assert first.state is JobState.PLACED and first.option is not None and first.option.cpu
    assert first.option.estimate == "measured"
    formula_gib = first.option.need_gb
    hold = first.placement[0].hold_id
    # the agent was started with a stand-in of 1 MiB only to report the node: now the real one
    agents.kill()
    for pid in standins(tmp_path):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(FileNotFoundError):
        EngineStore(tmp_path / "state").record_path(hold).unlink()
    hold_mib = int(formula_gib * 1024 * 1.3)
    agents.start(hold_mib)

    until(lambda: footprint_of(client, hold) >= hold_mib << 20, "the engine's footprint in the heartbeat")
    client.store.snapshot()  # a worker's mirror reads the changed record, then its sweep takes it
    maintenance.sweep(client.store, force=True)
    observed.forget()  # as another worker would: read from Redis

    second_job = client.submit(req)
    drain(client)
    second = client.get(second_job)
    assert second.state is JobState.PLACED and second.option is not None
    assert second.option.estimate == "observed", second.option
    assert second.option.need_gb >= footprint_of(client, hold) / 2**30 > formula_gib

    # release stops the first engine; the second job's runs on
    engines = EngineStore(tmp_path / "state")
    until(lambda: len(standins(tmp_path)) == 2, "the second job's engine")
    client.release(first_job)
    until(lambda: len(standins(tmp_path)) == 1, "the released job's engine to stop")
    [running] = standins(tmp_path)
    assert [r.pid for r in engines.load() if r.hold_id == second.placement[0].hold_id] == [running]

    # an agent killed and started again adopts the engine it left: the same process, no second one
    agents.kill()
    agents.start(hold_mib)

    def logs() -> str:
        return "".join(p.read_text() for p in tmp_path.glob("agent-*.log"))

    until(lambda: "engine_adopted" in logs(), "the engine's adoption")
    until(lambda: footprint_of(client, second.placement[0].hold_id) > 0, "the adopted engine's footprint")
    assert standins(tmp_path) == [running] and proc_stat(running) is not None
