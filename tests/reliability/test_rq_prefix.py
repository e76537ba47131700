"""A worker on the worker role's ACL login (``modelplan acl worker``) keeps RQ's bookkeeping under
``{prefix}:rq``, which its rules grant; started without ``RQ_KEY_PREFIX`` saying so, RQ would use its
default ``rq`` and be refused mid-start. The worker checks before it starts: one line naming the setting,
exit 2, nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from producer import roles
from tests.reliability.sec_servers import acl_server, admin_client
from worker.keys import Keys

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "rq-pass-Vb8"


def worker(port: int, prefix: str, rq_prefix: str | None) -> subprocess.CompletedProcess[str]:
    """``modelplan worker --burst`` as the ``modelplan`` user, with ``RQ_KEY_PREFIX`` as given (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RQ_KEY_PREFIX", "MODELPLAN_PREFIX")}
    env["MODELPLAN_REDIS_URL"] = f"redis://modelplan:{PASSWORD}@127.0.0.1:{port}/0"
    env["MODELPLAN_PREFIX"] = prefix
    if rq_prefix is not None:
        env["RQ_KEY_PREFIX"] = rq_prefix
    return subprocess.run(
        [sys.executable, "-m", "producer.cli", "worker", "--burst"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def body(rule: str) -> str:
    return rule.split(" ", 4)[4]


def test_a_worker_without_rq_key_prefix_on_the_worker_login_says_what_to_set() -> None:
    with acl_server(body(roles.worker_rule(Keys(), "x")), PASSWORD) as port:
        done = worker(port, "modelplan", None)
        out = done.stdout + done.stderr
        assert done.returncode == 2, out
        assert "Traceback" not in out and PASSWORD not in out
        lines = [json.loads(line) for line in done.stdout.splitlines()]
        assert [e["event"] for e in lines] == ["worker_failed"], out  # before it started: nothing else
        said = lines[0]["error"]
        assert "\n" not in said
        assert "RQ_KEY_PREFIX=modelplan:rq" in said and "'rq'" in said, said
        admin = admin_client(port)
        assert admin.dbsize() == 0  # refused before anything was written
        admin.close()


def test_a_worker_on_rules_for_another_rq_prefix_says_so() -> None:
    """RQ_KEY_PREFIX set as the default rules want, but the user's rules were made for RQ's own ``rq``
    (``--rq-prefix rq``): its channels are refused, and the line says to set the rules again."""
    with acl_server(body(roles.worker_rule(Keys(), "x", "rq")), PASSWORD) as port:
        done = worker(port, "modelplan", "modelplan:rq")
        assert done.returncode == 2, done.stdout + done.stderr
        said = json.loads(done.stdout.splitlines()[-1])["error"]
        assert "'modelplan:rq'" in said and "modelplan acl worker" in said, said


def test_a_worker_with_rq_key_prefix_as_its_rules_say_runs() -> None:
    with acl_server(body(roles.worker_rule(Keys("tenantA"), "x")), PASSWORD) as port:
        done = worker(port, "tenantA", "tenantA:rq")
        assert done.returncode == 0, done.stdout + done.stderr
        admin = admin_client(port)
        assert admin.acl_log() == []
        admin.close()
