"""What a person types that is near enough to be meant: a context in thousands (``8k``), a flag a few
letters off (``--ctx``), a Hub page's address for ``--repo``; what cannot be meant is refused in one line
naming the flag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from producer import named
from producer.cli import main
from producer.errors import HubUnavailable

ROOT = Path(__file__).resolve().parents[2]
POOL = str(ROOT / "examples" / "pool.json")
MODELS = ROOT / "examples" / "models"


def listing(model: str) -> list[str]:
    d = MODELS / model
    return ["--files", str(d / "files.json"), "--config", str(d / "config.json")]


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one line ``argv`` is refused with (exit 2, nothing on standard output)."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "usage:" not in err, err
    return err


@pytest.mark.parametrize(("given", "tokens"), [("8k", 8192), ("32K", 32768), ("128k", 131072), ("8192", 8192)])
def test_a_context_in_thousands_of_1024_is_taken_as_tokens(
    given: str, tokens: int, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["plan", "--pool", POOL, *listing("llama-3.1-8b-instruct"), "--json"]
    assert main([*base, "--context", given]) == 0
    got = json.loads(capsys.readouterr().out)
    assert main([*base, "--context", str(tokens)]) == 0
    assert got == json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("given", ["8q", "8.5k", "8kb", "k", "eight", "8 k"])
def test_any_other_context_is_refused_in_one_line_naming_the_flag(
    given: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err = refused(["plan", "--pool", POOL, *listing("llama-3.1-8b-instruct"), "--context", given], capsys)
    assert err.startswith(f"modelplan plan: --context: {given!r} is not a number of tokens"), err
    assert "8k = 8192" in err


@pytest.mark.parametrize(("typed", "meant"), [("--ctx", "--context"), ("--pol", "--pool"), ("--jsn", "--json")])
def test_an_unknown_flag_names_the_closest_flag_of_its_command(
    typed: str, meant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["plan", "--pool", POOL, *listing("llama-3.1-8b-instruct"), typed, "8192"]
    err = refused(argv, capsys)
    assert err == f"modelplan plan: unknown flag {typed}: did you mean {meant}? (modelplan plan --help)\n"
    assert refused([*argv[:-2], f"{typed}=8192"], capsys) == err


def test_an_unknown_flag_like_none_says_where_the_flags_are(capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(["plan", "--pool", POOL, "--zzzzzz"], capsys)
    assert err == "modelplan plan: unknown flag --zzzzzz (modelplan plan --help lists the flags)\n"


@pytest.mark.parametrize(
    ("url", "revision"),
    [
        ("https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct", "main"),
        ("https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct/", "main"),
        ("huggingface.co/meta-llama/Llama-3.1-8B-Instruct", "main"),
        ("https://hf.co/meta-llama/Llama-3.1-8B-Instruct?library=transformers", "main"),
        ("https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct/tree/main", "main"),
        ("https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct/tree/v2/original", "v2"),
        ("https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct/blob/main/config.json", "main"),
        ("https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct/tree/refs%2Fpr%2F3", "refs/pr/3"),
    ],
)
def test_a_hub_pages_address_is_taken_as_its_id(
    url: str, revision: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked: list[tuple[str, str]] = []

    def resolve(repo_id: str, rev: str, **_: object) -> None:
        asked.append((repo_id, rev))
        raise HubUnavailable(repo_id, rev, "offline here")

    monkeypatch.setattr(named, "resolve", resolve)
    assert main(["plan", "--pool", POOL, "--repo", url]) == 2
    assert asked == [("meta-llama/Llama-3.1-8B-Instruct", revision)]
    assert "not a Hub id" not in capsys.readouterr().err


def test_a_hub_address_and_revision_that_disagree_or_name_no_model_are_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = "https://huggingface.co/org/name/tree/v2"
    assert main(["plan", "--pool", POOL, "--repo", url, "--revision", "v3"]) == 2
    assert capsys.readouterr().err == (
        f"modelplan plan: --repo: {url} names revision v2, and --revision v3: give one of them\n"
    )
    for url, what in (
        ("https://huggingface.co/datasets/org/name", "a dataset"),
        ("https://huggingface.co/spaces/org/name", "a Space"),
        ("https://huggingface.co/org", "no repository (org/name)"),
    ):
        assert main(["plan", "--pool", POOL, "--repo", url]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"modelplan plan: --repo: {url} names {what}"), err
