"""What the agent's tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import structlog


@pytest.fixture
def logging_restored() -> Iterator[None]:
    """structlog's configuration as it was before the test (the agent's command configures it)."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)
