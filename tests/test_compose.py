"""docker-compose.yml: Redis with persistence and a healthcheck, scalable workers, an example agent."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from producer.cli import parser

ROOT = Path(__file__).resolve().parents[1]


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def test_redis_persists_and_reports_health() -> None:
    redis = compose()["services"]["redis"]
    command = redis["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert command[command.index("--appendfsync") + 1] in ("everysec", "always")
    assert redis["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    assert any(v.endswith(":/data") for v in redis["volumes"]) and "redis-data" in compose()["volumes"]


def test_workers_scale_and_wait_for_redis() -> None:
    services = compose()["services"]
    worker = services["worker"]
    assert "container_name" not in worker and "ports" not in worker  # so --scale worker=N works
    assert worker["depends_on"]["redis"]["condition"] == "service_healthy"
    assert worker["environment"]["MODELPLAN_REDIS_URL"] == "redis://redis:6379/0"
    assert (ROOT / worker["build"] / "Dockerfile").exists()


def test_every_command_in_it_is_a_modelplan_command() -> None:
    commands = [s["command"] for s in compose()["services"].values() if s["command"][0] == "modelplan"]
    assert {c[1] for c in commands} == {"worker", "agent"}
    for c in commands:
        parser().parse_args(c[1:])  # exits (fails the test) on an unknown command or flag


def test_docker_compose_validates_it() -> None:
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        command = ["docker", "compose", "-f", str(ROOT / "docker-compose.yml"), "config", "-q"]
    elif shutil.which("docker-compose"):
        command = ["docker-compose", "-f", str(ROOT / "docker-compose.yml"), "config", "-q"]
    else:
        pytest.skip("no docker compose client here: docker-compose.yml checked by its structure only")
    out = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
