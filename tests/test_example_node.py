"""examples/node: a service in Node, with no package, submits, watches and releases through the request
stream against a real worker."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from producer import Client
from tests.worker.helpers import hb, request, whole_state
from tests.worker.processes import ROOT, WorkerProcess
from worker.records import parse_request

SCRIPT = ROOT / "examples" / "node" / "modelplan.mjs"
REQUEST = ROOT / "examples" / "requests" / "llama-3.1-8b-instruct.json"


def test_the_example_request_is_the_one_the_python_client_builds() -> None:
    assert parse_request(REQUEST.read_text()) == request()
    assert json.loads(REQUEST.read_text()) == json.loads(request().model_dump_json())


def test_the_node_example_submits_watches_and_releases(redis_url: str, tmp_path: Path) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the Node example cannot run here")
    client = Client.from_url(redis_url)
    client.heartbeat(hb("gpu-a", gpus=1))
    worker = WorkerProcess(redis_url, tmp_path, "w")
    try:
        out = subprocess.run(
            [node, str(SCRIPT), "--redis-url", redis_url, "--job-id", "node-1", "--request", str(REQUEST), "--release"],
            capture_output=True,
            text=True,
            timeout=90,
        )
    finally:
        worker.stop()
    assert out.returncode == 0, out.stdout + out.stderr
    states = [line.split()[1] for line in out.stdout.splitlines()]
    assert states[0] == "queued" and "placed" in states and states[-1] == "released", out.stdout
    assert client.get("node-1").state.value == "released"
    assert whole_state(client)["held"] == {}
    client.redis.close()
