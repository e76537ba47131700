"""``--artifact``: an artifact by its name, or by the quantisation in it (``Q4_K_M``) where that names one
artifact of the repository; a quantisation that names several, or none, is refused in one line naming the
candidates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from producer.cli import main

ROOT = Path(__file__).resolve().parents[2]
POOL = str(ROOT / "examples" / "pool.json")
GGUF = ROOT / "examples" / "models" / "llama-3-8b-gguf"
REPO = ["--files", str(GGUF / "files.json"), "--config", str(GGUF / "config.json")]
Q4 = "Meta-Llama-3-8B-Instruct-Q4_K_M.gguf"
BF16 = "Meta-Llama-3-8B-Instruct-BF16.gguf"


@pytest.mark.parametrize("given", ["Q4_K_M", "q4_k_m", Q4])
def test_submit_takes_a_quantisation_that_names_one_artifact(
    given: str, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["submit", "--redis-url", redis_url, *REPO, "--artifact", given, "--job-id", "j"]) == 0
    capsys.readouterr()
    assert main(["job", "--redis-url", redis_url, "j", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["request"]["artifact"] == Q4


def test_plan_takes_it_too_and_plans_that_artifact_alone(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--pool", POOL, *REPO, "--artifact", "Q4_K_M", "--json"]) == 0
    assert {o["artifact"] for o in json.loads(capsys.readouterr().out)} == {Q4}


def test_a_quantisation_naming_none_is_refused_naming_the_candidates(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["submit", "--redis-url", redis_url, *REPO, "--artifact", "Q5_K_M"]) == 2
    assert capsys.readouterr().err == (
        f"modelplan submit: --artifact: Q5_K_M names no artifact of the repository: {BF16} (BF16), {Q4} (Q4_K_M)\n"
    )


def test_a_quantisation_naming_several_is_refused_naming_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = [{"path": f"{who}-Q4_K_M.gguf", "size": 4 << 30} for who in ("a", "b")]
    (tmp_path / "files.json").write_text(json.dumps([*files, {"path": "c-Q8_0.gguf", "size": 8 << 30}]))
    repo = ["--files", str(tmp_path / "files.json"), "--config", str(GGUF / "config.json")]
    assert main(["plan", "--pool", POOL, *repo, "--artifact", "Q4_K_M"]) == 2
    assert capsys.readouterr().err == (
        "modelplan plan: --artifact: Q4_K_M names 2 artifacts of the repository: a-Q4_K_M.gguf, b-Q4_K_M.gguf; "
        "give one by name\n"
    )
