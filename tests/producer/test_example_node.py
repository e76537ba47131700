"""examples/node: a service in Node, with no package, submits, watches and releases through the request
stream against a real worker."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from producer import Client
from producer.clients import add
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
