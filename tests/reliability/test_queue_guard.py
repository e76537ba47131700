"""The planning queue runs only modelplan's job functions, and a tenant's login reaches no other tenant.

Attacks are made as a real Redis ACL user holding the worker role's rules (docs/SECURITY.md), against a
``modelplan worker`` process holding the same rules with ``RQ_KEY_PREFIX`` set as Security says: RQ's
own ``enqueue`` of
``os.system``, ``subprocess.call`` and ``builtins.eval``, the same jobs written with raw Redis commands
(no RQ at all), forged arguments and callbacks. A marker file would show any code run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from rq.serializers import JSONSerializer

from producer import Client, roles
from tests.reliability.sec_servers import acl_server as _acl_server
from tests.reliability.sec_servers import admin_client, dump, tenant_acl
from tests.worker.helpers import hb, request
from worker.keys import Keys
from worker.queueing import queue_class
from worker.records import JobState

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "tenant-pass-Qx7"


def url_for(port: int, user: str) -> str:
    return f"redis://{user}:{PASSWORD}@127.0.0.1:{port}/0"


def run_worker(url: str, prefix: str) -> str:
    """``modelplan worker --burst`` for ``prefix`` in its own process, as Security deploys it; its output."""
    env = {**os.environ, "RQ_KEY_PREFIX": f"{prefix}:rq", "MODELPLAN_PREFIX": prefix}
    done = subprocess.run(
        [sys.executable, "-m", "producer.cli", "worker", "--burst", "--redis-url", url],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=60,
    )
    out = done.stdout.decode() + done.stderr.decode()
    assert done.returncode == 0, out
    return out


@pytest.fixture
def tenants() -> Iterator[int]:
    """A server with two tenants' users, ``a`` (prefix ``tenantA``) and ``b`` (``tenantB``), and ``modelplan``
    for the default prefix, each holding only the worker role's rules for its prefix."""
    users = {"a": tenant_acl("tenantA"), "b": tenant_acl("tenantB")}
    with _acl_server(tenant_acl("modelplan"), PASSWORD, users) as port:
        yield port


def attacks(r: redis.Redis, keys: Keys, marker: Path) -> list[str]:
    """Queue every kind of foreign job on ``keys``' planning queue through ``r``: with RQ, and by hand."""
    queue = queue_class(keys.prefix)(keys.queue_name, connection=r, serializer=JSONSerializer)
    ids = [
        queue.enqueue("os.system", f"touch {marker}").id,
        queue.enqueue("subprocess.call", ["touch", str(marker)]).id,
        queue.enqueue("builtins.eval", f"__import__('os').system('touch {marker}')").id,
        queue.enqueue("worker.jobs.plan_job", keys.prefix, f"x; touch {marker}").id,  # not an id
    ]
    raw = {
        "raw-call": ["subprocess.call", None, [["touch", str(marker)]], {}],
        "raw-eval": ["builtins.eval", None, [f"open('{marker}', 'w')"], {}],
        "raw-kwargs": ["worker.jobs.wake_pass", None, [keys.prefix], {"full": f"touch {marker}"}],
    }
    for rq_id, data in raw.items():
        r.hset(keys.rq_job(rq_id), mapping={"data": json.dumps(data), "status": "queued", "origin": keys.prefix})
        r.rpush(keys.rq_queue, rq_id)
        ids.append(rq_id)
    # a modelplan function with a callback that RQ would import and call after it
    r.hset(
        keys.rq_job("raw-callback"),
        mapping={
            "data": json.dumps(["worker.jobs.wake_pass", None, [keys.prefix, False], {}]),
            "success_callback_name": "os.system",
            "status": "queued",
        },
    )
    r.rpush(keys.rq_queue, "raw-callback")
    # hashes RQ cannot read at all: a worker that raised on them would stop serving everyone
    r.hset(keys.rq_job("raw-garbage"), mapping={"data": "{not json", "created_at": "yesterday"})
    r.set(keys.rq_job("raw-string"), "not a hash")
    r.rpush(keys.rq_queue, "raw-garbage", "raw-string")
    return [*ids, "raw-callback", "raw-garbage", "raw-string"]


def test_only_modelplans_jobs_run_under_the_readme_acl_user(tenants: int, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    url = url_for(tenants, "modelplan")
    client = Client.from_url(url)
    client.heartbeat(hb("gpu-1", gpus=2))
    client.submit(request(), job_id="good-1")
    ids = attacks(client.redis, client.keys, marker)
    client.submit(request(), job_id="good-2")

    out = run_worker(url, "modelplan")

    assert not marker.exists()
    assert [client.get(j).state for j in ("good-1", "good-2")] == [JobState.PLACED, JobState.PLACED]
    refused = [json.loads(line) for line in out.splitlines() if '"job_refused"' in line]
    assert sorted(e["rq_job_id"] for e in refused) == sorted(ids)  # each logged once, by id
    assert {e["func"] for e in refused} >= {"os.system", "subprocess.call", "builtins.eval"}
    admin = admin_client(tenants)
    assert admin.acl_log() == []  # the worker needed nothing past its role's rules
    left = dump(admin, "modelplan:rq:*")
    assert [k for k in left if k.startswith("modelplan:rq:job:")] == []  # refused jobs leave nothing
    assert admin.llen(client.keys.rq_queue) == 0
    assert sorted({k.split(":", 1)[0] for k in dump(admin)}) == ["modelplan"]
    admin.close()


def test_the_readme_acl_user_cannot_reach_rqs_shared_keys(tenants: int) -> None:
    """The old way in (RQ's default ``rq:queue:{name}``) is outside the role's rules."""
    r = redis.Redis.from_url(url_for(tenants, "modelplan"))
    with pytest.raises(redis.exceptions.NoPermissionError):
        r.rpush("rq:queue:modelplan", "evil")
    with pytest.raises(redis.exceptions.NoPermissionError):
        r.hset("rq:job:evil", "data", "[]")
    r.close()


def test_a_tenant_cannot_make_another_tenants_worker_do_anything(tenants: int, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    b = Client.from_url(url_for(tenants, "b"), prefix="tenantB")
    b.heartbeat(hb("nodeB", gpus=1))
    b.submit(request(), job_id="jobB")
    run_worker(url_for(tenants, "b"), "tenantB")
    placed = b.get("jobB")
    assert placed.state is JobState.PLACED

    admin = admin_client(tenants)
    before = dump(admin, "tenantB:*")
    a = redis.Redis.from_url(url_for(tenants, "a"))
    keys_b = Keys("tenantB")
    # B's queue, RQ's shared names, B's records: all outside A's login
    for attempt in (
        lambda: a.rpush(keys_b.rq_queue, "evil"),
        lambda: a.hset(keys_b.rq_job("evil"), "data", "[]"),
        lambda: a.rpush("rq:queue:tenantB", "evil"),
        lambda: a.set(keys_b.node("nodeB"), "{garbage"),
        lambda: a.publish("tenantB:rq:pubsub:any", "shutdown"),
        lambda: queue_class("tenantB")("tenantB", connection=a, serializer=JSONSerializer).enqueue("os.system", "x"),
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            attempt()
    # on its own queue, A can name B's prefix: its own worker refuses the job, and B's never sees it
    keys_a = Keys("tenantA")
    queue_a = queue_class("tenantA")("tenantA", connection=a, serializer=JSONSerializer)
    forged = queue_a.enqueue("worker.jobs.node_restarted", "tenantB", "nodeB", "forged").id
    attacks(a, keys_a, marker)
    out_a = run_worker(url_for(tenants, "a"), "tenantA")
    out_b = run_worker(url_for(tenants, "b"), "tenantB")

    assert not marker.exists()
    assert f'"rq_job_id": "{forged}"' in out_a and "not this worker's 'tenantA'" in out_a
    assert "job_refused" not in out_b
    after = b.get("jobB")
    assert (after.state, after.version, after.placement) == (JobState.PLACED, placed.version, placed.placement)
    changed = {k for k, v in dump(admin, "tenantB:*").items() if before.get(k) != v}
    # B's second run wrote only its own bookkeeping: its node's record and B's records are untouched
    assert {k for k in changed if not k.startswith("tenantB:rq:")} == set()
    assert sorted({k.split(":", 1)[0] for k in dump(admin)}) == ["tenantA", "tenantB"]
    assert admin.acl_log()[0]["username"] == "a"  # only A's attempts were denied
    assert {e["username"] for e in admin.acl_log()} == {"a"}
    a.close()
    admin.close()


def test_the_documentation_gives_the_rules_modelplan_acl_prints() -> None:
    """docs/SECURITY.md gives each role's rule as ``modelplan acl`` prints it, and the tenants above hold
    the worker's."""
    text = " ".join((ROOT / "docs" / "SECURITY.md").read_text(encoding="utf-8").split())
    k = Keys()
    for rule in (
        roles.operator_rule(k, "PASSWORD"),
        roles.worker_rule(k, "PASSWORD"),
        roles.agent_rule(k, "n1", "PASSWORD"),
        roles.relay_rule(k, "rack7", "rack7-*", "PASSWORD"),
        roles.client_rule(k, "svc-a", "PASSWORD"),
    ):
        assert rule in text, f"docs/SECURITY.md lacks: {rule[:60]}..."
    assert tenant_acl("tenantA") == roles.worker_rule(Keys("tenantA"), "x").split(" ", 4)[4]
