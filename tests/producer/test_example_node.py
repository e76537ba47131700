"""examples/node: a service in Node, with no package, submits, watches and releases through the request
stream against a real worker."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from producer import Client
from producer.clients import acl_rule, acl_user, add
from tests.redis_server import free_port
from tests.worker.helpers import hb, request, whole_state
from tests.worker.processes import ROOT, WorkerProcess
from worker.records import parse_request

SCRIPT = ROOT / "examples" / "node" / "modelplan.mjs"
REQUEST = ROOT / "examples" / "requests" / "llama-3.1-8b-instruct.json"


def test_the_example_request_is_the_one_the_python_client_builds() -> None:
    assert parse_request(REQUEST.read_text()) == request()
    assert json.loads(REQUEST.read_text()) == json.loads(request().model_dump_json())


def run_node(node: str, redis_url: str, job_id: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [node, str(SCRIPT), "--redis-url", redis_url, "--job-id", job_id, "--request", str(REQUEST), *args],
        capture_output=True,
        text=True,
        timeout=90,
    )


def test_the_node_example_submits_watches_and_releases(redis_url: str, tmp_path: Path) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the Node example cannot run here")
    client = Client.from_url(redis_url)
    client.heartbeat(hb("gpu-a", gpus=1))
    add(client.redis, client.keys, "node-svc")
    worker = WorkerProcess(redis_url, tmp_path, "w")
    try:
        out = run_node(node, redis_url, "node-1", "--client-id", "node-svc", "--release")
        # another client naming the job: refused on its own replies, and told so
        add(client.redis, client.keys, "other-svc")
        other = run_node(node, redis_url, "node-1", "--client-id", "other-svc")
        shared = run_node(node, redis_url, "node-2", "--release")
    finally:
        worker.stop()
    assert out.returncode == 0, out.stdout + out.stderr
    states = [line.split()[1] for line in out.stdout.splitlines()]
    assert states[0] == "queued" and "placed" in states and states[-1] == "released", out.stdout
    assert other.returncode == 1 and other.stdout == "node-1 refused job 'node-1' belongs to another client\n"
    assert shared.returncode == 0 and shared.stdout.splitlines()[-1].split()[:2] == ["node-2", "released"]
    assert {j: (client.get(j).state.value, client.get(j).owner) for j in ("node-1", "node-2")} == {
        "node-1": ("released", "node-svc"),
        "node-2": ("released", None),
    }
    assert whole_state(client)["held"] == {}
    client.redis.close()


def node_or_skip() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the Node example cannot run here")
    return node


def test_the_node_example_has_a_help_and_sends_select_only_for_another_database() -> None:
    """Read from the source, where node is missing: ``--help`` is an option of its own, and ``SELECT``,
    which a client's ACL login may not run, is sent only for a database other than 0."""
    source = SCRIPT.read_text()
    assert 'help: { type: "boolean"' in source
    [select] = [line.strip() for line in source.splitlines() if '"SELECT"' in line]
    assert select.startswith('if (this.db !== "0")'), select


def test_the_node_example_help_is_its_usage_with_no_trace() -> None:
    out = subprocess.run([node_or_skip(), str(SCRIPT), "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: node examples/node/modelplan.mjs --job-id ID --request FILE")
    assert "--redis-url" in out.stdout and out.stderr == ""


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--no-such-option"], "modelplan.mjs: Unknown option '--no-such-option'"),
        (["--job-id", "x"], "modelplan.mjs: --request FILE is required"),
        (["--request", str(REQUEST)], "modelplan.mjs: --job-id ID is required"),
    ],
)
def test_bad_arguments_to_the_node_example_are_one_line(args: list[str], said: str) -> None:
    nowhere = ["--redis-url", f"redis://127.0.0.1:{free_port()}/0"]  # whatever it did, it would reach no Redis
    out = subprocess.run([node_or_skip(), str(SCRIPT), *nowhere, *args], capture_output=True, text=True, timeout=30)
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr.startswith(said + "; ") and out.stderr.count("\n") == 1, out.stderr


def test_the_node_example_with_redis_unreachable_says_so_in_one_line() -> None:
    url = f"redis://someone:secret@127.0.0.1:{free_port()}/0"
    out = run_node(node_or_skip(), url, "node-x")
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr == (
        f"modelplan.mjs: cannot reach Redis at {url.replace('secret', '****')}: "
        f"connect ECONNREFUSED 127.0.0.1:{url.rsplit(':', 1)[1].split('/')[0]}\n"
    )


def test_the_node_example_runs_on_a_clients_acl_login(redis_url: str, tmp_path: Path) -> None:
    """The login ``modelplan client add`` prints the rule of: no SELECT among its commands."""
    node = node_or_skip()
    client = Client.from_url(redis_url)
    client.heartbeat(hb("gpu-a", gpus=1))
    add(client.redis, client.keys, "acl-svc")
    words = acl_rule(client.keys, "acl-svc", password="acl-secret").split()
    client.redis.execute_command("ACL", "SETUSER", *words[1:])  # type: ignore[no-untyped-call]
    login = redis_url.replace("redis://", f"redis://{acl_user(client.keys, 'acl-svc')}:acl-secret@")
    worker = WorkerProcess(redis_url, tmp_path, "w")
    try:
        out = run_node(node, login, "acl-1", "--client-id", "acl-svc", "--release")
    finally:
        worker.stop()
        client.redis.acl_deluser(acl_user(client.keys, "acl-svc"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[-1].split()[:2] == ["acl-1", "released"], out.stdout
    client.redis.close()
