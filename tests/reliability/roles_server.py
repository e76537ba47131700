"""A redis-server whose logins are exactly the roles' rules (``producer.roles``): the operator, a worker,
agents of given nodes, a relay, clients; ``default`` off, and the tests' own admin beside them. The
operator loads modelplan's functions on it before a test starts."""

from __future__ import annotations

import shlex
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from producer import Client, roles
from producer.operator import setup_redis
from tests.redis_server import free_port
from tests.reliability.sec_servers import ADMIN_PASSWORD, _base, _ping, _process, admin_client
from worker.keys import Keys

PASSWORD = "role-pass-7Hq"


@dataclass
class Roles:
    """The server's port and the users on it (role, name) -> ACL user name."""

    port: int
    users: dict[tuple[str, str], str] = field(default_factory=dict)

    def url(self, role: str, name: str = "") -> str:
        return f"redis://{self.users[role, name]}:{PASSWORD}@127.0.0.1:{self.port}/0"

    def client(self, role: str, name: str = "", client_id: str | None = None) -> Client:
        return Client.from_url(self.url(role, name), client_id=client_id)

    def admin(self) -> redis.Redis:
        return admin_client(self.port)

    def refusals(self) -> list[dict[str, Any]]:
        """The server's ACL LOG, newest first: every command a login was refused."""
        admin = self.admin()
        try:
            entries: list[dict[str, Any]] = admin.acl_log()
            return entries
        finally:
            admin.close()


def rules(keys: Keys, agents: tuple[str, ...], relays: dict[str, str], clients: tuple[str, ...]) -> list[str]:
    lines = [roles.operator_rule(keys, PASSWORD, "rq"), roles.worker_rule(keys, PASSWORD, "rq")]
    lines += [roles.agent_rule(keys, n, PASSWORD) for n in agents]
    lines += [roles.relay_rule(keys, name, nodes, PASSWORD) for name, nodes in relays.items()]
    lines += [roles.client_rule(keys, c, PASSWORD) for c in clients]
    return lines


@contextmanager
def roles_server(
    agents: tuple[str, ...] = ("n1", "n2"),
    relays: dict[str, str] | None = None,
    clients: tuple[str, ...] = ("svc-a", "svc-b"),
) -> Iterator[Roles]:
    """A server with a login for each role (the in-process workers keep RQ's bookkeeping under ``rq``),
    modelplan's functions loaded by the operator, and the clients registered."""
    keys = Keys()
    relays = relays or {}
    folder = Path(tempfile.mkdtemp(prefix="modelplan-roles-"))
    port = free_port()
    args = [*_base(port, folder)]
    found = Roles(port)
    for line in rules(keys, agents, relays, clients):
        words = shlex.split(line)
        args += ["--user", *words[1:]]
    for n in agents:
        found.users["agent", n] = roles.user_name(keys, "agent", n)
    for name in relays:
        found.users["relay", name] = roles.user_name(keys, "relay", name)
    for c in clients:
        found.users["client", c] = roles.user_name(keys, "client", c)
    found.users["worker", ""] = roles.user_name(keys, "worker")
    found.users["operator", ""] = roles.user_name(keys, "operator")
    args += ["--user", "admin", "on", f">{ADMIN_PASSWORD}", "~*", "&*", "+@all", "--user", "default", "off"]
    admin = admin_client(port)
    try:
        with _process(args, folder, _ping(admin), "redis-roles"):
            operator = found.client("operator")
            setup_redis(operator.redis, operator.keys)
            for c in clients:
                operator.redis.sadd(keys.clients, c)
            operator.redis.close()
            yield found
    finally:
        admin.close()
        shutil.rmtree(folder, ignore_errors=True)
