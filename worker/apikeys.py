"""Each job's engine API key: what its engines want (``--api-key``, vLLM's and llama-server's own flag) of
every caller, so that an engine reached from other hosts (``modelplan agent --advertise``) is not open to
anyone who reaches it.

A job's key is made from the deployment's secret (``secret``, made once by the first worker that needs it:
``SET NX``, then read back, so that every worker makes the same keys) and the job's id, an HMAC: a worker
makes it again whenever it needs it, and no store of keys has to be kept or cleaned. The job record, which
every client reads, never holds it. It goes

- into each of the job's holds in ``held:{node}`` (``HoldSpec.api_key``), which only that node's agent and
  the workers read: the agent starts the hold's engine with it;
- to the job's owner, at ``client:{owner}:key:{job_id}``, which no other client's rule reaches, for a job
  submitted on the owner's own request stream; a caller with the workers' rights (the Python client on
  the default user) makes it itself (``Client.api_key``).

Releasing a job stops its engines, so its key then opens nothing; the owner's copy is left to expire
(``ENGINE_KEY_TTL_S``)."""

from __future__ import annotations

import hashlib
import hmac
import secrets as random
import time
from collections.abc import Sequence
from dataclasses import replace

import redis

from worker.keys import Keys
from worker.pool import HoldSpec
from worker.scripts import text

SECRET_BYTES = 32
"""The deployment secret's length: 256 bits, as an HMAC-SHA256 key wants."""

KEY_CHARS = 40
"""A job's key as hex: 160 bits, past guessing, short enough for a command line and a header."""

ENGINE_KEY_TTL_S = 30 * 24 * 3600
"""How long the owner's copy of a job's key is kept: past any job's life that matters; a released job's
engines are stopped, so its key opens nothing."""

SECRET_REREAD_S = 10.0
"""How long a process keeps the secret it read before it reads it again: a commit of a placement needs it,
and one read a few seconds is nothing beside them."""

_secrets: dict[tuple[int, str], tuple[float, bytes]] = {}


def secret(r: redis.Redis, keys: Keys) -> bytes:
    """The deployment's secret: made once (``SET NX``), then read back, so that every worker has the same;
    kept by this process for ``SECRET_REREAD_S`` once read."""
    at = (id(r.connection_pool), keys.secret)
    cached = _secrets.get(at)
    if cached is not None and time.monotonic() - cached[0] < SECRET_REREAD_S:
        return cached[1]
    r.set(keys.secret, random.token_hex(SECRET_BYTES), nx=True)
    found = text(r.get(keys.secret) or b"").encode()
    _secrets[at] = (time.monotonic(), found)
    return found


def job_key(secret_bytes: bytes, job_id: str) -> str:
    """The API key of ``job_id``'s engines."""
    return hmac.new(secret_bytes, job_id.encode(), hashlib.sha256).hexdigest()[:KEY_CHARS]


def forget() -> None:
    """Drop the secrets this process read (tests that empty the server)."""
    _secrets.clear()


def keyed(r: redis.Redis, keys: Keys, job_id: str, place: Sequence[HoldSpec]) -> tuple[HoldSpec, ...]:
    """``place`` with the job's engine API key in each hold an engine runs on (not in a nomination)."""
    if not any(not h.nominated for h in place):
        return tuple(place)
    key = job_key(secret(r, keys), job_id)
    return tuple(h if h.nominated else replace(h, api_key=key) for h in place)
