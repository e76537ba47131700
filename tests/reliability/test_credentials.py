"""Passwords stay off command lines, where every user of the host reads them (``ps``): a component takes
its login's password from a file (``MODELPLAN_REDIS_PASSWORD_FILE``) or its URL from the environment
(``MODELPLAN_REDIS_URL``); a password given in ``--redis-url`` is warned of; ``modelplan acl`` keeps a
role's password in a file of its owner's alone and prints the environment its processes need, which a
worker started with nothing else runs on. No documented command puts a password on a command line."""

from __future__ import annotations

import hashlib
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from planner import InvalidInput
from producer import Client
from producer.cli import main
from tests.reliability.sec_servers import ADMIN_PASSWORD, MODELPLAN_ACL, acl_server, admin_client
from tests.worker.helpers import hb, request
from worker.config import REDIS_URL_ENV, connect, redis_url
from worker.login import PASSWORD_FILE_ENV
from worker.records import JobState

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "f1le-Pa55-Kw3"
"""Distinctive, so that finding it anywhere in an output is never a coincidence."""
SETTINGS = (REDIS_URL_ENV, PASSWORD_FILE_ENV, "MODELPLAN_PREFIX", "MODELPLAN_CLIENT_ID", "RQ_KEY_PREFIX")


@pytest.fixture(autouse=True)
def no_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SETTINGS:
        monkeypatch.delenv(name, raising=False)


def password_file(folder: Path, text: str, name: str = "pw") -> Path:
    path = folder / name
    path.write_text(text)
    path.chmod(0o600)
    return path


# --- MODELPLAN_REDIS_PASSWORD_FILE -------------------------------------------------------------------------


def test_a_password_file_logs_in_with_the_user_the_url_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with acl_server(MODELPLAN_ACL, PASSWORD) as port:
        monkeypatch.setenv(REDIS_URL_ENV, f"redis://modelplan@127.0.0.1:{port}/0")
        monkeypatch.setenv(PASSWORD_FILE_ENV, str(password_file(tmp_path, PASSWORD + "\n")))
        client = Client.from_url()
        assert client.heartbeat(hb("cred-1", gpus=1))
        assert main(["status"]) == 0
        out, err = capsys.readouterr()
        assert "cred-1" in out and err == ""
        assert PASSWORD not in out + err
        client.redis.close()


@pytest.mark.parametrize(
    ("url", "secret", "made"),
    [
        ("redis://modelplan.worker@h:6379/0", "s3cret", "redis://modelplan.worker:s3cret@h:6379/0"),
        ("redis://h:6379/0", "s3cret", "redis://:s3cret@h:6379/0"),
        (
            "rediss://u@h:6380/0?ssl_cert_reqs=none",
            "a/b@c:d#e?f%g",
            "rediss://u:a%2Fb%40c%3Ad%23e%3Ff%25g@h:6380/0?ssl_cert_reqs=none",
        ),
        ("unix://u@/run/redis.sock?db=1", "s3cret", "unix://u:s3cret@/run/redis.sock?db=1"),
        ("redis+sentinel://u@s1:26379,s2/mymaster/0", "s3cret", "redis+sentinel://u:s3cret@s1:26379,s2/mymaster/0"),
    ],
)
def test_the_password_file_goes_into_the_urls_login(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, secret: str, made: str
) -> None:
    monkeypatch.setenv(PASSWORD_FILE_ENV, str(password_file(tmp_path, secret + "\n")))
    assert redis_url(url) == made
    assert redis_url(made) == made  # the same password given twice: one password
    if url.startswith(("redis://", "rediss://", "unix://")):
        assert connect(made).connection_pool.connection_kwargs["password"] == secret


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (None, "cannot be read"),
        ("", "is empty"),
        ("\n", "is empty"),
        ("one\ntwo\n", "more than one line"),
        ("x" * 5000, "longer than"),
    ],
)
def test_a_password_file_that_cannot_serve_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str | None, problem: str
) -> None:
    path = tmp_path / "pw" if text is None else password_file(tmp_path, text)
    monkeypatch.setenv(PASSWORD_FILE_ENV, str(path))
    with pytest.raises(InvalidInput) as e:
        redis_url("redis://u@h:6379/0")
    said = str(e.value)
    assert "\n" not in said and PASSWORD_FILE_ENV in said and str(path) in said and problem in said, said


def test_a_url_with_another_password_than_the_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PASSWORD_FILE_ENV, str(password_file(tmp_path, PASSWORD)))
    with pytest.raises(InvalidInput) as e:
        redis_url("redis://u:other-Pa55@h:6379/0")
    said = str(e.value)
    assert "\n" not in said and PASSWORD_FILE_ENV in said and "once" in said
    assert PASSWORD not in said and "other-Pa55" not in said


# --- a password on the command line ------------------------------------------------------------------------


def test_a_password_in_redis_url_on_the_command_line_is_warned_of(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with acl_server(MODELPLAN_ACL, PASSWORD) as port:
        url = f"redis://modelplan:{PASSWORD}@127.0.0.1:{port}/0"
        assert main(["status", "--redis-url", url]) == 0
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1, err
        assert "--redis-url" in err and PASSWORD_FILE_ENV in err and PASSWORD not in err
        # the same URL from the environment, or a URL with no password, is no warning
        monkeypatch.setenv(REDIS_URL_ENV, url)
        assert main(["status"]) == 0
        assert capsys.readouterr().err == ""
        assert main(["status", "--redis-url", f"redis://127.0.0.1:{port}/0"]) == 2  # default is off
        assert "--redis-url" not in capsys.readouterr().err


# --- modelplan acl hands over what each component needs ---------------------------------------------------


def environment(err: str) -> dict[str, str]:
    """The ``NAME=value`` lines of ``modelplan acl``'s standard error."""
    return dict(line.split("=", 1) for line in err.splitlines() if re.match(r"[A-Z_]+=", line))


def test_acl_keeps_the_password_in_a_file_of_its_owners_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "keys" / "worker.password"
    path.parent.mkdir()
    assert main(["acl", "worker", "--password-file", str(path)]) == 0
    out, err = capsys.readouterr()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    secret = path.read_text().removesuffix("\n")
    assert len(secret) >= 24 and "\n" not in secret
    digest = hashlib.sha256(secret.encode()).hexdigest()
    assert out.startswith(f"user modelplan.worker on #{digest} ") and secret not in out + err
    assert environment(err) == {
        REDIS_URL_ENV: "redis://modelplan.worker@127.0.0.1:6379/0",
        PASSWORD_FILE_ENV: str(path),
        "RQ_KEY_PREFIX": "modelplan:rq",
    }
    assert all(line.startswith("#") or "=" in line for line in err.splitlines()), err  # an environment file
    # again: the password in the file is kept, not made anew
    assert main(["acl", "worker", "--password-file", str(path)]) == 0
    assert capsys.readouterr().out == out and path.read_text() == secret + "\n"


def test_acl_names_the_client_and_the_prefix_in_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = password_file(tmp_path, "svc-Pa55\n")
    url = "rediss://admin@redis.internal:6380/0?ssl_ca_certs=/etc/ssl/certs/ca-certificates.crt"
    args = ["acl", "client", "svc-a", "--prefix", "tenantA", "--password-file", str(path), "--redis-url", url]
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert f"#{hashlib.sha256(b'svc-Pa55').hexdigest()}" in out and "svc-Pa55" not in out + err
    assert environment(err) == {
        REDIS_URL_ENV: "rediss://tenantA.client.svc-a@redis.internal:6380/0?ssl_ca_certs=/etc/ssl/certs/ca-certificates.crt",
        PASSWORD_FILE_ENV: str(path),
        "MODELPLAN_PREFIX": "tenantA",
        "MODELPLAN_CLIENT_ID": "svc-a",
    }


@pytest.mark.parametrize(
    ("url", "handed"),
    [
        ("redis://admin:adm1n@redis:6379/0", "redis://modelplan.worker@redis:6379/0"),
        ("redis://redis/0?db=1&password=adm1n&ssl=1", "redis://modelplan.worker@redis/0?db=1&ssl=1"),
        ("unix://admin:adm1n@/run/redis.sock?db=2", "unix://modelplan.worker@/run/redis.sock?db=2"),
        # the sentinels' own login is every role's
        (
            "redis+sentinel://admin:adm1n@s1,s2/m?sentinel_password=s",
            "redis+sentinel://modelplan.worker@s1,s2/m?sentinel_password=s",
        ),
    ],
)
def test_acl_hands_on_the_operators_url_without_its_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, url: str, handed: str
) -> None:
    monkeypatch.setenv(REDIS_URL_ENV, url)
    assert main(["acl", "worker", "--password-file", str(tmp_path / "pw")]) == 0
    err = capsys.readouterr().err
    assert environment(err)[REDIS_URL_ENV] == handed and "adm1n" not in err


@pytest.mark.parametrize("text", ["two words\n", "tab\there", ""])
def test_acl_refuses_a_password_an_acl_line_cannot_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    path = password_file(tmp_path, text)
    assert main(["acl", "worker", "--password-file", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and "--password-file" in err, err


def test_acl_warns_of_a_password_given_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["acl", "worker", "--password", PASSWORD]) == 0
    out, err = capsys.readouterr()
    assert f">{PASSWORD} " in out
    assert len(err.splitlines()) == 1 and "--password-file" in err and PASSWORD not in err, err


def test_the_environment_acl_prints_runs_a_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The operator applies the worker's user with a password file; a worker given only the environment
    ``modelplan acl`` printed (no flag, no password on its command line) places a job, and the server
    refuses it nothing."""
    with acl_server(MODELPLAN_ACL, PASSWORD) as port:
        admin_file = password_file(tmp_path, ADMIN_PASSWORD + "\n", "admin.password")
        monkeypatch.setenv(REDIS_URL_ENV, f"redis://admin@127.0.0.1:{port}/0")
        monkeypatch.setenv(PASSWORD_FILE_ENV, str(admin_file))
        path = tmp_path / "worker.password"
        assert main(["acl", "worker", "--apply", "--password-file", str(path)]) == 0
        env = environment(capsys.readouterr().err)
        client = Client.from_url()
        client.heartbeat(hb("cred-node", gpus=2))
        client.submit(request(), job_id="cred-1")
        client.redis.close()

        base = {k: v for k, v in os.environ.items() if k not in SETTINGS}
        done = subprocess.run(
            [sys.executable, "-m", "producer.cli", "worker", "--burst"],
            cwd=ROOT,
            env={**base, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert '"redis": "redis://modelplan.worker:***@' in done.stdout
        admin = admin_client(port)
        assert admin.acl_log() == []
        admin.close()
        assert Client.from_url().get("cred-1").state is JobState.PLACED


# --- the documents ------------------------------------------------------------------------------------------

PASSWORD_ON_A_COMMAND_LINE = (
    re.compile(r"--redis-url[ =]\S*://[^\s/@]*:[^\s@]*@"),  # a URL whose login holds a password
    re.compile(r"--redis-url[ =]\S*password="),  # or whose query does
    re.compile(r"--password(?!-file)\b"),
    re.compile(r"redis-cli\b.*\s(-a|--pass)\s"),
)


def commands(text: str) -> list[str]:
    """Each command of a document's shell blocks, its continued lines joined."""
    out: list[str] = []
    for block in re.findall(r"```(?:sh|bash|console)\n(.*?)```", text, re.S):
        out += block.replace("\\\n", " ").splitlines()
    return out


def test_the_check_sees_a_password_on_a_command_line() -> None:
    text = (
        "```sh\nmodelplan status --redis-url redis://u:...@h:6379/0\nmodelplan acl worker --password x\n"
        "modelplan job j \\\n  --redis-url rediss://h/0?sentinel_password=x\nredis-cli -a x ping\n"
        "modelplan status --redis-url redis://u@h:6379/0\nmodelplan acl worker --password-file f\n```\n"
    )
    found = [c for c in commands(text) if any(p.search(c) for p in PASSWORD_ON_A_COMMAND_LINE)]
    assert len(found) == 4, found


@pytest.mark.parametrize("doc", ["README.md", *(f"docs/{p.name}" for p in sorted((ROOT / "docs").glob("*.md")))])
def test_no_documented_command_puts_a_password_on_its_command_line(doc: str) -> None:
    found = [
        c
        for c in commands((ROOT / doc).read_text(encoding="utf-8"))
        if any(p.search(c) for p in PASSWORD_ON_A_COMMAND_LINE)
    ]
    assert found == [], f"{doc}: a password on a command line, which ps shows every user of the host: {found}"


def test_the_documented_setup_keeps_each_password_in_a_file() -> None:
    """Every ``modelplan acl ... --apply`` the setup documents keeps its password in a file, whose printed
    environment (RQ_KEY_PREFIX for the workers among it) is what each component runs with."""
    setup = [c for c in commands((ROOT / "docs" / "SECURITY.md").read_text(encoding="utf-8")) if "modelplan acl" in c]
    assert setup, "docs/SECURITY.md documents no modelplan acl command"
    for command in setup:
        for part in command.split("&&"):
            if "modelplan acl" in part:
                assert "--password-file" in part, part


# --- modelplan acl --save ---------------------------------------------------------------------------------


def test_acl_save_keeps_the_users_set_across_a_restart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Users set by ACL SETUSER alone are gone when the server starts again; ``--save`` writes them to the
    server's ACL file, which the restart reads back."""
    from tests.redis_server import RedisServer

    server = RedisServer()
    acl = server.dir / "users.acl"
    acl.write_text("user default on nopass ~* &* +@all\n")
    server.extra += ["--aclfile", str(acl)]
    try:
        server.start()
        pw = tmp_path / "worker.password"
        assert main(["acl", "worker", "--password-file", str(pw), "--apply", "--save", "--redis-url", server.url]) == 0
        assert "modelplan.worker" in acl.read_text()
        server.restart()
        login = f"redis://modelplan.worker:{pw.read_text().strip()}@127.0.0.1:{server.port}/0"
        assert connect(login).ping()
    finally:
        server.cleanup()


def test_acl_save_on_a_server_with_no_acl_file_says_how_to_give_it_one(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    args = ["acl", "client", "save-1", "--password-file", str(tmp_path / "pw"), "--apply", "--save"]
    assert main([*args, "--redis-url", redis_url]) == 2
    err = capsys.readouterr().err
    assert "--save: the server keeps no ACL file" in err and "--aclfile" in err
    assert main(["acl", "worker", "--save"]) == 2  # nothing applied: nothing to save
    assert "--save goes with --apply" in capsys.readouterr().err
