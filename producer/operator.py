"""The operator's commands: ``modelplan setup-redis`` (load modelplan's functions, once per version) and
``modelplan acl ROLE`` (print, or set, the ACL user of a worker, a node's agent, a relay, a client or the
operator). See ``producer.roles`` for what each role may do, and ``docs/SECURITY.md``."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import Any

import redis

from planner.errors import InvalidInput
from producer import roles
from worker import config
from worker.constants import DEFAULT_PREFIX, DEFAULT_REDIS_URL, NOTIFY_FLAGS
from worker.keys import Keys
from worker.login import PASSWORD_FILE_ENV, as_user, read_password
from worker.scripts import LIBRARY_PREFIX, load_library
from worker.scripts import text as as_text


def notify_flags(current: str) -> str:
    """``notify-keyspace-events`` with the flags the workers' intake needs (``NOTIFY_FLAGS``) added to
    ``current``, whose flags are all kept (``A`` stands for every event class, ``$`` and ``x`` among them)."""
    have = set(current)
    missing = [f for f in NOTIFY_FLAGS if f not in have and not (f in "$x" and "A" in have)]
    return current + "".join(missing)


def setup_redis(r: redis.Redis, keys: Keys, *, prune: bool = False) -> dict[str, Any]:
    """Load this version's functions library; turn on the keyspace notifications the workers' intake needs
    (keeping every flag already set); move an older version's index of nodes with holds to its current
    key; with ``prune``, delete every other version's library. What was done."""
    name = load_library(r)
    done: dict[str, Any] = {"library": name, "pruned": []}
    current = as_text(r.config_get("notify-keyspace-events").get("notify-keyspace-events", ""))
    wanted = notify_flags(current)
    if wanted != current:
        r.config_set("notify-keyspace-events", wanted)
    done["notify_keyspace_events"] = as_text(
        r.config_get("notify-keyspace-events").get("notify-keyspace-events", wanted)
    )
    old = f"{keys.prefix}:held:nodes"
    # an older version kept the index of nodes with holds there, where a node named nodes kept its holds
    if as_text(r.type(old)) == "set":
        with r.pipeline(transaction=True) as pipe:
            pipe.sunionstore(keys.held_nodes, [keys.held_nodes, old])
            pipe.delete(old)
            pipe.execute()
        done["moved"] = f"{old} -> {keys.held_nodes}"
    if prune:
        for lib in r.function_list():
            fields = dict(zip(lib[::2], lib[1::2], strict=True)) if isinstance(lib, list) else lib
            other = as_text(fields.get(b"library_name", fields.get("library_name", "")))
            if other.startswith(LIBRARY_PREFIX) and other != name:
                r.function_delete(other)
                done["pruned"].append(other)
    return done


def rule_for(keys: Keys, args: argparse.Namespace, password: str) -> str:
    role, name = args.role, args.name or ""
    needs_name = role in ("agent", "relay", "client")
    if needs_name and not name:
        raise ValueError(f"modelplan acl {role} needs the {'node id' if role == 'agent' else role + ' name'}")
    if not needs_name and name:
        raise ValueError(f"modelplan acl {role} takes no name (given {name!r})")
    rq = args.rq_prefix or os.environ.get("RQ_KEY_PREFIX", "")
    if role == "worker":
        return roles.worker_rule(keys, password, rq)
    if role == "operator":
        return roles.operator_rule(keys, password, rq)
    if role == "agent":
        return roles.agent_rule(keys, name, password)
    if role == "relay":
        if not args.nodes:
            raise ValueError("modelplan acl relay needs --nodes (a node id, or an id's beginning and *)")
        return roles.relay_rule(keys, name, args.nodes, password)
    return roles.client_rule(keys, name, password)


def apply_rule(r: redis.Redis, rule: str) -> None:
    """Set the user a rule line describes on the server (``ACL SETUSER``): from the operator's login."""
    words = shlex.split(rule)
    r.execute_command("ACL", "SETUSER", words[1], "reset", *words[2:])  # type: ignore[no-untyped-call]


NO_ACL_FILE = "not configured to use an ACL file"
"""What Redis answers ``ACL SAVE`` with on a server started without ``aclfile``."""


def save_users(r: redis.Redis) -> None:
    """Write the server's users to its ACL file (``ACL SAVE``), which a restart reads back; users set by
    ``ACL SETUSER`` alone are gone with the server's next start. A server with no ACL file is a
    ``ValueError`` that says how to give it one."""
    try:
        r.execute_command("ACL", "SAVE")  # type: ignore[no-untyped-call]
    except redis.ResponseError as e:
        if NO_ACL_FILE in str(e):
            raise ValueError(
                "--save: the server keeps no ACL file, so its users last until it stops: start it with "
                "--aclfile FILE (a file that exists), or save its users another way (CONFIG REWRITE)"
            ) from None
        raise


def add_arguments(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "setup-redis", parents=parents, help="operator: load modelplan's functions on the server (once per version)"
    )
    p.add_argument("--prune", action="store_true", help="also delete older versions' function libraries")
    p.set_defaults(func=cmd_setup_redis)

    p = sub.add_parser("acl", parents=parents, help="operator: the ACL user of a role (printed, or set with --apply)")
    p.add_argument("role", choices=roles.ROLES, help="whose rule: " + ", ".join(roles.ROLES))
    p.add_argument("name", nargs="?", help="agent: the node id; relay: its name; client: the client id")
    p.add_argument("--nodes", help="relay: the nodes it speaks for: a node id, or an id's beginning and *")
    p.add_argument(
        "--password-file",
        metavar="FILE",
        help="keep the user's password in FILE: the one there, else a new random one written there (mode 0600); "
        "the rule then names it by its SHA-256, and the environment of the role's processes is printed",
    )
    p.add_argument("--password", help="the user's password (ps shows it: prefer --password-file)")
    p.add_argument("--rq-prefix", help="worker, operator: RQ_KEY_PREFIX of the workers (default {prefix}:rq)")
    p.add_argument("--apply", action="store_true", help="set the user on the server now (ACL SETUSER)")
    p.add_argument(
        "--save",
        action="store_true",
        help="with --apply: write the server's users to its ACL file (ACL SAVE), so that a restart keeps them",
    )
    p.set_defaults(func=cmd_acl)


def _client(args: argparse.Namespace) -> Any:
    from producer.client import Client

    return Client.from_url(args.redis_url, args.prefix)


def cmd_setup_redis(args: argparse.Namespace) -> int:
    client = _client(args)
    done = client._call(lambda: setup_redis(client.redis, client.keys, prune=args.prune))
    print(f"functions library {done['library']} loaded", file=sys.stderr)
    print(f"notify-keyspace-events is {done['notify_keyspace_events']!r}", file=sys.stderr)
    for line in [done.get("moved")] + [f"deleted {lib}" for lib in done["pruned"]]:
        if line:
            print(line, file=sys.stderr)
    return 0


def cmd_acl(args: argparse.Namespace) -> int:
    keys = Keys(config.prefix(args.prefix))
    if args.password is not None:
        print(f"modelplan acl: warning: {PASSWORD_ON_COMMAND_LINE}", file=sys.stderr)
    try:
        if args.password is not None and args.password_file:
            raise ValueError("give --password-file or --password, not both")
        if args.password_file:
            password, new = _password(args.password_file)
        else:
            password, new = (roles.new_password() if args.password is None else args.password), False
        rule = rule_for(keys, args, roles.check_password(password))
    except ValueError as e:
        print(f"modelplan acl: {e}", file=sys.stderr)
        return 2
    user = shlex.split(rule)[1]
    if args.password_file:
        if new:
            _write_password(args.password_file, password)
        rule = roles.hashed(rule, password)
    print(rule)
    if args.save and not args.apply:
        print("modelplan acl: --save goes with --apply (it saves what --apply set)", file=sys.stderr)
        return 2
    if args.apply:
        client = _client(args)
        client._call(lambda: apply_rule(client.redis, rule))
        print(f"# user {user} set on the server", file=sys.stderr)
        if args.save:
            try:
                client._call(lambda: save_users(client.redis))
            except ValueError as e:
                print(f"modelplan acl: {e}", file=sys.stderr)
                return 2
            print("# the server's users saved to its ACL file", file=sys.stderr)
    if args.password_file:
        print(
            f"# the environment of {user}'s processes (with the password file, readable by them alone):",
            file=sys.stderr,
        )
        for line in handover(keys, args, user):
            print(line, file=sys.stderr)
    return 0


PASSWORD_ON_COMMAND_LINE = (
    "--password puts the password on the command line, which every user of this host can read while it runs; "
    "--password-file FILE keeps it in a file instead"
)


def _password(path: str) -> tuple[str, bool]:
    """The password in the file at ``path``, and False; where there is no file, a new one and True."""
    if not os.path.lexists(path):
        return roles.new_password(), True
    password = read_password(path, "--password-file")
    try:
        return roles.check_password(password), False
    except ValueError as e:
        raise ValueError(f"--password-file {path}: {e}") from None


def _write_password(path: str, password: str) -> None:
    """Write a new password file, readable and writable by its owner alone, never over an existing file."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as e:
        raise InvalidInput("--password-file", path, f"cannot be written ({e.strerror or e})") from None
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(password + "\n")


def handover(keys: Keys, args: argparse.Namespace, user: str) -> list[str]:
    """The environment a role's processes log in with (``NAME=value``, an environment file's lines): the
    operator's URL with the role's user and no password, the password file, and what else the role needs."""
    url = args.redis_url or os.environ.get(config.REDIS_URL_ENV) or DEFAULT_REDIS_URL
    lines = [
        f"{config.REDIS_URL_ENV}={as_user(url, user)}",
        f"{PASSWORD_FILE_ENV}={os.path.abspath(args.password_file)}",
    ]
    if keys.prefix != DEFAULT_PREFIX:
        lines.append(f"{config.PREFIX_ENV}={keys.prefix}")
    if args.role in ("worker", "operator"):
        rq = args.rq_prefix or os.environ.get("RQ_KEY_PREFIX") or f"{keys.prefix}:rq"
        lines.append(f"RQ_KEY_PREFIX={rq}")
    if args.role == "client":
        lines.append(f"{config.CLIENT_ID_ENV}={args.name}")
    if args.role == "agent":
        lines.append(f"# and the agent runs with --node-id {args.name} (default: the host name)")
    return lines
