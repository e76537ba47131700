"""Where Redis is, under which prefix, and how the worker logs.

The Redis URL (``--redis-url``, else ``MODELPLAN_REDIS_URL``, else ``redis://127.0.0.1:6379/0``) takes one
of these forms:

=================================================================  ============================================
URL                                                                what
=================================================================  ============================================
``redis://[user:password@]host[:port][/db]``                       plain TCP; ``user:password`` logs in as a
                                                                   Redis ACL user, ``:password`` as ``default``
``rediss://[user:password@]host[:port][/db][?ssl_...]``            TLS (see below)
``unix://[user:password@]/path/to/redis.sock[?db=N]``              a local socket
``redis+sentinel://[user:password@]host:port[,host:port...]``      Redis Sentinel: ask the sentinels at the
``/service_name[/db][?sentinel_password=...]``                     hosts (port 26379 by default) where the
                                                                   master of ``service_name`` is, and follow it
                                                                   when it fails over
=================================================================  ============================================

TLS options are redis-py's query arguments on a ``rediss://`` URL: ``ssl_ca_certs`` (the CA bundle the
server's certificate must chain to; the system's when absent), ``ssl_cert_reqs`` (``required``, the default,
or ``none`` to skip checking, for tests only), ``ssl_certfile`` and ``ssl_keyfile`` (a client certificate,
for a server with ``tls-auth-clients yes``) and ``ssl_check_hostname``. For example
``rediss://modelplan:PASSWORD@redis.internal:6380/0?ssl_ca_certs=/etc/modelplan/ca.pem``.

With Sentinel, ``user:password`` is for the master (and its replicas); sentinels that want a login of their
own take ``sentinel_username`` and ``sentinel_password`` query arguments. Every connection, to a master or a
sentinel, has the same timeouts (``SOCKET_TIMEOUT_S``, ``HEALTH_CHECK_INTERVAL_S``).

A password is best kept off the URL a command line gives, where every user of the host can read it
(``ps``): ``MODELPLAN_REDIS_PASSWORD_FILE`` names a file holding the password alone, which ``redis_url``
puts into the URL's login (``redis://modelplan.worker@redis:6379/0`` logs in as ``modelplan.worker``);
or the whole URL comes from ``MODELPLAN_REDIS_URL``.

A URL ``connect`` cannot use is refused with ``InvalidInput`` before anything is sent; ``redact`` masks the
password (in the user part and in any ``*password=`` query argument) wherever a URL is shown, even in a URL
too malformed to parse.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import sys
from pathlib import Path
from typing import Any, TextIO, cast
from urllib.parse import parse_qs, unquote, urlsplit

import redis
import redis.sentinel
import structlog

from planner.errors import InvalidInput
from planner.estimate import DEFAULT_ESTIMATE, ESTIMATES, Estimate
from planner.settings import NO_SETTINGS, Settings, parse_settings
from worker import login
from worker.constants import DEFAULT_CLIENT_REPLICAS, DEFAULT_MAX_REPLICAS, DEFAULT_PREFIX, DEFAULT_REDIS_URL
from worker.login import PASSWORD_FILE_ENV

REDIS_URL_ENV = "MODELPLAN_REDIS_URL"
PREFIX_ENV = "MODELPLAN_PREFIX"
SOCKET_TIMEOUT_S = 5.0
"""How long one Redis call may hang before it fails: long past a loopback or LAN round trip."""
HEALTH_CHECK_INTERVAL_S = 30
"""An idle connection is pinged before use after this long, so a dropped one is noticed and remade."""
SENTINEL_SCHEME = "redis+sentinel"
SENTINEL_PORT = 26379
"""Sentinel's own default port, for a sentinel host given without one."""
SENTINEL_QUERY = ("sentinel_username", "sentinel_password")
"""The query arguments a Sentinel URL takes: the sentinels' own login."""
TLS_FILES = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
"""TLS query arguments that name files: checked to exist, so a typo is refused here, not at the first call."""
URL_FORMS = "redis://, rediss:// (TLS), unix:// or redis+sentinel://"

_SERVICE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_SECRET_QUERY = re.compile(r"([?&][^=&#]*password=)[^&#]*", re.IGNORECASE)
_KWARG = re.compile(r"argument '(\w+)'")


def redis_url(given: str | None = None) -> str:
    """``given``, else ``MODELPLAN_REDIS_URL``, else the local default; logging in with the password in
    the file ``MODELPLAN_REDIS_PASSWORD_FILE`` names, where it is set (``worker.login``)."""
    url = given or os.environ.get(REDIS_URL_ENV) or DEFAULT_REDIS_URL
    path = login.password_file()
    return login.with_password(url, login.read_password(path)) if path else url


def holds_password(url: str) -> bool:
    """Whether ``url`` holds a password, in its login or a ``*password=`` query argument."""
    return redact(url) != url


def password_warning(url: str | None, flag: str = "--redis-url") -> str:
    """What to say of ``url`` given as ``flag`` on a command line, where every user of the host can read
    it (``ps``): nothing unless it holds a password."""
    if not url or not holds_password(url):
        return ""
    try:
        connect(url).close()  # builds the client alone: nothing is sent
    except InvalidInput:
        return ""  # a URL that cannot work is refused in one line, which is enough to say
    return (
        f"warning: {flag} holds a password, which every user of this host can read while the command runs; "
        f"put it in a file named by {PASSWORD_FILE_ENV} (or the whole URL in {REDIS_URL_ENV}) instead"
    )


def prefix(given: str | None = None) -> str:
    return given or os.environ.get(PREFIX_ENV) or DEFAULT_PREFIX


CLIENT_ID_ENV = "MODELPLAN_CLIENT_ID"


def client_id(given: str | None = None) -> str | None:
    """The registered client a command acts as (``--client-id``, else ``MODELPLAN_CLIENT_ID``); None: it
    writes directly, as a trusted service or the operator."""
    return given or os.environ.get(CLIENT_ID_ENV) or None


WAIT_REPLICAS_ENV = "MODELPLAN_WAIT_REPLICAS"
WAIT_TIMEOUT_ENV = "MODELPLAN_WAIT_TIMEOUT_MS"
DEFAULT_WAIT_TIMEOUT_MS = 1000
"""How long a submit (release, cancel, scale) waits for its replicas by default: far past a LAN's
replication lag, short of a caller's patience."""


def _whole(env: str, default: int, given: int | None) -> int:
    if given is not None:
        value: object = given
    else:
        raw = os.environ.get(env, "")
        if not raw:
            return default
        value = int(raw) if raw.isdigit() else raw
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(env, "(setting)", f"must be a whole number from 0 (given {str(value)[:40]!r})")
    return value


def wait_replicas(given: int | None = None) -> int:
    """How many replicas must have a client's write before it returns (``WAIT``): 0, the default, waits for
    none."""
    return _whole(WAIT_REPLICAS_ENV, 0, given)


def wait_timeout_ms(given: int | None = None) -> int:
    return _whole(WAIT_TIMEOUT_ENV, DEFAULT_WAIT_TIMEOUT_MS, given)


MAX_REPLICAS_ENV = "MODELPLAN_MAX_REPLICAS"
CLIENT_REPLICAS_ENV = "MODELPLAN_CLIENT_REPLICAS"


def max_replicas(given: int | None = None) -> int:
    """The most replicas a job submitted or scaled through a request stream may have: a worker's setting,
    ``DEFAULT_MAX_REPLICAS`` unless set."""
    return _at_least_one(MAX_REPLICAS_ENV, _whole(MAX_REPLICAS_ENV, DEFAULT_MAX_REPLICAS, given))


def client_replicas(given: int | None = None) -> int:
    """The most replicas one client's live jobs may want together: a worker's setting,
    ``DEFAULT_CLIENT_REPLICAS`` unless set."""
    return _at_least_one(CLIENT_REPLICAS_ENV, _whole(CLIENT_REPLICAS_ENV, DEFAULT_CLIENT_REPLICAS, given))


def _at_least_one(env: str, value: int) -> int:
    if value < 1:  # 0 would refuse every submit: a typo, not a policy
        raise InvalidInput(env, "(setting)", f"must be a whole number from 1 (given {value})")
    return value


ESTIMATE_ENV = "MODELPLAN_ESTIMATE"


def estimate(given: str | None = None) -> Estimate:
    """How a request that names no estimate has each card's need counted: ``given``, else
    ``$MODELPLAN_ESTIMATE``, else ``measured``."""
    value = given or os.environ.get(ESTIMATE_ENV) or DEFAULT_ESTIMATE
    for known in ESTIMATES:
        if value == known:
            return known
    allowed = ", ".join(ESTIMATES)
    raise InvalidInput(ESTIMATE_ENV, "(setting)", f"must be one of {allowed} (given {value[:40]!r})")


SETTINGS_ENV = "MODELPLAN_SETTINGS"


def settings(given: str | None = None) -> Settings:
    """The engines' settings a deployment plans with where a request leaves one out: ``given``, else
    ``$MODELPLAN_SETTINGS``, as JSON (``{"vllm": {"max_num_seqs": 256}, "llamacpp": {"parallel": 1}}``);
    none: each engine's defaults for the card."""
    return _settings(given if given is not None else os.environ.get(SETTINGS_ENV, ""))


@functools.lru_cache(maxsize=8)  # read on every plan: parsed once per text
def _settings(text: str) -> Settings:
    if not text.strip():
        return NO_SETTINGS
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise InvalidInput(SETTINGS_ENV, "(setting)", f"not JSON: {e}") from e
    return parse_settings(data, SETTINGS_ENV)


def redact(url: str) -> str:
    """A Redis URL fit for logs and messages: the password replaced by ``***``.

    Works on the text, not on a parse, so that it never fails and masks a password even where it holds
    ``/``, ``?``, ``#`` or ``@`` unencoded (a URL a parser splits in the wrong place): everything up to the
    last ``@`` is the login, and a ``:`` before it means a password.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:  # no scheme (a common slip: user:password@host:port): the same rules, the same masking
        scheme, rest = "", url
    lead = scheme + sep
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    at = rest.rfind("@")
    if at < 0 or ":" not in rest[:at]:
        return lead + _mask_query(rest)  # no user:password part
    if at < end:
        user = rest[:at].partition(":")[0]
        return f"{lead}{user}:***@{_mask_query(rest[at + 1 :])}"
    # the last @ comes after a / ? or #: a password holding one unencoded, which parsers split in the wrong
    # place, or a query value holding an @; which, cannot be told, so all before it is masked, user and host
    return f"{lead}***@{_mask_query(rest[at + 1 :])}"


def _mask_query(text: str) -> str:
    return _SECRET_QUERY.sub(r"\1***", text)


def _refuse(url: str, problem: str) -> InvalidInput:
    return InvalidInput("Redis URL", redact(url), f"{problem} (the forms are {URL_FORMS})")


def connect(url: str) -> redis.Redis:
    """A client for ``url`` (the forms above). Bytes in and out, as RQ needs. Nothing is sent until the
    first call; a URL that cannot work (an unknown scheme, a bad port, an unknown query argument, a TLS
    file that does not exist) is ``InvalidInput``, whose message shows the URL redacted."""
    if not isinstance(url, str):
        raise InvalidInput("Redis URL", "(url)", f"expected text, got {type(url).__name__}")
    scheme = url.partition("://")[0].lower()
    if scheme == SENTINEL_SCHEME:
        return _connect_sentinel(url)
    if scheme not in ("redis", "rediss", "unix") or "://" not in url:
        raise _refuse(url, "an unknown scheme")
    try:
        client = redis.Redis.from_url(url, **_timeouts())
    except (ValueError, TypeError):
        # the parser's own words may quote part of a password it took for a port: neither shown nor chained
        raise _refuse(url, "not a URL redis-py can read (a port from 0 to 65535, a whole-number db)") from None
    db = urlsplit(url).path.strip("/")
    if scheme != "unix" and db and not db.isdigit():  # redis-py would quietly take db 0
        raise _refuse(url, "the db after the host is a whole number")
    pool = client.connection_pool
    _check_options(url, pool.connection_class, pool.connection_kwargs)
    return client


def _timeouts(*, retry: bool = True) -> dict[str, Any]:
    """The timeouts of every connection. ``retry``: say ``retry_on_timeout``, which redis-py takes from a
    pool's connection arguments but warns of, as deprecated, when given to ``Redis()`` (as a sentinel's are)."""
    out: dict[str, Any] = {
        "socket_timeout": SOCKET_TIMEOUT_S,
        "socket_connect_timeout": SOCKET_TIMEOUT_S,
        "health_check_interval": HEALTH_CHECK_INTERVAL_S,
    }
    if retry:
        out["retry_on_timeout"] = True
    return out


def _check_options(url: str, connection_class: Any, kwargs: dict[str, Any]) -> None:
    """Build one connection object (it connects lazily, so nothing is sent) to have redis-py check the
    query arguments now, and check that the TLS files named exist."""
    try:
        connection_class(**kwargs)
    except TypeError as e:
        m = _KWARG.search(str(e))
        raise _refuse(url, f"an unknown query argument {m[1] if m else ''}".rstrip()) from e
    except (ValueError, redis.RedisError) as e:
        raise _refuse(url, "a query argument with a value redis-py does not take") from e
    for name in TLS_FILES:
        path = kwargs.get(name)
        if path is not None and not Path(path).is_file():
            raise _refuse(url, f"{name} names {path!r}, which is not a file")


def _connect_sentinel(url: str) -> redis.Redis:
    """``redis+sentinel://[user:password@]host:port[,host:port...]/service_name[/db][?query]``."""
    rest = url.partition("://")[2]
    rest, _, query = rest.partition("?")
    login, at, where = rest.rpartition("@")
    hosts_text, _, path = where.partition("/")
    service, _, db_text = path.partition("/")
    if not _SERVICE.fullmatch(service):
        raise _refuse(url, "a Sentinel URL needs the service name after the hosts: /service_name[/db]")
    if db_text.strip("/") and not db_text.strip("/").isdigit():
        raise _refuse(url, "the db after the service name is a whole number")
    db = int(db_text.strip("/") or 0)
    hosts = [_sentinel_host(url, h) for h in hosts_text.split(",")]
    try:
        params = parse_qs(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError as e:
        raise _refuse(url, "a query that is not name=value pairs") from e
    unknown = sorted(set(params) - set(SENTINEL_QUERY))
    if unknown:
        raise _refuse(url, f"an unknown query argument {unknown[0]} (a Sentinel URL takes {', '.join(SENTINEL_QUERY)})")
    user, colon, password = login.partition(":") if at else ("", "", "")
    creds = {"username": unquote(user) or None, "password": unquote(password) if colon else None}
    sentinel_creds = {
        "username": params.get("sentinel_username", [None])[0],
        "password": params.get("sentinel_password", [None])[0],
    }
    # redis-py's annotations of Sentinel differ from release to release (untyped before 8.2, then typed
    # keyword by keyword): the arguments are checked here, the call is made untyped so both releases pass
    make_sentinel: Any = redis.sentinel.Sentinel
    kwargs: dict[str, Any] = {**_timeouts(), **{k: v for k, v in creds.items() if v}}
    sentinel = make_sentinel(
        hosts,
        sentinel_kwargs={**_timeouts(retry=False), **{k: v for k, v in sentinel_creds.items() if v}},
        db=db,
        **kwargs,
    )
    return cast(redis.Redis, sentinel.master_for(service, redis_class=redis.Redis))


def _sentinel_host(url: str, text: str) -> tuple[str, int]:
    if text.startswith("["):  # [v6 address]:port
        host, _, port_text = text[1:].partition("]")
        port_text = port_text.removeprefix(":")
    else:
        host, _, port_text = text.partition(":")
    if not host or (port_text and not (port_text.isdigit() and 0 < int(port_text) < 65536)):
        raise _refuse(url, "each sentinel is host:port, port from 1 to 65535, the hosts separated by commas")
    return host, int(port_text) if port_text else SENTINEL_PORT


def configure_logging(level: str = "INFO", stream: TextIO | None = None) -> None:
    """JSON lines, one per event with the bound ids, on ``stream`` (standard output by default)."""
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            # text as written ("1 × h100-80g"), not escaped to ASCII
            structlog.processors.JSONRenderer(ensure_ascii=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level)),
        logger_factory=structlog.PrintLoggerFactory(stream or sys.stdout),
        cache_logger_on_first_use=False,
    )
