"""Where Redis is, under which prefix, and how the worker logs."""

from __future__ import annotations

import logging
import os
import sys
from typing import TextIO
from urllib.parse import urlsplit, urlunsplit

import redis
import structlog

from worker.constants import DEFAULT_PREFIX, DEFAULT_REDIS_URL

REDIS_URL_ENV = "MODELPLAN_REDIS_URL"
PREFIX_ENV = "MODELPLAN_PREFIX"
SOCKET_TIMEOUT_S = 5.0
"""How long one Redis call may hang before it fails: long past a loopback or LAN round trip."""
HEALTH_CHECK_INTERVAL_S = 30
"""An idle connection is pinged before use after this long, so a dropped one is noticed and remade."""


def redis_url(given: str | None = None) -> str:
    return given or os.environ.get(REDIS_URL_ENV) or DEFAULT_REDIS_URL


def prefix(given: str | None = None) -> str:
    return given or os.environ.get(PREFIX_ENV) or DEFAULT_PREFIX


def redact(url: str) -> str:
    """A Redis URL fit for logs and messages: the password replaced."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, f"{user}:***@{host}", parts.path, parts.query, parts.fragment))


def connect(url: str) -> redis.Redis:
    """A client for ``url`` (``redis://``, ``rediss://`` for TLS, ``unix://``); user and password from the
    URL work with Redis ACLs. Bytes in and out, as RQ needs."""
    return redis.Redis.from_url(
        url,
        socket_timeout=SOCKET_TIMEOUT_S,
        socket_connect_timeout=SOCKET_TIMEOUT_S,
        health_check_interval=HEALTH_CHECK_INTERVAL_S,
        retry_on_timeout=True,
    )


def configure_logging(level: str = "INFO", stream: TextIO | None = None) -> None:
    """JSON lines, one per event with the bound ids, on ``stream`` (standard output by default)."""
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level)),
        logger_factory=structlog.PrintLoggerFactory(stream or sys.stdout),
        cache_logger_on_first_use=False,
    )
