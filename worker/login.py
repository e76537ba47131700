"""A Redis login's password kept off command lines, where every user of the host can read it (``ps``).

A component's URL names its user alone (``redis://modelplan.worker@redis:6379/0``) and its password comes
from a file only that user can read, named by ``MODELPLAN_REDIS_PASSWORD_FILE``, as ``*_FILE`` settings
of container images do; or the whole URL, password included, comes from ``MODELPLAN_REDIS_URL``, which
an environment keeps from other users. ``worker.config.redis_url`` puts the file's password into the URL.
"""

from __future__ import annotations

import os
from urllib.parse import quote, unquote

from planner.errors import InvalidInput

PASSWORD_FILE_ENV = "MODELPLAN_REDIS_PASSWORD_FILE"
PASSWORD_MAX_BYTES = 4096
"""Far past any password (``modelplan acl`` makes 32 characters): a longer file is not a password file."""


def read_password(path: str, source: str = PASSWORD_FILE_ENV) -> str:
    """The password in the file at ``path``: its one line, without the line's end. A file that cannot be
    read, is empty, holds more than one line or is too long is ``InvalidInput`` naming ``source`` and the
    path, never what the file holds."""
    try:
        with open(path, "rb") as f:
            data = f.read(PASSWORD_MAX_BYTES + 1)
    except OSError as e:
        raise InvalidInput(source, path, f"cannot be read ({e.strerror or e})") from None
    if len(data) > PASSWORD_MAX_BYTES:
        raise InvalidInput(source, path, f"is longer than {PASSWORD_MAX_BYTES} bytes: not a password file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(source, path, "is not UTF-8 text") from None
    password = text.removesuffix("\n").removesuffix("\r")
    if "\n" in password or "\r" in password:
        raise InvalidInput(source, path, "holds more than one line: give the password alone")
    if not password:
        raise InvalidInput(source, path, "is empty: give the password on its one line")
    return password


def _split(url: str) -> tuple[str, str | None, str] | None:
    """``url`` as what comes before its login, its login (None: none), and what comes after; None where
    the URL has no ``scheme://`` (``connect`` refuses it) or its ``@`` cannot be placed."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return None
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    at = rest.rfind("@", 0, end)
    if at < 0:
        return None if "@" in rest[end:].partition("?")[0] else (scheme + sep, None, rest)
    return scheme + sep, rest[:at], rest[at + 1 :]


def with_password(url: str, password: str) -> str:
    """``url`` logging in with ``password`` (percent-encoded), as the user it names (none: ``default``).
    A URL that holds this password already is left as it is; one that holds another is refused."""
    parts = _split(url)
    if parts is None:
        if "://" not in url:
            return url  # not a URL: connect says so
        raise InvalidInput(PASSWORD_FILE_ENV, "(setting)", "is set, and the Redis URL's login cannot be read")
    lead, login, rest = parts
    user, colon, given = (login or "").partition(":")
    if colon:
        if unquote(given) == password:
            return url
        raise InvalidInput(
            PASSWORD_FILE_ENV,
            "(setting)",
            "names a password and the Redis URL holds another: give the password once, in the file",
        )
    return f"{lead}{user}:{quote(password, safe='')}@{rest}"


def as_user(url: str, user: str) -> str:
    """``url`` with its login replaced by ``user``, no password (nor a ``password`` query argument; a
    sentinel's own login, which every role shares, is kept): the URL to hand a role's processes."""
    parts = _split(url)
    if parts is None:
        raise InvalidInput("Redis URL", "(url)", "its login cannot be told from its host")
    lead, _, rest = parts
    where, mark, query = rest.partition("?")
    kept = [arg for arg in query.split("&") if arg and arg.partition("=")[0].lower() != "password"]
    rest = where + (mark + "&".join(kept) if kept else "")
    return f"{lead}{quote(user, safe='')}@{rest}"


def password_file() -> str | None:
    """The password file ``MODELPLAN_REDIS_PASSWORD_FILE`` names, if set."""
    return os.environ.get(PASSWORD_FILE_ENV) or None
