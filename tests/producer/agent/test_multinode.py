"""A replica over several nodes (vLLM pipeline parallel): each node's agent works out its own part from the
hold (its rank, the head's address, the port the nodes meet on) and starts only that, with the default
hook and with ``--engines run`` (a stand-in engine in place of vLLM)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from structlog.testing import capture_logs

from producer import Client
from producer.agent import Agent
from producer.agent.engines import master_port, shown
from producer.agent.hooks import log_start
from producer.agent.simulated import SimulatedReader
from producer.agent.supervise import Supervisor
from producer.render import job_text
from tests.producer.agent.test_supervise import BOOT, standin, until
from tests.worker.helpers import drain, request
from worker.records import JobState


def _nodes(client: Client, **hooks: object) -> dict[str, Agent]:
    """Two nodes of four simulated A100 40 GB cards on one fabric: a 70B model in bf16 needs both."""
    agents = {
        n: Agent(n, SimulatedReader.of("4xa100-40g"), client, fabric="ib-west", boot_id=BOOT, **hooks)  # type: ignore[arg-type]
        for n in ("a100-a", "a100-b")
    }
    for a in agents.values():
        a.tick()
    return agents


def test_each_node_is_handed_its_own_part(client: Client) -> None:
    agents = _nodes(client, start_hook=lambda *a: log_start(*a, models_dir="/data/models"))
    job = client.submit(request("llama-3.1-70b-instruct", context=8192))
    drain(client)
    rec = client.get(job)
    assert rec.state is JobState.PLACED and rec.option is not None and rec.option.nodes == 2, rec.reason
    head, other = (r.node_id for r in rec.placement)
    hold = rec.placement[0].hold_id
    parts = {}
    for node in (head, other):
        with capture_logs() as logs:
            agents[node].tick()
        [planned] = [e for e in logs if e["event"] == "engine_start_planned"]
        parts[node] = planned
    for rank, node in enumerate((head, other)):
        command = parts[node]["command"]
        assert parts[node]["node_rank"] == rank and parts[node]["nodes"] == 2
        assert parts[node]["cuda_visible_devices"] == "0,1,2,3"
        assert command[:3] == ["vllm", "serve", "/data/models/llama-3.1-70b-instruct"]
        assert command[command.index("--tensor-parallel-size") + 1] == "4"
        assert command[command.index("--pipeline-parallel-size") + 1] == "2"
        assert command[command.index("--nnodes") + 1] == "2"
        assert command[command.index("--node-rank") + 1] == str(rank)
        assert command[command.index("--master-addr") + 1] == head
        assert command[command.index("--master-port") + 1] == str(master_port(hold))
        assert ("--headless" in command) is (rank > 0)
    # modelplan job prints each node's line, the same the agents run but for the models dir only they know
    said = job_text(rec).splitlines()
    for node in (head, other):
        line = f"  replica 0 on {node}: " + shown(parts[node]["command"]).replace("/data/models", "MODELS_DIR")
        assert line in said
    # the two lines differ only in the node's own part
    strip = {"--node-rank", "0", "1", "--headless"}
    assert [a for a in parts[head]["command"] if a not in strip] == [
        a for a in parts[other]["command"] if a not in strip
    ]


def test_engines_run_starts_each_nodes_part(client: Client, tmp_path: Path, engines: list[int]) -> None:
    launched: dict[str, list[str]] = {}

    def wrapped(node: str) -> Supervisor:
        def wrap(argv: list[str]) -> list[str]:
            launched[node] = argv
            return standin(tmp_path)(argv)

        return Supervisor(tmp_path / node, boot_id=BOOT, reader=SimulatedReader.of("4xa100-40g"), wrap=wrap)

    sups = {n: wrapped(n) for n in ("a100-a", "a100-b")}
    agents = {
        n: Agent(n, SimulatedReader.of("4xa100-40g"), client, fabric="ib-west", boot_id=BOOT, supervisor=sups[n])
        for n in sups
    }
    for a in agents.values():
        a.tick()
    job = client.submit(request("llama-3.1-70b-instruct", context=8192))
    drain(client)
    rec = client.get(job)
    assert rec.state is JobState.PLACED and rec.option is not None and rec.option.nodes == 2, rec.reason
    head, other = (r.node_id for r in rec.placement)
    for a in agents.values():
        a.tick()  # the hand-off
    engines.extend(pid for s in sups.values() for pid in s.pids().values())
    assert launched[head][launched[head].index("--node-rank") + 1] == "0"
    assert launched[other][launched[other].index("--node-rank") + 1] == "1"
    assert launched[other][launched[other].index("--master-addr") + 1] == head
    assert "--headless" in launched[other] and "--headless" not in launched[head]
    # each node's own line (the stand-in in place of vllm), as its record keeps it
    [record] = sups[other].store.load()
    at = record.command.index(launched[other][1])  # past the interpreter, its flags and the stand-in's path
    assert record.command[at : at + len(launched[other]) - 1] == launched[other][1:] and record.cards == [0, 1, 2, 3]
    client.release(job)
    for n, a in agents.items():
        until(stopped(sups[n]), a.tick)


def stopped(sup: Supervisor) -> Callable[[], bool]:
    return lambda: not sup.pids()
