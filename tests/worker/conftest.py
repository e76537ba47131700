"""What the worker's tests share: a client on the test session's Redis."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from producer import Client


@pytest.fixture
def client(redis_url: str) -> Iterator[Client]:
    """A client on a Redis emptied for the test (``redis_url``), closed after it."""
    c = Client.from_url(redis_url)
    yield c
    c.redis.close()
