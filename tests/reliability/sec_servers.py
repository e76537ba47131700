"""Throwaway Redis servers for the security tests: one with ACL users, one on TLS only, a master with a
sentinel; each in its own folder on free loopback ports, stopped (and the folder removed) on exit. Also the
whole-state reader and the one flow the tests run through each of them."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

from producer import Client, roles
from producer.operator import setup_redis
from tests.redis_server import free_port
from tests.worker.helpers import hb, request
from worker import runner
from worker.keys import Keys
from worker.records import JobRecord, JobState
from worker.scripts import text

ADMIN_PASSWORD = "admin-Zx9-only-for-tests"
"""The test's own admin user, for reading ACL LOG and the whole state beside the user under test."""


def _body(rule: str) -> str:
    """A rule line without its ``user NAME on >PASSWORD``: what a user of any name is given."""
    return rule.split(" ", 4)[4]


def tenant_acl(prefix: str) -> str:
    """The worker role's rules for one prefix (``modelplan acl worker``), with RQ's bookkeeping under
    ``{prefix}:rq`` as Security says to run the workers. A worker is trusted with every key of its prefix;
    these tests run the clients' and agents' parts under it too."""
    return _body(roles.worker_rule(Keys(prefix), "x"))


MODELPLAN_ACL = _body(roles.worker_rule(Keys(), "x", "rq"))
"""The worker role's rules for a worker left with RQ's own ``rq`` prefix for its bookkeeping (as the
in-process workers of these tests are): the prefix's keys, RQ's ``rq:*`` keys and command channels."""


def _wait(proc: subprocess.Popen[bytes], ready: Callable[[], object], log: Path, what: str) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            ready()
            return
        except (redis.RedisError, OSError):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
                raise RuntimeError(f"{what} did not start:\n{tail}") from None
            time.sleep(0.05)


@contextmanager
def _process(args: Sequence[str], folder: Path, ready: Callable[[], object], what: str) -> Iterator[None]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed: run scripts/setup")
    log = folder / f"{what}.log"
    proc = subprocess.Popen(
        [binary, *args, "--logfile", str(log)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        _wait(proc, ready, log, what)
        yield
    finally:
        proc.kill()
        proc.wait(timeout=10)


def _base(port: int, folder: Path) -> list[str]:
    return ["--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder), "--save", "", "--appendonly", "no"]


def _ping(client: redis.Redis) -> Callable[[], object]:
    return lambda: client.ping()


@contextmanager
def acl_server(
    rules: str = MODELPLAN_ACL, password: str = "secret", users: dict[str, str] | None = None
) -> Iterator[int]:
    """A redis-server whose only users are ``modelplan`` (``on >password`` + ``rules``), each of ``users``
    (name -> rules, with the same password) and ``admin`` (all rights, ADMIN_PASSWORD); ``default`` is off,
    so nothing gets in without a login. Yields the port."""
    folder = Path(tempfile.mkdtemp(prefix="modelplan-acl-"))
    port = free_port()
    extra = [a for name, r in (users or {}).items() for a in ("--user", name, "on", f">{password}", *r.split())]
    args = [
        *_base(port, folder),
        *("--user", "modelplan", "on", f">{password}", *rules.split()),
        *extra,
        *("--user", "admin", "on", f">{ADMIN_PASSWORD}", "~*", "&*", "+@all"),
        *("--user", "default", "off"),
    ]
    admin = admin_client(port)
    try:
        with _process(args, folder, _ping(admin), "redis-acl"):
            setup_redis(admin, Keys())  # the operator's part: modelplan's functions, loaded once
            yield port
    finally:
        admin.close()
        shutil.rmtree(folder, ignore_errors=True)


def admin_client(port: int) -> redis.Redis:
    return redis.Redis(port=port, username="admin", password=ADMIN_PASSWORD, socket_connect_timeout=0.5)


def make_certs(folder: Path, name: str = "ca") -> Path:
    """A throwaway CA (``{name}.crt``) and, signed by it, a certificate for 127.0.0.1 and localhost
    (``{name}-server.crt``, ``{name}-server.key``); skips the test when openssl is missing."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not on PATH: the TLS test needs it to make a throwaway CA")
    ca, key = folder / f"{name}.crt", folder / f"{name}.key"
    server_key, csr, server = (
        folder / f"{name}-server.key",
        folder / f"{name}-server.csr",
        folder / f"{name}-server.crt",
    )
    ext = folder / f"{name}-ext.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    signed = ["-out", str(server), "-days", "1", "-extfile", str(ext)]
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    steps = [
        [openssl, "req", "-x509", *ec, "-keyout", str(key), "-out", str(ca), "-days", "1", "-subj", f"/CN={name}"],
        [openssl, "req", *ec, "-keyout", str(server_key), "-out", str(csr), "-subj", "/CN=127.0.0.1"],
        [openssl, "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(key), "-CAcreateserial", *signed],
    ]
    for step in steps:
        subprocess.run(step, check=True, capture_output=True, timeout=30)
    return ca


@contextmanager
def tls_server() -> Iterator[tuple[int, Path]]:
    """A redis-server listening on TLS only (``--port 0``), with a throwaway CA. Yields the port and the CA
    file; skips when openssl is missing or this redis-server was built without TLS."""
    folder = Path(tempfile.mkdtemp(prefix="modelplan-tls-"))
    try:
        ca = make_certs(folder)
        port = free_port()
        args = [
            *_base(0, folder),
            *("--tls-port", str(port), "--tls-cert-file", str(folder / "ca-server.crt")),
            *("--tls-key-file", str(folder / "ca-server.key"), "--tls-ca-cert-file", str(ca)),
            *("--tls-auth-clients", "no"),
        ]
        probe = redis.Redis(port=port, ssl=True, ssl_ca_certs=str(ca), socket_connect_timeout=0.5)
        try:
            with _process(args, folder, _ping(probe), "redis-tls"):
                yield port, ca
        except RuntimeError as e:
            if "tls" in str(e).lower() and ("not supported" in str(e) or "Bad directive" in str(e)):
                pytest.skip(f"this redis-server has no TLS: {e}")
            raise
        finally:
            probe.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def sentinel_pair(password: str) -> Iterator[tuple[int, int]]:
    """A master (``requirepass``) and one sentinel monitoring it as ``mymaster`` (quorum 1). Yields the
    master's port and the sentinel's."""
    folder = Path(tempfile.mkdtemp(prefix="modelplan-sentinel-"))
    master_port, sentinel_port = free_port(), free_port()
    conf = folder / "sentinel.conf"
    conf.write_text(
        f"port {sentinel_port}\nbind 127.0.0.1\ndir {folder}\n"
        f"sentinel monitor mymaster 127.0.0.1 {master_port} 1\n"
        f"sentinel auth-pass mymaster {password}\n"
        "sentinel down-after-milliseconds mymaster 5000\n"
    )
    master = redis.Redis(port=master_port, password=password, socket_connect_timeout=0.5)
    sentinel = redis.Redis(port=sentinel_port, socket_connect_timeout=0.5)

    def sentinel_knows() -> None:
        if sentinel.sentinel_get_master_addr_by_name("mymaster") is None:
            raise redis.ConnectionError("the sentinel does not know mymaster yet")

    try:
        with (
            _process([*_base(master_port, folder), "--requirepass", password], folder, _ping(master), "master"),
            _process([str(conf), "--sentinel"], folder, sentinel_knows, "sentinel"),
        ):
            yield master_port, sentinel_port
    finally:
        master.close()
        sentinel.close()
        shutil.rmtree(folder, ignore_errors=True)


def dump(r: redis.Redis, match: str = "*") -> dict[str, tuple[str, bytes | None]]:
    """Every key matching ``match`` with its type and DUMP serialisation, in two round trips: two calls equal
    exactly when no key was added, removed or changed."""
    keys = sorted(r.scan_iter(match=match, count=1000))
    if not keys:
        return {}
    with r.pipeline(transaction=False) as pipe:
        for k in keys:
            pipe.type(k)
            pipe.dump(k)
        replies: list[Any] = pipe.execute()
    return {text(k): (text(replies[2 * i]), replies[2 * i + 1]) for i, k in enumerate(keys)}


def foreign_keys(r: redis.Redis, prefix: str = "modelplan") -> list[str]:
    """Keys outside modelplan's prefix and RQ's ``rq:``: none may exist."""
    return sorted(k for k in (text(k) for k in r.scan_iter(count=1000)) if not k.startswith((f"{prefix}:", "rq:")))


def place_one(client: Client, job_id: str = "sec-1") -> JobRecord:
    """The flow each server setup must carry: a heartbeat, a submit, the queue drained in this process; the
    job ends placed on the node."""
    assert client.heartbeat(hb("sec-node-1", gpus=8))
    assert client.submit(request(), job_id=job_id) == job_id
    runner.drain(client.store)
    rec = client.get(job_id)
    assert rec.state is JobState.PLACED, rec.reason
    assert [r.node_id for r in rec.placement] == ["sec-node-1"]
    return rec


def tls_context_error(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps) is a TLS verification failure."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError) or "CERTIFICATE_VERIFY_FAILED" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
