"""The ``modelplan`` commands that talk to Redis: heartbeat, submit, worker --burst, job, status, release,
cancel."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from producer.cli import main

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "examples" / "models"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "producer.cli", *args], capture_output=True, text=True, cwd=ROOT)


def heartbeat(url: list[str], *, free: int, seq: int) -> list[str]:
    """``modelplan heartbeat`` for a one-card node, gpu-1."""
    return [
        "heartbeat",
        *url,
        "--node-id",
        "gpu-1",
        "--gpu-class",
        "h100-80g",
        "--gpus",
        "1",
        "--free-gpus",
        str(free),
        "--host-mem-gb",
        "256",
        "--host-free-gb",
        "200",
        "--seq",
        str(seq),
    ]


def test_the_whole_flow_from_the_command_line(redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    url = ["--redis-url", redis_url]
    assert main(heartbeat(url, free=0, seq=1)) == 0
    assert capsys.readouterr().out == "stored\n"
    d = MODELS / "llama-3.1-8b-instruct"
    assert (
        main(
            [
                "submit",
                *url,
                "--files",
                str(d / "files.json"),
                "--config",
                str(d / "config.json"),
                "--context",
                "8192",
                "--job-id",
                "job-1",
                "--model",
                "meta-llama/Llama-3.1-8B-Instruct",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out == "job-1\n"
    worker = run("worker", *url, "--burst")
    assert worker.returncode == 0, worker.stderr
    assert any(json.loads(line).get("event") == "job_waiting" for line in worker.stdout.splitlines())
    assert main(["job", *url, "job-1"]) == 0
    out = capsys.readouterr().out
    # the burst worker is gone: nothing wakes the job until a worker runs, which the first line says
    none = "no worker is running: start one with `modelplan worker`"
    assert out.startswith(f"job job-1: waiting (placed 0 of 1); {none}\n")
    assert "best:    original on 1 × h100-80g (vllm)" in out
    assert "replica 0: waiting [resources]" in out
    assert main(heartbeat(url, free=1, seq=2)) == 0
    assert run("worker", *url, "--burst").returncode == 0
    capsys.readouterr()
    assert main(["job", *url, "job-1", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    [replica] = rec["replicas"]
    assert rec["state"] == "placed" and replica["state"] == "placed"
    assert replica["placement"] == [{"node_id": "gpu-1", "hold_id": "job-1:0:3", "gpus": 1, "host_gb": 0.0}]
    assert rec["option"]["gpu_class"] == "h100-80g" and rec["schema_version"] == 1
    assert main(["status", *url]) == 0
    status = capsys.readouterr().out.splitlines()
    assert status[0] == "1 node in the pool"
    # the agent shows the card free (it has not started the job): drawn as reserved, not free
    assert status[1].split() == [
        "gpu-1",
        "1",
        "×",
        "h100-80g",
        "█",
        *["RAM", "200", "of", "256", "GiB", "unused", "at", "the", "last", "heartbeat"],
    ]
    assert status[2] == "█ reserved  ▓ held  ▒ busy  ░ free"
    assert status[3] == none
    assert status[4] == "jobs: 1 placed"
    assert status[5].split()[:3] == ["job-1", "placed", "meta-llama/Llama-3.1-8B-Instruct"]
    assert main(["release", *url, "job-1"]) == 0
    assert capsys.readouterr().out.startswith("job job-1: released")
    assert main(["scale", *url, "job-1", "2"]) == 2
    assert "is released: scale applies only to" in capsys.readouterr().err
    assert main(["release", *url, "job-1"]) == 2
    assert "is released: release applies only to placed or waiting jobs" in capsys.readouterr().err
    assert main(["cancel", *url, "job-2"]) == 2
    assert "job 'job-2': no such job" in capsys.readouterr().err


def test_bad_heartbeat_flags_exit_2(redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            ["heartbeat", "--redis-url", redis_url, "--node-id", "bad id", "--host-mem-gb", "1", "--host-free-gb", "1"]
        )
        == 2
    )
    assert "--node-id: only letters, digits" in capsys.readouterr().err


def test_an_unreachable_redis_is_one_clear_line(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.redis_server import free_port

    url = f"redis://:secret@127.0.0.1:{free_port()}/0"
    d = MODELS / "llama-3.1-8b-instruct"
    assert (
        main(["submit", "--redis-url", url, "--files", str(d / "files.json"), "--config", str(d / "config.json")]) == 2
    )
    err = capsys.readouterr().err
    assert f"Redis at redis://:***@127.0.0.1:{url.rsplit(':', 1)[1].split('/')[0]}/0 cannot be reached" in err
    assert "nothing was stored" in err and "secret" not in err
