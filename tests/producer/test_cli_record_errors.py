"""A pool or file listing refused for an entry as a whole (a check across its fields, or an entry that is no
object) is said once, with the file and its flag: no ``(record)`` field, no ``(given the record)``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner import InvalidInput, parse_pool
from producer.cli import main

ROOT = Path(__file__).resolve().parents[2]
POOL = str(ROOT / "examples" / "pool.json")
CONFIG = str(ROOT / "examples" / "models" / "llama-3.1-8b-instruct" / "config.json")
FILES = str(ROOT / "examples" / "models" / "llama-3.1-8b-instruct" / "files.json")
GOOD = {"node_id": "n1", "host_mem_gb": 64, "host_free_gb": 64}


def refusal(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize(
    ("node", "said"),
    [
        ({**GOOD, "gpu_class": "h100-80g", "gpus": 1, "free_gpus": 2}, "free_gpus 2 is more than gpus 1"),
        ({**GOOD, "host_free_gb": 640}, "host_free_gb 640 is more than host_mem_gb 64"),
        (1, "must be an object (given 1)"),
    ],
)
def test_a_pool_entry_refused_as_a_whole_is_said_once_with_the_flag(
    tmp_path: Path, node: object, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    pool = tmp_path / "pool.json"
    pool.write_text(json.dumps([{**GOOD, "node_id": "n0"}, node]))
    err = refusal(["plan", "--pool", str(pool), "--files", FILES, "--config", CONFIG], capsys)
    assert err == f"modelplan plan: {pool}[1] (--pool): {said}\n"


def test_a_listing_entry_that_is_no_object_is_said_once_with_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = tmp_path / "files.json"
    files.write_text(json.dumps(["model.safetensors"]))
    err = refusal(["plan", "--pool", POOL, "--files", str(files), "--config", CONFIG], capsys)
    assert err == f"modelplan plan: {files}[0] (--files): must be an object (given 'model.safetensors')\n"


def test_a_check_across_fields_names_the_values_and_not_the_record_again() -> None:
    with pytest.raises(InvalidInput) as e:
        parse_pool(json.dumps([{**GOOD, "host_free_gb": 640}]), "pool.json")
    assert e.value.problem == "host_free_gb 640 is more than host_mem_gb 64"
