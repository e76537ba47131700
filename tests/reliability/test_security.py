"""Security: no pickle on the Redis path, Redis ACL users, TLS, ids that cannot reach outside modelplan's keys,
URLs refused before anything is sent, and no password in any message or log line."""

from __future__ import annotations

import json
import pickle
import re
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.connection import SSLConnection
from rq.registry import FailedJobRegistry
from rq.serializers import DefaultSerializer

from planner import InvalidInput
from producer import Client
from producer.cli import main
from tests.reliability.sec_servers import (
    MODELPLAN_ACL,
    acl_server,
    admin_client,
    dump,
    foreign_keys,
    make_certs,
    place_one,
    tls_context_error,
    tls_server,
)
from tests.worker.helpers import hb, request
from worker import runner
from worker.config import configure_logging, connect, redact
from worker.errors import RedisUnavailable
from worker.keys import Keys
from worker.queueing import job_class, queue_class
from worker.records import JobState

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "s3cr3t-Pa55-Zq7"
"""Distinctive, so that finding it anywhere in an output is never a coincidence."""
WRONG = "wr0ng-Pa55-Qx4"


# --- no pickle on the Redis path ---------------------------------------------------------------------------


def test_no_pickle_in_the_code() -> None:
    """Nothing that runs against Redis imports pickle (or a relative of it), and every RQ queue and worker is
    built with the JSON serializer, RQ's default being pickle."""
    found: list[str] = []
    rq_built: list[str] = []
    for package in ("planner", "worker", "producer"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                where = f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
                if re.search(r"^\s*(import|from)\s+(_?pickle|cloudpickle|dill|marshal|shelve)\b", line):
                    found.append(where)
                if re.search(r"cloudpickle|DefaultSerializer|PickleSerializer|pickle\.loads", line):
                    found.append(where)
                if re.search(  # not the standard library's queue.Queue
                    r"(?<!queue\.)\b(Queue|Worker|SimpleWorker|InProcessWorker|cls(?=\(\[)|queue_class\([\w.]+\))\(\[?[a-z]",
                    line,
                ):
                    rq_built.append(where)
    assert found == []
    assert rq_built, "the scan finds where RQ queues and workers are made"
    assert [w for w in rq_built if "serializer=JSONSerializer" not in w] == []


class Touch:
    """A pickle whose loading creates a file: proof of code run from Redis data, if the file appears."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        return (Path.touch, (Path(self.path),))


def test_a_pickled_job_is_refused_and_runs_nothing(redis_url: str, tmp_path: Path) -> None:
    """Three ways a pickle can reach the planning queue (a job enqueued with RQ's pickle serializer, a JSON
    job whose data is replaced by raw pickle bytes, or by zlib-compressed pickle bytes as RQ stores data):
    the worker refuses each job unrun, runs none of the pickle, and no modelplan key changes."""
    sanity = tmp_path / "sanity"
    pickle.loads(pickle.dumps(Touch(sanity)))  # the payload is live: unpickled, it does create its file
    assert sanity.exists()

    client = Client.from_url(redis_url)
    place_one(client)
    before = dump(client.redis, f"{client.keys.prefix}:*")
    marker = tmp_path / "pwned"
    payload = Touch(marker)
    name = client.store.queue.name

    pickled_queue = queue_class(client.keys.prefix)(name, connection=client.redis, serializer=DefaultSerializer)
    jobs = [pickled_queue.enqueue_call("worker.jobs.plan_job", args=(client.keys.prefix, payload))]
    for data in (pickle.dumps(payload), zlib.compress(pickle.dumps(("worker.jobs.plan_job", None, (payload,), {})))):
        job = job_class(client.keys.prefix).create(
            "worker.jobs.plan_job", args=(client.keys.prefix, "sec-1"), connection=client.redis
        )
        client.store.queue.enqueue_job(job)
        client.redis.hset(job.key, "data", data)
        jobs.append(job)

    runner.drain(client.store)

    assert not marker.exists()
    assert FailedJobRegistry(queue=client.store.queue).get_job_ids() == []
    assert [client.redis.exists(j.key) for j in jobs] == [0, 0, 0]
    assert client.store.queue.count == 0
    assert dump(client.redis, f"{client.keys.prefix}:*") == before
    assert client.get("sec-1").state is JobState.PLACED


# --- Redis ACL users ---------------------------------------------------------------------------------------


def _url(port: int, password: str = PASSWORD) -> str:
    return f"redis://modelplan:{password}@127.0.0.1:{port}/0"


def test_an_acl_user_with_the_minimal_rules_runs_everything(capsys: pytest.CaptureFixture[str]) -> None:
    """Through ``connect`` as an ACL user holding only MODELPLAN_ACL (its keys, RQ's, RQ's channels, the
    commands used), with ``default`` off: heartbeats, submit, drain, placed, watch, scale, release, cancel, a
    node restart, a worker run with its sweep, and ``modelplan status``; the server denies nothing (ACL LOG
    stays empty), and no key lands outside ``modelplan:`` and ``rq:``."""
    with acl_server(MODELPLAN_ACL, PASSWORD) as port:
        url = _url(port)
        client = Client.from_url(url)
        rec = place_one(client)
        assert [r.version for r in client.watch("sec-1", timeout=1)] == [rec.version]
        assert client.scale("sec-1", 2).wanted == 2
        assert client.release("sec-1").state is JobState.RELEASED
        client.submit(request(), job_id="sec-2")
        assert [r.state for r in client.watch("sec-2", timeout=0.2)] == [JobState.QUEUED]  # XREAD, blocking
        assert client.cancel("sec-2").state is JobState.CANCELLED
        client.submit(request(), job_id="sec-3")
        runner.drain(client.store)
        assert client.heartbeat(hb("sec-node-1", gpus=8, seq=2, boot="boot-2"))  # a restart: sec-3 re-planned
        runner.run(url, "modelplan", burst=True)
        assert main(["status", "--redis-url", url]) == 0
        assert client.get("sec-3").state is JobState.PLACED
        admin = admin_client(port)
        assert admin.acl_log() == []
        assert foreign_keys(admin) == []
        assert FailedJobRegistry(queue=queue_class("modelplan")("modelplan", connection=admin)).get_job_ids() == []
        admin.close()
    assert PASSWORD not in "".join(capsys.readouterr())


def test_a_wrong_password_is_refused_without_showing_it(capsys: pytest.CaptureFixture[str]) -> None:
    with acl_server(MODELPLAN_ACL, PASSWORD) as port:
        url = _url(port, WRONG)
        assert WRONG not in redact(url) and "modelplan:***@" in redact(url)
        client = Client.from_url(url)
        with pytest.raises(RedisUnavailable) as e:
            client.submit(request(), job_id="sec-1")
        assert isinstance(e.value.__cause__, redis.AuthenticationError)
        assert WRONG not in str(e.value) and "modelplan:***@" in str(e.value)
        for argv in (
            ["status"],
            ["job", "sec-1"],
            ["heartbeat", "--node-id", "n", "--host-mem-gb", "1", "--host-free-gb", "1"],
        ):
            assert main([*argv, "--redis-url", url]) == 2
            err = capsys.readouterr().err
            assert "cannot be reached" in err and "modelplan:***@" in err
            assert WRONG not in err and PASSWORD not in err
        assert admin_client(port).dbsize() == 0


def test_a_worker_with_a_wrong_password_shows_no_password(capsys: pytest.CaptureFixture[str]) -> None:
    """``modelplan worker`` with a wrong password stops; whatever it says, the password is not in it."""
    with acl_server(MODELPLAN_ACL, PASSWORD) as port:
        url = _url(port, WRONG)
        assert main(["worker", "--burst", "--redis-url", url]) == 2
        out, err = capsys.readouterr()
        # a worker says it as it says everything, in a JSON line on its log stream
        assert WRONG not in out + err and "cannot be reached" in out
        assert [json.loads(line)["event"] for line in out.splitlines()] == ["worker_failed"]


def test_a_worker_with_a_wrong_password_exits_2() -> None:
    with acl_server(MODELPLAN_ACL, PASSWORD) as port:
        assert main(["worker", "--burst", "--redis-url", _url(port, WRONG)]) == 2


def test_an_acl_user_outside_its_keys_gets_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with acl_server(MODELPLAN_ACL, PASSWORD) as port:
        assert main(["status", "--redis-url", _url(port), "--prefix", "other"]) == 2
        assert "no permissions" in capsys.readouterr().err


# --- TLS ---------------------------------------------------------------------------------------------------


def test_tls_carries_the_whole_flow() -> None:
    """``rediss://`` with redis-py's ``ssl_ca_certs`` and ``ssl_cert_reqs`` query arguments, through
    ``connect``, to a server listening on TLS only: submit, drain, placed, and a worker run."""
    with tls_server() as (port, ca):
        url = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={ca}&ssl_cert_reqs=required"
        client = Client.from_url(url)
        assert client.redis.connection_pool.connection_class is SSLConnection
        place_one(client)
        runner.run(url, "modelplan", burst=True)
        assert client.get("sec-1").state is JobState.PLACED


def test_tls_checks_the_server_certificate(tmp_path: Path) -> None:
    """A CA the server's certificate does not chain to is refused (``RedisUnavailable``, nothing stored),
    as is a plain ``redis://`` client on the TLS port."""
    with tls_server() as (port, _ca):
        other = make_certs(tmp_path, "other")
        for url in (f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={other}", f"redis://127.0.0.1:{port}/0"):
            with pytest.raises(RedisUnavailable) as e:
                Client.from_url(url).submit(request(), job_id="sec-1")
            assert "nothing was stored" in str(e.value)
            if url.startswith("rediss"):
                assert tls_context_error(e.value)


# --- ids cannot reach outside their keys --------------------------------------------------------------------

BAD_IDS = [
    "",
    "a:b",
    "job:x",
    "*",
    "a*",
    "..",
    "../x",
    "a/b",
    "a b",
    " a",
    "a\nb",
    "a\r",
    "a\x00",
    "{a}",
    "a}",
    "-a",
    ".a",
    "a" * 129,
    "é",
    "a\u202eb",
    "🙂",
    "a\ud800",
]


@pytest.mark.parametrize("bad", BAD_IDS, ids=[ascii(b)[:20] for b in BAD_IDS])
def test_an_id_that_could_leave_its_key_is_refused(redis_url: str, bad: str) -> None:
    """Every key function and every client call taking an id refuses one that is not letters, digits,
    ``.``, ``_`` and ``-`` (starting with a letter or digit, up to 128), with ``InvalidInput`` naming the
    field, and nothing stored changes."""
    keys = Keys()
    for fn in (keys.node, keys.held, keys.job, keys.job_events, keys.lock):
        with pytest.raises(InvalidInput):
            fn(bad)
    for repo, revision in ((f"{bad}/name", "main"), (f"org/{bad}", "main"), ("org/name", bad)):
        with pytest.raises(InvalidInput):
            keys.hub(repo, revision)

    client = Client.from_url(redis_url)
    place_one(client)
    before = dump(client.redis)
    calls: list[tuple[str, Callable[[], object]]] = [
        ("job_id", lambda: client.submit(request(), job_id=bad)),
        ("node_id", lambda: client.heartbeat(hb(bad))),
        ("boot_id", lambda: client.heartbeat(hb("sec-node-1", gpus=8, seq=9, boot=bad))),
        ("started", lambda: client.heartbeat(hb("sec-node-1", gpus=8, seq=9, started=(f"{bad}:0:1",)))),
        ("job_id", lambda: client.get(bad)),
        ("job_id", lambda: client.release(bad)),
        ("job_id", lambda: client.cancel(bad)),
        ("job_id", lambda: client.scale(bad, 2)),
        ("job_id", lambda: list(client.watch(bad, timeout=0.1))),
    ]
    for field, call in calls:
        with pytest.raises(InvalidInput) as e:
            call()
        # a lone surrogate cannot be written as JSON text, so heartbeats (parsed as JSON) refuse the record
        named = {field, "(record)"} if "\ud800" in bad and field != "job_id" else {field}
        assert e.value.field in named and "\n" not in str(e.value), str(e.value)
    assert dump(client.redis) == before
    assert foreign_keys(client.redis) == []


# --- URLs and logs ------------------------------------------------------------------------------------------

BAD_URLS = [
    f"redis://modelplan:{PASSWORD}@127.0.0.1:notaport/0",
    f"redis://modelplan:pa#{PASSWORD}@127.0.0.1/0",
    f"redis://modelplan:pa/{PASSWORD}@127.0.0.1:6379/0",
    f"redis://modelplan:{PASSWORD}@127.0.0.1:70000/0",
    f"redis://modelplan:12/{PASSWORD}@127.0.0.1/0",
    f"redis://modelplan:{PASSWORD}@127.0.0.1/zero",
    f"redis://modelplan:{PASSWORD}@127.0.0.1/0?no_such_option=1",
    f"rediss://modelplan:{PASSWORD}@127.0.0.1/0?ssl_ca_certs=/no/such/ca.pem",
    f"rediss://modelplan:{PASSWORD}@127.0.0.1/0?ssl_cert_reqs=sometimes",
    f"http://modelplan:{PASSWORD}@127.0.0.1/0",
    f"redis+sentinel://modelplan:{PASSWORD}@127.0.0.1:26379",
    f"redis+sentinel://modelplan:{PASSWORD}@127.0.0.1:x/mymaster",
    f"redis+sentinel://127.0.0.1/mymaster?sentinel_password={PASSWORD}&other=1",
    f"modelplan:{PASSWORD}@127.0.0.1:6379",
]


@pytest.mark.parametrize("url", BAD_URLS, ids=range(len(BAD_URLS)))
def test_a_url_that_cannot_work_is_refused_without_the_password(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``connect`` refuses it with ``InvalidInput`` before sending anything (the CLI: one line, exit 2);
    neither says the password, even where a parser would take part of it for a port or a path."""
    with pytest.raises(InvalidInput) as e:
        connect(url)
    assert PASSWORD not in str(e.value) and "\n" not in str(e.value)
    cause = e.value.__cause__
    while cause is not None:  # a traceback would show what the message is chained to
        assert "pa" not in str(cause) and PASSWORD not in str(cause)
        cause = cause.__cause__
    assert main(["status", "--redis-url", url]) == 2
    err = capsys.readouterr().err
    assert err.startswith("modelplan status: Redis URL: ") and PASSWORD not in err


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://u:pw@h:6379/0", "redis://u:***@h:6379/0"),
        ("redis://:pw@h/0", "redis://:***@h/0"),
        ("redis://h:6379/0", "redis://h:6379/0"),
        ("redis://u@h/0", "redis://u@h/0"),
        ("u:pw@h:6379", "u:***@h:6379"),
        ("redis://u:p@w@h/0", "redis://u:***@h/0"),
        ("redis://u:p/w@h/0", "redis://***@h/0"),
        ("redis://h/0?password=pw&db=1", "redis://h/0?password=***&db=1"),
        ("unix:///run/redis.sock?db=0&password=pw", "unix:///run/redis.sock?db=0&password=***"),
        ("rediss://h/0?ssl_ca_certs=/etc/a@b.pem", "rediss://h/0?ssl_ca_certs=/etc/a@b.pem"),
        ("redis+sentinel://u:pw@h1:26379,h2:26380/mymaster/0", "redis+sentinel://u:***@h1:26379,h2:26380/mymaster/0"),
        ("redis+sentinel://h1/m?sentinel_password=pw", "redis+sentinel://h1/m?sentinel_password=***"),
    ],
)
def test_redact_examples(url: str, shown: str) -> None:
    assert redact(url) == shown


_URL_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)


@settings(max_examples=300, derandomize=True, deadline=None, database=None)
@given(secret=st.text(min_size=1, max_size=20), user=_URL_TEXT, host=_URL_TEXT, tail=_URL_TEXT)
def test_redact_never_shows_the_password(secret: str, user: str, host: str, tail: str) -> None:
    """Whatever the password holds (``@``, ``/``, ``?``, ``#``, ``:``, newlines), ``redact`` does not show
    it, and never fails."""
    secret = f"Zq{secret}Zq"  # not a part of what the rest of the URL holds by chance
    for scheme in ("redis", "rediss", "redis+sentinel"):
        url = f"{scheme}://{user.replace('@', '')}:{secret}@{host.replace('@', '')}/0{tail.replace('@', '')}"
        assert secret not in redact(url)
    assert secret not in redact(f"redis://h/0?password={secret.replace('&', '').replace('#', '')}")


def test_a_worker_logs_no_password(capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    """A worker run with a password URL, through a placement and a job it refuses (a pickled payload),
    writes JSON lines that name the Redis URL redacted and never the password."""
    with acl_server(MODELPLAN_ACL, PASSWORD) as port:
        url = _url(port)
        client = Client.from_url(url)
        client.heartbeat(hb("sec-node-1", gpus=8))
        client.submit(request(), job_id="sec-1")
        job = job_class("modelplan").create(
            "worker.jobs.plan_job", args=("modelplan", "sec-1"), connection=client.redis
        )
        client.store.queue.enqueue_job(job)
        client.redis.hset(job.key, "data", pickle.dumps(Touch(Path("/nonexistent/never"))))
        capsys.readouterr()
        configure_logging()
        runner.run(url, "modelplan", burst=True)
        out, err = capsys.readouterr()
        assert client.get("sec-1").state is JobState.PLACED
        assert FailedJobRegistry(queue=client.store.queue).get_job_ids() == []
    assert '"event": "worker_started"' in out and "modelplan:***@127.0.0.1" in out and "job_placed" in out
    assert '"event": "job_refused"' in out and job.id in out
    assert PASSWORD not in out + err + caplog.text


@settings(max_examples=50, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(password=st.text(alphabet=st.characters(codec="ascii", categories=("L", "N")), min_size=6, max_size=20))
def test_a_password_in_any_form_of_url_is_masked_in_client_errors(password: str) -> None:
    """``RedisUnavailable`` names the URL redacted, for each URL form, whatever the password."""
    secret = f"Zq{password}Zq"
    port = 1  # nothing listens: every call fails at once
    for url in (f"redis://u:{secret}@127.0.0.1:{port}/0", f"rediss://:{secret}@127.0.0.1:{port}/0"):
        with pytest.raises(RedisUnavailable) as e:
            Client.from_url(url).get("job-1")
        assert secret not in str(e.value) and "***@127.0.0.1" in str(e.value)
