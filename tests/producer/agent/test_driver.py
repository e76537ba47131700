"""The agent reads the cards' driver and, where it is older than the 550 branch, tells the operator once how
to have plans count vLLM's larger CUDA graphs there (``planner.vllmrelease.OLD_DRIVER_GRAPHS``)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from structlog.testing import capture_logs

from planner.settings import parse_settings
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


def test_an_old_driver_is_told_once_with_the_setting_that_counts_it() -> None:
    reader = DriverReader(IDLE, version="535.230.02")
    agent = Agent("old", reader, boot_id="boot-1")
    with capture_logs() as logs:
        agent.tick()
        agent.tick()
    told = [e for e in logs if e["event"] == "old_driver"]
    assert len(told) == 1 and reader.asked == 1
    assert told[0]["driver"] == "535.230.02" and told[0]["log_level"] == "warning"
    # the fix it names is a deployment setting the workers take as it is written
    given = told[0]["fix"].split("MODELPLAN_SETTINGS='")[1].split("'")[0]
    assert parse_settings(json.loads(given)).vllm.nvidia_driver == "535.230.02"


def test_a_current_driver_an_unreadable_one_or_a_cpu_node_is_not_told() -> None:
    for reader in (DriverReader(IDLE, version="550.54.15"), DriverReader(IDLE, version="unknown"), DriverReader(IDLE)):
        with capture_logs() as logs:
            Agent("n", reader, boot_id="boot-1").tick()
        assert not [e for e in logs if e["event"] == "old_driver"], reader.version
    cpu = DriverReader([], version="535.230.02")
    with capture_logs() as logs:
        Agent("cpu", cpu, boot_id="boot-1").tick()
    assert cpu.asked == 0 and not [e for e in logs if e["event"] == "old_driver"]
