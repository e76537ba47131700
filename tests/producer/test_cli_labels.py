"""Bad input is said with the names the person typed: a file by the flag it was given with and the path
as given, a heartbeat's fields by their flags."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from producer.cli import main
from tests.producer.test_cli_first_use import MODELS
from tests.redis_server import free_port

LISTING = MODELS / "llama-3.1-8b-instruct"
FIELDS = ("node_id", "gpu_class", "gpu_mem_gb", "free_gpus", "gpus", "host_mem_gb", "host_free_gb", "started")
POOL = Path(__file__).resolve().parents[2] / "examples" / "pool.json"


def said(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.strip()


def write(path: Path, data: object) -> str:
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def test_a_pool_file_is_named_by_its_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    listing = ["--files", str(LISTING / "files.json"), "--config", str(LISTING / "config.json")]
    bad = write(tmp_path / "bad.json", "{bad")
    assert said(["plan", "--pool", bad, *listing], capsys).startswith(f"modelplan plan: {bad}: --pool: not JSON: ")
    flat = write(tmp_path / "flat.json", {"node_id": "n1"})
    assert said(["plan", "--pool", flat, *listing], capsys) == (
        f"modelplan plan: {flat}: --pool: expected a JSON list of nodes, got dict"
    )
    node = write(tmp_path / "nodes.json", [{"node_id": "n1", "gpus": -1, "host_mem_gb": 1, "host_free_gb": 1}])
    assert said(["plan", "--pool", node, *listing], capsys) == (
        f"modelplan plan: {node}[0] (--pool): gpus: must be at least 0 (given -1)"
    )


def test_a_config_is_named_by_its_flag_and_the_path_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = str(LISTING / "files.json")
    # the listing given as the config, as a person might by mistake
    assert said(["plan", "--pool", str(POOL), "--files", files, "--config", files], capsys) == (
        f"modelplan plan: {files}: --config: expected a JSON object, got list"
    )
    config = json.loads((LISTING / "config.json").read_text())
    del config["num_hidden_layers"], config["model_type"]
    cfg = write(tmp_path / "cfg.json", config)
    err = said(["plan", "--pool", str(POOL), "--files", files, "--config", cfg], capsys)
    assert err.startswith(f"modelplan plan: {cfg} (--config): num_hidden_layers: missing"), err


def test_a_listing_is_named_by_its_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = str(LISTING / "config.json")
    flat = write(tmp_path / "listing.json", {"path": "a.safetensors"})
    assert said(["plan", "--pool", str(POOL), "--files", flat, "--config", config], capsys) == (
        f"modelplan plan: {flat}: --files: expected a JSON list of {{path, size}}, got dict"
    )
    entry = write(tmp_path / "entry.json", [{"path": "a.safetensors", "size": -1}])
    assert said(["plan", "--pool", str(POOL), "--files", entry, "--config", config], capsys) == (
        f"modelplan plan: {entry}[0] (--files): size: must be at least 0 (given -1)"
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--gpus", "-1"], "--gpus: must be at least 0 (given -1)"),
        (["--gpus", "2", "--free-gpus", "3"], "--free-gpus 3 is more than --gpus 2"),
        (["--host-free-gb", "99"], "--host-free-gb 99 is more than --host-mem-gb 64"),
        (["--node-id", "a b"], "--node-id: only letters, digits, '.', '_' and '-'"),
        (["--gpu-class", "mystery", "--gpus", "1"], "--gpu-mem-gb is needed: the class label 'mystery'"),
        (["--started", "x y"], "--started: "),
    ],
)
def test_heartbeat_errors_name_the_flags(flags: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["heartbeat", "--redis-url", f"redis://127.0.0.1:{free_port()}/0", "--node-id", "n1"]
    argv += ["--host-mem-gb", "64", "--host-free-gb", "64", *flags]
    err = said(argv, capsys)
    assert err.startswith(f"modelplan heartbeat: {message}"), err
    fields = re.findall(r"(?<![-\w])(" + "|".join(FIELDS) + r")(?![-\w])", err.split("(given")[0])
    assert not fields, f"record field names, not flags: {err}"
