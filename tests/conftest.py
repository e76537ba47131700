"""Shared fixtures: a redis-server of the test session's own, on a free loopback port."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.redis_server import RedisServer


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.cleanup()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    """A URL to an empty database; emptied again after the test."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    yield redis_server.url
    client.flushall()
    client.close()


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()
