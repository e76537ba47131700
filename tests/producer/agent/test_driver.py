"""The agent reads the cards' driver once and publishes it, with the cards' vendor, in every heartbeat, so
that plans count vLLM's larger CUDA graphs on a node whose driver is older than the 550 branch
(``planner.platform``); it says so once where it is."""

from __future__ import annotations

from dataclasses import dataclass

from structlog.testing import capture_logs

from producer import constants as K
from producer.agent.loop import Agent
from producer.agent.probes import SystemReader
from tests.producer.agent.test_agent import IDLE, FakeNvml, FakeReader, FakeSmi, data, nvml


def test_the_driver_is_read_from_nvml_else_nvidia_smi() -> None:
    fake = FakeNvml(nvml("nvml_idle.json"), driver="580.159.04")
    assert SystemReader(nvml=lambda: fake, smi=FakeSmi(None, None), cgroup=None).driver() == "580.159.04"
    assert fake.open == 0
    smi = FakeSmi(data("smi_busy.csv"), "", driver="535.230.02\n535.230.02\n")
    assert SystemReader(nvml=lambda: None, smi=smi, cgroup=None).driver() == "535.230.02"
    assert smi.calls == [K.SMI_DRIVER_ARGS]
    failing = FakeNvml(nvml("nvml_idle.json"), init_error="Driver Not Loaded")
    assert SystemReader(nvml=lambda: failing, smi=FakeSmi(None, None), cgroup=None).driver() is None


@dataclass
class DriverReader(FakeReader):
    version: str | None = None
    asked: int = 0

    def driver(self) -> str | None:
        self.asked += 1
        return self.version


def test_an_old_driver_is_told_once_and_published_with_every_heartbeat() -> None:
    reader = DriverReader(IDLE, version="535.230.02")
    agent = Agent("old", reader, boot_id="boot-1")
    with capture_logs() as logs:
        agent.tick()
        agent.tick()
    told = [e for e in logs if e["event"] == "old_driver"]
    assert len(told) == 1 and reader.asked == 1
    assert told[0]["driver"] == "535.230.02" and told[0]["log_level"] == "warning"
    assert "fix" not in told[0]  # nothing for the operator to set: the plan reads it from the node
    beat = agent.heartbeat(*agent.read())
    assert (beat.gpu_vendor, beat.gpu_driver) == ("nvidia", "535.230.02")
    node = beat.to_pool_node()
    assert (node.gpu_vendor, node.gpu_driver) == ("nvidia", "535.230.02") and reader.asked == 1


def test_a_current_driver_is_published_and_not_told() -> None:
    reader = DriverReader(IDLE, version="550.54.15")
    agent = Agent("n", reader, boot_id="boot-1")
    with capture_logs() as logs:
        agent.tick()
    assert not [e for e in logs if e["event"] == "old_driver"]
    assert agent.heartbeat(*agent.read()).gpu_driver == "550.54.15"


def test_an_unreadable_driver_or_none_is_not_published_and_a_cpu_node_names_no_vendor() -> None:
    for reader in (DriverReader(IDLE, version="unknown"), DriverReader(IDLE), FakeReader(IDLE)):
        agent = Agent("n", reader, boot_id="boot-1")
        with capture_logs() as logs:
            agent.tick()
        assert not [e for e in logs if e["event"] == "old_driver"]
        beat = agent.heartbeat(*agent.read())
        assert (beat.gpu_vendor, beat.gpu_driver) == ("nvidia", ""), reader
        assert "gpu_driver" not in beat.model_dump_json()
    cpu = DriverReader([], version="535.230.02")
    agent = Agent("cpu", cpu, boot_id="boot-1")
    with capture_logs() as logs:
        agent.tick()
    assert cpu.asked == 0 and not [e for e in logs if e["event"] == "old_driver"]
    beat = agent.heartbeat(*agent.read())
    assert (beat.gpu_vendor, beat.gpu_driver) == ("", "") and "gpu_vendor" not in beat.model_dump_json()
