"""What a person meets first at the command line: the README's commands run from inside an example's
folder, flags given in pairs that cannot go together, output piped into ``head``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from producer.cli import main

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "examples" / "models"


def test_submit_from_inside_the_example_names_the_model_after_its_folder(
    redis_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(MODELS / "llama-3.1-8b-instruct")
    for job, files in (("j", "files.json"), ("k", "./files.json")):
        args = ["submit", "--redis-url", redis_url, "--files", files, "--config", "config.json", "--job-id", job]
        assert main(args) == 0, capsys.readouterr().err
        assert capsys.readouterr().out == f"{job}\n"
        assert main(["job", "--redis-url", redis_url, job, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["request"]["model"] == "llama-3.1-8b-instruct"


def test_submit_from_a_local_folder_named_dot_uses_the_folders_name(
    redis_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(MODELS / "tiny-llama-safetensors")
    assert main(["submit", "--redis-url", redis_url, "--repo", ".", "--job-id", "j"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert main(["job", "--redis-url", redis_url, "j", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["request"]["model"] == "tiny-llama-safetensors"


@pytest.mark.parametrize("command", ["plan", "submit"])
def test_repo_with_files_is_refused(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    d = MODELS / "llama-3.1-8b-instruct"
    given = ["--repo", str(MODELS / "tiny-llama-safetensors"), "--files", str(d / "files.json")]
    extra = ["--pool", str(ROOT / "examples" / "pool.json")] if command == "plan" else ["--redis-url", "redis://x:1/0"]
    assert main([command, *extra, *given, "--config", str(d / "config.json")]) == 2
    assert capsys.readouterr().err == (
        f"modelplan {command}: arguments: --repo: give either --repo or --files with --config, not both\n"
    )


def test_output_into_a_closed_pipe_ends_quietly() -> None:
    d = MODELS / "llama-3.1-70b-instruct"
    args = ["plan", "--pool", str(ROOT / "examples" / "pool.json"), "--files", str(d / "files.json")]
    args += ["--config", str(d / "config.json"), "--json"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "producer.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # as `| head` does once it has its lines: the rest meets a closed pipe
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=60) == 1
    assert err == ""


def test_repo_on_a_listing_folder_says_how_to_give_it(capsys: pytest.CaptureFixture[str]) -> None:
    d = MODELS / "llama-3.1-8b-instruct"
    assert main(["plan", "--pool", str(ROOT / "examples" / "pool.json"), "--repo", str(d)]) == 2
    err = capsys.readouterr().err
    assert f"holds a file listing, not weights: give --files {d / 'files.json'} --config {d / 'config.json'}" in err


def test_the_shipped_local_folder_plans_with_repo(capsys: pytest.CaptureFixture[str]) -> None:
    d = MODELS / "tiny-llama-safetensors"
    assert main(["plan", "--pool", str(ROOT / "examples" / "pool.json"), "--repo", str(d), "--json"]) == 0
    best = json.loads(capsys.readouterr().out)[0]
    assert (best["artifact"], best["format"], best["engine"], best["gpus_per_node"]) == (
        "original",
        "safetensors",
        "vllm",
        1,
    )
    assert 16 <= best["bits_per_weight"] < 16.2  # the parameter count came from the real header


@pytest.mark.parametrize(("flag", "hint"), [("env", "unset MODELPLAN_REDIS_URL"), ("flag", "leave out --redis-url")])
def test_the_demo_on_an_unreachable_redis_says_how_to_run_without_it(flag: str, hint: str) -> None:
    from tests.redis_server import free_port

    url = f"redis://127.0.0.1:{free_port()}/0"
    env = {"PATH": "/usr/bin:/bin"} | ({"MODELPLAN_REDIS_URL": url} if flag == "env" else {})
    args = ["demo"] + (["--redis-url", url] if flag == "flag" else [])
    out = subprocess.run(
        [sys.executable, "-m", "producer.cli", *args], capture_output=True, text=True, cwd=ROOT, env=env
    )
    assert out.returncode == 2
    source = "MODELPLAN_REDIS_URL" if flag == "env" else "--redis-url"
    assert out.stderr.startswith(f"modelplan demo: Redis at {url} (from {source}) cannot be reached (")
    assert out.stderr.endswith(f"; {hint} to run on an embedded Redis\n") and out.stderr.count("\n") == 1
