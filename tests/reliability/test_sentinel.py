"""Redis Sentinel: ``redis+sentinel://`` URLs, read by ``worker.config.connect``, and the whole flow run
through a real sentinel to the master it names."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from redis.sentinel import SentinelConnectionPool

from planner import InvalidInput
from producer import Client
from tests.reliability.sec_servers import dump, foreign_keys, place_one, sentinel_pair
from worker import runner
from worker.config import HEALTH_CHECK_INTERVAL_S, SOCKET_TIMEOUT_S, connect, redact
from worker.errors import RedisUnavailable
from worker.records import JobState

PASSWORD = "s3nt1nel-Pa55-Zq9"


def _pool(client: redis.Redis) -> SentinelConnectionPool:
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    return pool


def test_a_sentinel_url_is_read_into_sentinels_service_and_master_login() -> None:
    """Hosts (default port 26379, ``[v6]:port``), the service, the db, the master's login; the sentinels'
    own login from the query; the same timeouts on master and sentinel connections. Nothing is sent."""
    url = "redis+sentinel://mp:p%40ss@s1.example:26380,[::1]:26381,s3.example/mymaster/3?sentinel_password=sp"
    client = connect(url)
    pool = _pool(client)
    assert pool.service_name == "mymaster"
    kw: dict[str, Any] = pool.connection_kwargs
    assert (kw["db"], kw["username"], kw["password"]) == (3, "mp", "p@ss")
    assert (kw["socket_timeout"], kw["socket_connect_timeout"]) == (SOCKET_TIMEOUT_S, SOCKET_TIMEOUT_S)
    assert kw["health_check_interval"] == HEALTH_CHECK_INTERVAL_S and kw["retry_on_timeout"] is True
    sentinels = pool.sentinel_manager.sentinels
    hosts = [
        (s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs["port"]) for s in sentinels
    ]
    assert hosts == [("s1.example", 26380), ("::1", 26381), ("s3.example", 26379)]
    for s in sentinels:
        skw = s.connection_pool.connection_kwargs
        assert skw["password"] == "sp" and skw.get("username") is None and skw["socket_timeout"] == SOCKET_TIMEOUT_S
    assert redact(url) == (
        "redis+sentinel://mp:***@s1.example:26380,[::1]:26381,s3.example/mymaster/3?sentinel_password=***"
    )


def test_a_sentinel_url_without_a_login_sends_none() -> None:
    kw = _pool(connect("redis+sentinel://127.0.0.1:26379/mymaster")).connection_kwargs
    assert kw.get("username") is None and kw.get("password") is None and kw["db"] == 0


@pytest.mark.parametrize(
    "url",
    [
        f"redis+sentinel://u:{PASSWORD}@127.0.0.1:26379",
        f"redis+sentinel://u:{PASSWORD}@127.0.0.1:26379/",
        f"redis+sentinel://u:{PASSWORD}@127.0.0.1:26379/my:master",
        f"redis+sentinel://u:{PASSWORD}@127.0.0.1:26379/mymaster/zero",
        f"redis+sentinel://u:{PASSWORD}@127.0.0.1:0/mymaster",
        f"redis+sentinel://u:{PASSWORD}@127.0.0.1:99999/mymaster",
        f"redis+sentinel://u:{PASSWORD}@,127.0.0.1/mymaster",
        f"redis+sentinel://u:{PASSWORD}@127.0.0.1/mymaster?ssl=true",
        f"redis+sentinel://u:{PASSWORD}@127.0.0.1/mymaster?nonsense",
    ],
)
def test_a_sentinel_url_that_cannot_work_is_refused(url: str) -> None:
    with pytest.raises(InvalidInput) as e:
        connect(url)
    assert PASSWORD not in str(e.value) and "u:***@" in str(e.value)


def test_the_flow_runs_through_a_real_sentinel() -> None:
    """A master with a password and a sentinel that monitors it: through the sentinel URL, submit, drain,
    placed, and a worker run; the keys are on the master. A wrong password is ``RedisUnavailable`` and does
    not show the password."""
    with sentinel_pair(PASSWORD) as (master_port, sentinel_port):
        url = f"redis+sentinel://:{PASSWORD}@127.0.0.1:{sentinel_port}/mymaster/0"
        client = Client.from_url(url)
        place_one(client)
        runner.run(url, "modelplan", burst=True)
        assert client.get("sec-1").state is JobState.PLACED
        master = redis.Redis(port=master_port, password=PASSWORD)
        assert "modelplan:job:sec-1" in dump(master) and foreign_keys(master) == []
        master.close()

        wrong = Client.from_url(url.replace(PASSWORD, "wrong-Zq1"))
        with pytest.raises(RedisUnavailable) as e:
            wrong.get("sec-1")
        assert "wrong-Zq1" not in str(e.value) and ":***@127.0.0.1" in str(e.value)
