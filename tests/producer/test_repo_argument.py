"""``--repo`` names a local folder or a Hub repository (``org/name``), and a mistyped folder can have the
form of both: when the Hub cannot give it either, the error says that no such folder is here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from producer import named
from producer.cli import main
from producer.errors import HubRepoNotFound, RepoProblem
from tests.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]
POOL = str(ROOT / "examples" / "pool.json")
MISTYPED = "models/tiny-llama-safetensors"  # the shipped one is examples/models/tiny-llama-safetensors


def plan(repo: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["plan", "--pool", POOL, "--repo", repo]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1, err  # one line
    return err


def test_a_mistyped_folder_with_the_hub_unreachable_says_there_is_no_such_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{free_port()}")  # a port that refuses
    monkeypatch.chdir(tmp_path)
    err = plan(MISTYPED, capsys)
    assert err.startswith(
        f"modelplan plan: no local folder {MISTYPED}; as a Hub repository: {MISTYPED}@main: "
        "cannot ask the Hugging Face Hub ("
    ), err


def test_a_mistyped_folder_without_huggingface_hub_says_there_is_no_such_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import huggingface_hub now fails
    monkeypatch.chdir(tmp_path)
    err = plan(MISTYPED, capsys)
    assert err.startswith(f"modelplan plan: no local folder {MISTYPED}; as a Hub repository: {MISTYPED}@main: "), err
    assert "huggingface_hub is not installed" in err


def test_a_file_in_the_form_of_a_hub_id_is_refused_as_a_folder_without_asking_the_hub(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # asking the Hub would say so
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "config.json").write_text("{}")
    err = plan("models/config.json", capsys)
    assert err == "modelplan plan: models/config.json: --repo: not a folder\n"


def test_a_path_that_cannot_be_a_hub_id_says_there_is_no_such_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    for repo in (f"./{MISTYPED}", f"examples/{MISTYPED}", str(tmp_path / MISTYPED)):
        assert plan(repo, capsys) == f"modelplan plan: --repo: no local folder {repo}, and not a Hub id (org/name)\n"


@pytest.mark.parametrize(("problem", "wrapped"), [("missing", True), ("gated", False), ("revision", False)])
def test_only_a_hub_without_the_repository_adds_the_missing_folder(
    problem: RepoProblem, wrapped: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A gated repository, or one without the revision asked for, is there on the Hub: the person meant it."""
    error = HubRepoNotFound(MISTYPED, "main", problem)

    def not_found(*_: object, **__: object) -> None:
        raise error

    monkeypatch.setattr(named, "resolve", not_found)
    err = plan(MISTYPED, capsys)
    folder = f"no local folder {MISTYPED}; as a Hub repository: " if wrapped else ""
    assert err == f"modelplan plan: {folder}{error}\n"
