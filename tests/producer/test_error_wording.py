"""Error messages say each thing once, in plain words: the command, the field, what is allowed, what was
given; a command that only reads does not say that nothing was stored."""

from __future__ import annotations

import pytest

from producer.cli import main
from tests.producer.test_cli_first_use import MODELS
from tests.redis_server import free_port

LISTING = MODELS / "llama-3.1-8b-instruct"
SUBMIT = ["submit", "--files", str(LISTING / "files.json"), "--config", str(LISTING / "config.json")]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            [*SUBMIT, "--context", "0"],
            "modelplan submit: request: context: must be a whole number of tokens from 1 to 16777216 (given 0)",
        ),
        ([*SUBMIT, "--priority", "-1"], "modelplan submit: request: priority: must be at least 0 (given -1)"),
        ([*SUBMIT, "--priority", "1001"], "modelplan submit: request: priority: must be at most 1000 (given 1001)"),
        ([*SUBMIT, "--replicas", "0"], "modelplan submit: request: replicas: must be at least 1 (given 0)"),
        (["scale", "job-1", "-1"], "modelplan scale: replicas: must be a whole number from 0 to 256 (given -1)"),
        (
            ["heartbeat", "--node-id", "n", "--gpus", "-1", "--host-mem-gb", "1", "--host-free-gb", "1"],
            "modelplan heartbeat: --gpus: must be at least 0 (given -1)",
        ),
    ],
)
def test_bad_input_is_said_once(args: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # refused before Redis is asked
    assert main([args[0], "--redis-url", url, *args[1:]]) == 2
    assert capsys.readouterr().err == said + "\n"


@pytest.mark.parametrize("args", [["job", "job-1"], ["status"]])
def test_a_read_only_command_does_not_speak_of_storing(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    assert main([args[0], "--redis-url", f"redis://127.0.0.1:{port}/0", *args[1:]]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"modelplan {args[0]}: Redis at redis://127.0.0.1:{port}/0 cannot be reached (")
    assert "stored" not in err and err.count("\n") == 1


def test_a_writing_command_still_says_nothing_was_stored(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["release", "--redis-url", f"redis://127.0.0.1:{free_port()}/0", "job-1"]) == 2
    assert capsys.readouterr().err.endswith("; nothing was stored\n")
