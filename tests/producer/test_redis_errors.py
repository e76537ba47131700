"""Whatever Redis answers instead of a result (a script running past its limit, a read-only replica, memory
at maxmemory, a refused login, a lost connection), a command says so in one line that names the command
and what Redis said, with the password masked, and exits 2: never a traceback."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from structlog.testing import capture_logs

from producer import Client
from producer.agent import Agent
from producer.cli import main
from tests.producer.agent.test_agent import IDLE, FakeReader
from tests.producer.test_cli_first_use import MODELS
from tests.redis_server import RedisServer

LISTING = MODELS / "llama-3.1-8b-instruct"
PASSWORD = "s3cret-pw"

ERRORS: list[tuple[redis.RedisError, str]] = [
    (
        redis.exceptions.ResponseError(
            "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."
        ),
        "BUSY Redis is busy running a script.",
    ),
    # redis-py takes the code off the replies it has a class for: the line gives it back
    (redis.exceptions.ReadOnlyError("You can't write against a read only replica."), "READONLY You can't write"),
    (
        redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'."),
        "OOM command not allowed when used memory",
    ),
    (
        redis.exceptions.ResponseError("MISCONF Redis is configured to save RDB snapshots, but it's currently unable"),
        "MISCONF Redis is configured",
    ),
    (redis.exceptions.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"), "WRONGTYPE"),
    (
        redis.exceptions.ResponseError("ERR Error running script: @user_script:12: boom\nand a second line"),
        "ERR Error running script: @user_script:12: boom and a second line",
    ),
    (redis.exceptions.NoPermissionError("this user has no permissions to run the 'hget' command"), "no permissions"),
    (redis.exceptions.BusyLoadingError("Redis is loading the dataset in memory"), "loading the dataset"),
    (redis.exceptions.TimeoutError("Timeout reading from socket"), "Timeout reading from socket"),
    (
        redis.exceptions.AuthenticationError("invalid username-password pair or user is disabled."),
        "invalid username-password pair",
    ),
    (redis.exceptions.InvalidResponse("Protocol Error: b'HTTP/1.1 400'"), "Protocol Error"),
]

COMMANDS = [
    ["submit", "--files", str(LISTING / "files.json"), "--config", str(LISTING / "config.json")],
    ["job", "job-1"],
    ["status"],
    ["release", "job-1"],
    ["cancel", "job-1"],
    ["scale", "job-1", "2"],
    ["heartbeat", "--node-id", "n-1", "--host-mem-gb", "8", "--host-free-gb", "8"],
    ["agent", "--once", "--gpu-class", "", "--node-id", "n-1"],
    ["submit", "--repo", "org/name"],  # the Hub's cache in Redis, read before the Hub is asked
    ["demo"],  # its own reads, outside the client's calls
]


def with_password(url: str) -> str:
    return url.replace("redis://", f"redis://:{PASSWORD}@", 1)


def answering(error: redis.RedisError) -> Any:
    """A stand-in for redis-py's reading of every reply, plain or in a pipeline: ``error`` each time."""

    def parse_response(self: Any, connection: Any, command_name: Any, **options: Any) -> Any:
        raise error

    return parse_response


@pytest.fixture
def plain_server() -> Iterator[RedisServer]:
    """A server of this test's own with a password (``PASSWORD``): what is done to it touches no other test."""
    server = RedisServer("--busy-reply-threshold", "20")
    server.start()
    with redis.Redis(port=server.port) as admin:  # its start waits for a ping without one
        admin.config_set("requirepass", PASSWORD)
    yield server
    server.cleanup()


@pytest.mark.parametrize(("error", "said"), ERRORS, ids=[f"{type(e).__name__}-{i}" for i, (e, _) in enumerate(ERRORS)])
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: "-".join(c[:2]).lstrip("-"))
def test_every_redis_error_is_one_line(
    command: list[str],
    error: redis.RedisError,
    said: str,
    redis_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = with_password(redis_url)  # the server has no password: the replies are all made up here
    with monkeypatch.context() as m:
        m.setattr(redis.Redis, "parse_response", answering(error))
        m.setenv("MODELPLAN_REDIS_URL", url)  # a password in --redis-url is warned of, in a line of its own
        code = main(command)
    err = capsys.readouterr().err
    assert code == 2, err
    # the Hub's cache names the server by host and port alone, the others by the URL with its password masked
    assert err.startswith(f"modelplan {command[0]}: Redis at redis://"), err
    assert redis_url.removeprefix("redis://") in err.split(" ")[4], err
    assert said in err and err.count("\n") == 1 and err.endswith("\n"), err
    assert PASSWORD not in err and "Traceback" not in err
    if command[0] in ("job", "status"):  # they only read: there was nothing to store
        assert "stored" not in err, err


def test_a_real_busy_redis_is_one_line(
    plain_server: RedisServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report this came from: ``submit`` while a script ran past Redis' busy-reply-threshold."""
    url = with_password(plain_server.url)
    monkeypatch.setenv("MODELPLAN_REDIS_URL", url)  # a password in --redis-url is warned of, in a line of its own
    admin = redis.Redis.from_url(url)

    def loop() -> None:
        with contextlib.suppress(redis.ResponseError):  # ended by SCRIPT KILL
            admin.eval("while true do end", 0)

    looping = threading.Thread(target=loop, daemon=True)
    looping.start()
    probe = redis.Redis.from_url(url)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                probe.ping()
            except redis.exceptions.ResponseError as e:
                if str(e).startswith("BUSY"):
                    break
            assert time.monotonic() < deadline, "the script did not make Redis busy"
            time.sleep(0.05)
        args = ["--files", str(LISTING / "files.json"), "--config", str(LISTING / "config.json")]
        assert main(["submit", *args]) == 2
        assert main(["status"]) == 2
    finally:
        probe.script_kill()
        looping.join(timeout=30)
        probe.close()
        admin.close()
    lines = capsys.readouterr().err.splitlines()
    masked = url.replace(PASSWORD, "***")
    assert [line.split(" (")[0] for line in lines] == [
        f"modelplan submit: Redis at {masked} answered with an error",
        f"modelplan status: Redis at {masked} answered with an error",
    ]
    assert all("(BUSY Redis is busy running a script." in line for line in lines), lines


def test_the_agent_says_a_failed_heartbeat_in_one_line_and_goes_on(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    stop = threading.Event()
    busy = redis.exceptions.ResponseError("BUSY Redis is busy running a script.")

    def parse_response(self: Any, connection: Any, command_name: Any, **options: Any) -> Any:
        stop.set()  # one tick meets it; the loop ends after that tick
        raise busy

    client = Client.from_url(redis_url)
    agent = Agent("gpu-1", FakeReader(IDLE), client, boot_id="boot-1")
    monkeypatch.setattr(redis.Redis, "parse_response", parse_response)
    with capture_logs() as logs:
        agent.run(0.001, stop)
    monkeypatch.undo()
    client.redis.close()
    [failed] = [e for e in logs if e["event"] == "heartbeat_failed"]
    assert "exc_info" not in failed, failed
    assert failed["error"].startswith(f"Redis at {redis_url} answered with an error (BUSY Redis is busy"), failed
    assert [e["event"] for e in logs][-1] == "agent_stopped"


@pytest.mark.parametrize("error", [e for e, _ in ERRORS[:3]], ids=lambda e: type(e).__name__)
def test_a_scrape_meeting_a_redis_error_says_redis_is_down(
    error: redis.RedisError, redis_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as m:
        m.setattr(redis.Redis, "parse_response", answering(error))
        assert main(["metrics", "--redis-url", redis_url]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "modelplan_redis_up 0.0"
