"""docker-compose.yml, a deployment an operator can run: Redis with persistence, a password from a secret
and its users kept in an ACL file; a one-shot setup that loads the functions and sets each role's user;
scalable workers, a CPU agent that starts engines and the metrics exporter, each on its role's login; one
image built once. Where a docker daemon with compose is here, it is validated by compose itself."""

from __future__ import annotations

import contextlib
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from producer.cli import parser
from tests.redis_server import free_port

ROOT = Path(__file__).resolve().parents[1]


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def modelplan_services() -> dict[str, Any]:
    return {n: s for n, s in compose()["services"].items() if s["image"].startswith("modelplan:")}


def redis_script() -> str:
    redis = compose()["services"]["redis"]
    assert redis["entrypoint"] == ["sh", "-c"]
    [script] = redis["command"]
    return str(script).replace("$$", "$")  # compose's escape of a literal $


def setup_commands() -> list[list[str]]:
    """The setup service's commands, each as its words."""
    setup = compose()["services"]["setup"]
    assert setup["entrypoint"] == ["sh", "-c"]
    [chain] = setup["command"]
    return [shlex.split(part) for part in str(chain).split("&&")]


def test_redis_persists_keeps_its_users_and_reports_health() -> None:
    script = redis_script()
    assert "--appendonly yes" in script and "--appendfsync everysec" in script
    assert '--aclfile "$acl"' in script and "acl=/data/users.acl" in script  # on the volume: a restart keeps them
    assert "--notify-keyspace-events 'K$x'" in script  # the workers' intake, kept across a restart
    redis = compose()["services"]["redis"]
    assert redis["secrets"] == ["redis_admin"]
    assert "cat /run/secrets/redis_admin" in redis["healthcheck"]["test"][1]  # a ping needs the login now
    assert any(v.endswith(":/data") for v in redis["volumes"]) and "redis-data" in compose()["volumes"]
    assert redis["ports"] == ["127.0.0.1:6379:6379"]


def test_the_redis_start_gives_the_administrator_its_secret_and_keeps_every_other_user(tmp_path: Path) -> None:
    """The service's own script, run on this machine (its folders moved under a temporary one, and no
    ``gosu``): the administrator logs in with the secret's password and nothing else does; a role user
    saved to the ACL file is there after the next start, and a new secret replaces the old password."""
    binary = shutil.which("redis-server")
    assert binary, "redis-server is not installed: run scripts/setup"
    data, secret = tmp_path / "data", tmp_path / "redis_admin"
    data.mkdir()
    port = free_port()
    script = redis_script().replace("/data", str(data)).replace("/run/secrets/redis_admin", str(secret))
    script = script.replace("find ", ": find ").replace("exec gosu redis redis-server", f"exec {binary}")
    script = script.replace("--appendonly yes", f"--port {port} --bind 127.0.0.1 --dir {data} --appendonly yes")

    def start(password: str) -> subprocess.Popen[bytes]:
        secret.write_text(password + "\n")
        proc = subprocess.Popen(["sh", "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            with contextlib.suppress(redis.RedisError):
                redis.Redis(port=port, password=password).ping()
                return proc
            time.sleep(0.05)
        proc.kill()
        raise AssertionError("redis-server did not start from the compose file's script")

    proc = start("first-secret")
    try:
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=port).ping()  # no login: refused
        admin = redis.Redis(port=port, password="first-secret")
        assert admin.config_get("notify-keyspace-events")["notify-keyspace-events"] in ("$xK", "K$x", "$Kx")
        admin.execute_command("ACL", "SETUSER", "modelplan.worker", "on", ">worker-pw", "~*", "+ping")  # type: ignore[no-untyped-call]
        admin.execute_command("ACL", "SAVE")  # type: ignore[no-untyped-call]
    finally:
        proc.terminate()
        proc.wait(10)
    proc = start("second-secret")
    try:
        assert redis.Redis(port=port, username="modelplan.worker", password="worker-pw").ping()
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=port, password="first-secret").ping()
        assert (data / "users.acl").read_text().count("user default ") == 1
    finally:
        proc.terminate()
        proc.wait(10)


def test_the_setup_loads_the_functions_and_sets_every_roles_user_once() -> None:
    setup = compose()["services"]["setup"]
    assert setup["restart"] == "no" and setup["depends_on"]["redis"]["condition"] == "service_healthy"
    assert setup["environment"]["MODELPLAN_REDIS_PASSWORD_FILE"] == "/run/secrets/redis_admin"
    commands = setup_commands()
    assert commands[0] == ["modelplan", "setup-redis"]
    files = {}
    for words in commands[1:]:
        if words[1] == "acl":
            assert "--apply" in words and "--save" in words, words  # set, and kept across a restart
            files[words[2] + (":" + words[3] if not words[3].startswith("-") else "")] = words[
                words.index("--password-file") + 1
            ]
    # every service logs in as a role the setup set, with the password file it wrote
    for name, service in modelplan_services().items():
        if name == "setup":
            continue
        env = service["environment"]
        user = env["MODELPLAN_REDIS_URL"].split("//")[1].split("@")[0]
        role = user.removeprefix("modelplan.").replace(".", ":", 1)
        assert files[role] == env["MODELPLAN_REDIS_PASSWORD_FILE"], name
        assert service["depends_on"]["setup"]["condition"] == "service_completed_successfully", name


def test_no_password_is_written_in_the_file() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    assert not re.search(r"rediss?://[^@/\s]*:[^@/\s]*@", text)  # a URL's login holds no password
    assert "requirepass" not in text and "--password " not in text
    assert compose()["secrets"]["redis_admin"]["file"].endswith("/redis-admin.password")


def test_workers_scale_and_log_in_as_workers() -> None:
    worker = compose()["services"]["worker"]
    assert "container_name" not in worker and "ports" not in worker  # so --scale worker=N works
    assert worker["environment"]["MODELPLAN_REDIS_URL"] == "redis://modelplan.worker@redis:6379/0"
    assert worker["environment"]["RQ_KEY_PREFIX"] == "modelplan:rq"


def test_the_example_cpu_agent_starts_engines() -> None:
    """A CPU node that only logged engines would take CPU jobs that never start."""
    command = compose()["services"]["agent-cpu"]["command"]
    assert command[command.index("--engines") + 1] == "run"


def test_every_command_in_it_is_a_modelplan_command() -> None:
    commands = [s["command"] for s in modelplan_services().values() if s["command"][0] == "modelplan"]
    commands += setup_commands()
    assert {c[1] for c in commands} == {"worker", "agent", "metrics", "setup-redis", "acl", "client"}
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
    assert set(modelplan) == {"setup", "worker", "agent-cpu", "metrics"}
    for name, image in images.items():
        assert PATCH_TAG.match(image), f"{name}: {image}"
    [base] = [line.split()[1] for line in dockerfile() if line.startswith("FROM ")]
    assert PATCH_TAG.match(base), base


def test_modelplans_image_is_built_once() -> None:
    services = modelplan_services()
    built = [name for name, s in services.items() if "build" in s]
    assert built == ["setup"] and services["setup"]["build"] == "."
    for name, service in services.items():
        if name != "setup":
            assert service["pull_policy"] == "never", name  # the one built here, never one pulled by its name


def test_the_image_installs_the_lock_and_runs_as_a_user_of_its_own() -> None:
    lines = dockerfile()
    runs = [line for line in lines if line.startswith("RUN ")]
    assert runs[0] == "RUN pip install --no-cache-dir -r requirements.lock"
    assert "RUN pip install --no-cache-dir --no-deps ." in runs
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("0", "root") and users[-1].split(":")[0].isdigit()
    assert lines.index(f"USER {users[-1]}") > max(lines.index(r) for r in runs)  # nothing after it runs as root
    assert not any("user" in s for s in compose()["services"].values() if s["image"].startswith("modelplan:"))
