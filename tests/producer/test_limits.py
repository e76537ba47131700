"""Bounded input on the client side, the prefix's real limit, and a library that prints nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from planner import InvalidInput
from producer.cli import main
from producer.client import request_from_listing
from producer.limits import LIMITS
from tests.worker.helpers import EXAMPLES

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = EXAMPLES / "llama-3.1-8b-instruct"
POOL = [{"node_id": "n1", "gpu_class": "h100-80g", "gpus": 1, "free_gpus": 1, "host_mem_gb": 64, "host_free_gb": 64}]


def plan(tmp_path: Path, files: Path, *extra: str) -> list[str]:
    pool = tmp_path / "pool.json"
    pool.write_text(json.dumps(POOL))
    return ["plan", "--files", str(files), "--config", str(EXAMPLE / "config.json"), "--pool", str(pool), *extra]


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert err.count("\n") == 1, err
    return err


def test_a_listing_past_its_size_is_refused_unread(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big = tmp_path / "files.json"
    with big.open("wb") as f:
        f.truncate(LIMITS["listing_bytes"] + 1)  # sparse: refused on its size alone, never read
    assert main(plan(tmp_path, big)) == 2
    err = one_line(capsys)
    assert "past the limit of 16,777,216" in err and "MODELPLAN_LIMIT_LISTING_BYTES" in err


def test_a_listing_past_its_count_is_refused_and_the_limit_can_be_raised(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    files = json.loads((EXAMPLE / "files.json").read_text())
    listing = tmp_path / "files.json"
    listing.write_text(json.dumps(files))
    monkeypatch.setenv("MODELPLAN_LIMIT_LISTING_ENTRIES", str(len(files) - 1))
    assert main(plan(tmp_path, listing)) == 2
    err = one_line(capsys)
    assert f"lists {len(files)} files, past the limit of {len(files) - 1}" in err
    assert "MODELPLAN_LIMIT_LISTING_ENTRIES" in err
    monkeypatch.setenv("MODELPLAN_LIMIT_LISTING_ENTRIES", str(len(files)))
    assert main(plan(tmp_path, listing)) == 0


def test_the_client_library_bounds_what_it_is_handed() -> None:
    files = [{"path": f"model-{i}.safetensors", "size": 1} for i in range(LIMITS["listing_entries"] + 1)]
    with pytest.raises(InvalidInput, match="MODELPLAN_LIMIT_LISTING_ENTRIES"):
        request_from_listing(files, {}, model="m")
    index = {"weight_map": {f"t{i}": "model.safetensors" for i in range(LIMITS["index_entries"] + 1)}}
    with pytest.raises(InvalidInput, match="MODELPLAN_LIMIT_INDEX_ENTRIES"):
        request_from_listing([], {}, index, model="m")


def test_a_bad_limit_setting_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODELPLAN_LIMIT_LISTING_BYTES", "lots")
    assert main(plan(tmp_path, EXAMPLE / "files.json")) == 2
    assert "MODELPLAN_LIMIT_LISTING_BYTES" in one_line(capsys)


def test_a_folders_config_past_its_size_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "repo"
    folder.mkdir()
    with (folder / "config.json").open("wb") as f:
        f.truncate(LIMITS["config_bytes"] + 1)
    pool = tmp_path / "pool.json"
    pool.write_text(json.dumps(POOL))
    assert main(["plan", "--repo", str(folder), "--pool", str(pool)]) == 2
    assert "MODELPLAN_LIMIT_CONFIG_BYTES" in one_line(capsys)


def test_the_prefix_message_says_the_real_limit(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--prefix", "p" * 65, "--redis-url", "redis://127.0.0.1:1/0"]) == 2
    err = one_line(capsys)
    assert "up to 64" in err and "128" not in err


LIBRARY_USE = """
import sys
from producer import Client
from producer.examples import example_request
from worker import runner
client = Client.from_url(sys.argv[1], prefix=sys.argv[2])
client.heartbeat({"node_id": "n1", "gpu_class": "h100-80g", "gpus": 1, "free_gpus": 1, "host_mem_gb": 64,
                  "host_free_gb": 64, "seq": 1, "boot_id": "b1"})
client.submit(example_request("llama-3.1-8b-instruct", context=8192), job_id="lib-1")
runner.drain(client.store)
client.release("lib-1")
"""


def test_the_client_library_prints_nothing_of_its_own(redis_url: str) -> None:
    """Imported by a service that configures no logging, the client (and a drain in-process) writes nothing
    to standard output or standard error; with the standard library's logging set up, its events go there."""
    quiet = subprocess.run(
        [sys.executable, "-c", LIBRARY_USE, redis_url, "quiet"], cwd=ROOT, capture_output=True, timeout=60
    )
    assert quiet.returncode == 0, quiet.stderr.decode()
    assert (quiet.stdout, quiet.stderr) == (b"", b"")
    logged = "import logging, sys\nlogging.basicConfig(level=logging.INFO, stream=sys.stderr)\n" + LIBRARY_USE
    loud = subprocess.run([sys.executable, "-c", logged, redis_url, "loud"], cwd=ROOT, capture_output=True, timeout=60)
    assert loud.returncode == 0, loud.stderr.decode()
    assert loud.stdout == b""
    assert "INFO:modelplan.worker:event='job_released'" in loud.stderr.decode()
