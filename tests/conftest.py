"""Shared fixtures: a redis-server of the test session's own, on a free loopback port."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import redis
import structlog

from producer import Client
from tests.redis_server import RedisServer
from tests.schema_check import check_stored_records
from worker import quarantine


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.cleanup()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    """A URL to an empty database, with an empty ACL log (which ``status`` reports, and no flush clears);
    emptied again after the test, once every job and node record in it has been checked against the
    published JSON Schemas."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.acl_log_reset()
    yield redis_server.url
    try:
        check_stored_records(client)  # what the test left matches the published schemas
    finally:
        client.flushall()
        client.acl_log_reset()
        client.close()


@pytest.fixture
def client(redis_url: str) -> Iterator[Client]:
    """A client on a Redis emptied for the test (``redis_url``), closed after it."""
    c = Client.from_url(redis_url)
    yield c
    c.redis.close()


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """Leave structlog and RQ's logger as they were: tests point them at their own captured output (the
    CLI's ``main`` and ``configure_logging`` bind structlog to the standard streams of the moment)."""
    configured = structlog.is_configured()
    config = structlog.get_config()
    rq_logger = logging.getLogger("rq.worker")
    handlers, level = list(rq_logger.handlers), rq_logger.level
    yield
    if configured:
        structlog.configure(**config)
    else:
        structlog.reset_defaults()
    rq_logger.handlers[:] = handlers
    rq_logger.setLevel(level)


@pytest.fixture(autouse=True)
def fresh_quarantine_memory() -> None:
    """Each test's Redis starts empty: what this process remembers having counted of a bad record (by its
    key and bytes, which tests repeat) starts empty too."""
    quarantine.forget()


@pytest.fixture(autouse=True)
def no_redis_server_left_behind() -> Iterator[None]:
    """A test that makes a ``RedisServer`` cleans it up (its process and its folder in the temp folder):
    one it leaves is cleaned up here, and the test fails."""
    before = set(RedisServer.live)
    yield
    left = RedisServer.live - before
    for server in left:
        server.cleanup()
    assert not left, f"the test left {len(left)} redis-server folder(s) behind: {sorted(str(s.dir) for s in left)}"
