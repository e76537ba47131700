"""``modelplan agent --simulate``: cards that are not there, reported as real ones of their class are, said
in the log and the heartbeat, and placed on by a worker like any node's."""

from __future__ import annotations

import json

import pytest
from structlog.testing import capture_logs

from planner.errors import InvalidInput
from producer import Client
from producer import constants as K
from producer.agent import Agent, class_label, run_from_args
from producer.agent.simulated import SimulatedReader, parse_simulate
from tests.producer.agent.test_agent import agent_args
from tests.worker.helpers import drain, request
from worker.records import JobState


def test_the_spec_is_count_x_class_or_cpu() -> None:
    assert parse_simulate("8xh100-80g") == (8, "h100-80g")
    assert parse_simulate("2xl40s-48g") == (2, "l40s-48g")
    assert parse_simulate("cpu") == (0, "")
    for bad, said in [
        ("8h100-80g", "is not COUNTxCLASS"),
        ("8xh100-81g", "no simulated class 'h100-81g': one of a100-40g, "),
        ("0xh100-80g", "0 cards: give 1 to 64"),
        ("65xh100-80g", "65 cards"),
    ]:
        with pytest.raises(InvalidInput, match="--simulate") as e:
            parse_simulate(bad)
        assert said in str(e.value)


@pytest.mark.parametrize("label", sorted(K.SIMULATED_CARDS))
def test_each_simulated_card_is_labelled_as_a_real_one_of_its_class(label: str) -> None:
    cards = SimulatedReader.of(f"2x{label}").cards()
    assert [c.index for c in cards] == [0, 1] and all(c.idle for c in cards)
    assert {class_label(c.name, c.total_mib) for c in cards} == {label}


def test_once_dry_run_says_simulated_in_the_log_and_the_heartbeat(
    capsys: pytest.CaptureFixture[str], logging_restored: None
) -> None:
    args = agent_args("--once", "--dry-run", "--node-id", "sim-h100", "--simulate", "8xh100-80g")
    assert run_from_args(args) == 0
    out, err = capsys.readouterr()
    beat = json.loads(out)
    assert (beat["gpu_class"], beat["gpus"], beat["free_gpus"], beat["gpu_mem_gb"]) == ("h100-80g", 8, 8, 79)
    assert beat["simulated"] is True and beat["host_mem_gb"] > 0
    said = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert any(e["event"] == "cards_source" and e["source"] == "simulated" for e in said), err
    # a CPU node
    assert run_from_args(agent_args("--once", "--dry-run", "--node-id", "sim-cpu", "--simulate", "cpu")) == 0
    beat = json.loads(capsys.readouterr().out)
    assert (beat["gpu_class"], beat["gpus"], beat["simulated"]) == ("", 0, True)


def test_a_worker_places_a_job_on_simulated_cards(client: Client) -> None:
    agent = Agent("sim-1", SimulatedReader.of("2xl40s-48g"), client, boot_id="boot-1")
    agent.tick()
    stored = client.redis.get(client.keys.node("sim-1"))
    assert stored is not None and json.loads(stored)["simulated"] is True
    job = client.submit(request("llama-3.1-8b-instruct", context=8192))
    drain(client)
    rec = client.get(job)
    assert rec.state is JobState.PLACED and [r.node_id for r in rec.placement] == ["sim-1"]
    assert rec.option is not None and rec.option.gpu_class == "l40s-48g"
    with capture_logs() as logs:
        agent.tick()
    [planned] = [e for e in logs if e["event"] == "engine_start_planned"]
    # the engine it would start is confined to its card as on a real node
    assert planned["cuda_visible_devices"] == "0" and planned["command"][:2] == ["vllm", "serve"]
    assert client.pool().records["sim-1"].free_gpus == 1
