"""docker-compose.yml: Redis with persistence and a healthcheck, scalable workers, an example agent, the
metrics exporter."""

from __future__ import annotations

import re
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
    assert {c[1] for c in commands} == {"worker", "agent", "metrics"}
    for c in commands:
        parser().parse_args(c[1:])  # exits (fails the test) on an unknown command or flag


def test_the_metrics_are_published_on_this_hosts_loopback_only() -> None:
    metrics = compose()["services"]["metrics"]
    command = metrics["command"]
    # inside its container the exporter must listen beyond loopback for the published port to reach it
    assert command[command.index("--addr") + 1] == "0.0.0.0"
    port = command[command.index("--port") + 1]
    assert metrics["ports"] == [f"127.0.0.1:{port}:{port}"]


def test_docker_compose_validates_it() -> None:
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        command = ["docker", "compose", "-f", str(ROOT / "docker-compose.yml"), "config", "-q"]
    elif shutil.which("docker-compose"):
        command = ["docker-compose", "-f", str(ROOT / "docker-compose.yml"), "config", "-q"]
    else:
        pytest.skip("no docker compose client here: docker-compose.yml checked by its structure only")
    out = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr


# --- pinned, locked, not root ---------------------------------------------------------------------------

PATCH_TAG = re.compile(r"^[a-z0-9./-]+:\d+\.\d+\.\d+(-[a-z0-9.-]+)?$")
"""An image named down to a patch release (``redis:7.4.2-bookworm``): ``redis:7`` or ``latest`` moves."""


def dockerfile() -> list[str]:
    return [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines() if line.strip()]


def test_every_image_is_pinned_to_a_patch_release() -> None:
    images = {name: s["image"] for name, s in compose()["services"].items()}
    modelplan = [name for name, image in images.items() if image.startswith("modelplan:")]
    assert set(modelplan) == {"worker", "agent-cpu", "metrics"}
    for name, image in images.items():
        assert PATCH_TAG.match(image), f"{name}: {image}"
    [base] = [line.split()[1] for line in dockerfile() if line.startswith("FROM ")]
    assert PATCH_TAG.match(base), base


def test_every_service_of_modelplans_image_can_build_it() -> None:
    for name, service in compose()["services"].items():
        if service["image"].startswith("modelplan:"):
            assert service.get("build") == ".", name  # `docker compose up` builds it, whichever starts first


def test_the_image_installs_the_lock_and_runs_as_a_user_of_its_own() -> None:
    lines = dockerfile()
    runs = [line for line in lines if line.startswith("RUN ")]
    assert runs[0] == "RUN pip install --no-cache-dir -r requirements.lock"
    assert "RUN pip install --no-cache-dir --no-deps ." in runs
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("0", "root") and users[-1].split(":")[0].isdigit()
    assert lines.index(f"USER {users[-1]}") > max(lines.index(r) for r in runs)  # nothing after it runs as root
    assert not any("user" in s for s in compose()["services"].values() if s["image"].startswith("modelplan:"))
