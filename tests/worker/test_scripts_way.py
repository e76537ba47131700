"""How modelplan's Lua runs: FCALL of the library where it is loaded (loaded first where the login may),
EVALSHA where ``MODELPLAN_SCRIPTS=eval`` says so, and one line for a login that may do neither."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from planner import InvalidInput
from producer import Client, roles
from producer.cli import main
from producer.operator import setup_redis
from tests.worker.helpers import drain, hb, request
from worker import scripts
from worker.errors import FunctionsMissing
from worker.records import JobState


def libraries(r: redis.Redis) -> list[str]:
    found: Any = r.function_list()
    return sorted(scripts.text(dict(zip(lib[::2], lib[1::2], strict=True))[b"library_name"]) for lib in found)


@pytest.fixture
def no_functions(r: redis.Redis) -> Iterator[redis.Redis]:
    r.function_flush()
    yield r
    r.function_flush()


def test_the_library_is_loaded_where_the_login_may_and_called(no_functions: redis.Redis, redis_url: str) -> None:
    client = Client.from_url(redis_url)
    assert client.heartbeat(hb("gpu-1", gpus=1))
    assert libraries(no_functions) == [scripts.library()[0]]
    job = client.submit(request())
    drain(client)
    assert client.get(job).state is JobState.PLACED
    # a server that lost it (a restart without its files) has it loaded again at the next call
    no_functions.function_flush()
    assert client.heartbeat(hb("gpu-1", gpus=1, seq=2))
    assert libraries(no_functions) == [scripts.library()[0]]


def test_eval_runs_the_scripts_and_loads_no_library(
    no_functions: redis.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(scripts.MODE_ENV, "eval")
    client = Client.from_url(redis_url)
    assert client.heartbeat(hb("gpu-1", gpus=1))
    job = client.submit(request())
    drain(client)
    assert client.get(job).state is JobState.PLACED
    assert libraries(no_functions) == []


def test_a_login_that_may_neither_load_nor_run_scripts_is_told_in_one_line(
    no_functions: redis.Redis, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    no_functions.acl_setuser(
        "fcall-only",
        enabled=True,
        passwords=["+pw"],
        keys=["*"],
        commands=["-@all", *(f"+{c}" for c in (*roles.AGENT_COMMANDS, *roles.SCRIPTING))],
    )
    try:
        url = redis_url.replace("redis://", "redis://fcall-only:pw@")
        with pytest.raises(FunctionsMissing, match="have the operator run 'modelplan setup-redis'"):
            scripts.script(redis.Redis.from_url(url), "heartbeat")(keys=[], args=[])
        assert (
            main(["heartbeat", "--redis-url", url, "--node-id", "n1", "--host-mem-gb", "8", "--host-free-gb", "8"]) == 2
        )
        warning, _, err = capsys.readouterr().err.partition("\n")
        assert "--redis-url holds a password" in warning  # given on the command line here
        assert err.count("\n") == 1 and "modelplan setup-redis" in err, err
        # once the operator loaded it, the same login runs it
        setup_redis(no_functions, Client.from_url(redis_url).keys)
        assert (
            main(["heartbeat", "--redis-url", url, "--node-id", "n1", "--host-mem-gb", "8", "--host-free-gb", "8"]) == 0
        )
    finally:
        no_functions.acl_deluser("fcall-only")


def test_a_mode_that_is_not_one_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(scripts.MODE_ENV, "sometimes")
    with pytest.raises(InvalidInput, match=r"MODELPLAN_SCRIPTS.*must be one of auto, functions, eval"):
        scripts.mode()


def test_setup_redis_moves_an_older_index_and_prunes_older_libraries(no_functions: redis.Redis) -> None:
    keys = Client(no_functions).keys
    no_functions.sadd(f"{keys.prefix}:held:nodes", "gpu-1", "gpu-2")
    no_functions.function_load("#!lua name=modelplan_0123456789ab\nredis.register_function('x', function() end)")
    done = setup_redis(no_functions, keys, prune=True)
    assert done["pruned"] == ["modelplan_0123456789ab"]
    assert libraries(no_functions) == [scripts.library()[0]]
    assert no_functions.exists(f"{keys.prefix}:held:nodes") == 0
    assert no_functions.smembers(keys.held_nodes) == {b"gpu-1", b"gpu-2"}
