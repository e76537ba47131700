"""The operator's side of registered clients: ``modelplan client add|remove CLIENT_ID``.

A client registered here drives its jobs through its own request stream (``client:{id}:requests``), and
the workers read that stream because the id is a member of ``clients``. What makes the entries that
client's is the ACL rule ``acl_rule`` prints: of modelplan's keys its user may write only its own
``client:{id}:*`` (its request stream, and its replies, which it reads), and it may read job records and
their streams (``%R~``, Redis 7's read-only key patterns), nothing else. So no other login but the
operator's and the workers' can append to its stream, and the client cannot write anything a worker
trusts: not another client's stream or replies, not a record, not its own count of replicas.
"""

from __future__ import annotations

import argparse
import sys

import redis

from producer import roles
from worker.ids import check_client_id
from worker.keys import Keys


def acl_user(keys: Keys, client_id: str) -> str:
    """The ACL user name a client logs in as (``roles.user_name``)."""
    return roles.user_name(keys, "client", check_client_id(client_id))


def acl_rule(keys: Keys, client_id: str, password: str = "PASSWORD") -> str:
    """The line an ACL file takes for a client's user (``password``: write its own in place of the word)."""
    return roles.client_rule(keys, client_id, password)


def add(r: redis.Redis, keys: Keys, client_id: str) -> bool:
    """Register a client: workers read its stream within ``CLIENTS_REFRESH_S``. False if it already was."""
    return bool(r.sadd(keys.clients, check_client_id(client_id)))


def remove(r: redis.Redis, keys: Keys, client_id: str) -> bool:
    """Stop reading a client's stream, and drop its streams (entries not carried out are dropped with
    them). Its jobs run on; its ACL user is the operator's to remove. False if it was not registered."""
    check_client_id(client_id)
    with r.pipeline(transaction=True) as pipe:
        pipe.srem(keys.clients, client_id)
        pipe.delete(keys.client_requests(client_id), keys.client_replies(client_id))
        removed, _ = pipe.execute()
    return bool(removed)


def add_arguments(p: argparse.ArgumentParser, parents: list[argparse.ArgumentParser]) -> None:
    sub = p.add_subparsers(dest="client_command", required=True)
    for name, text in (
        ("add", "register a client; prints the ACL rule its user needs (standard output)"),
        ("remove", "stop reading a client's request stream and drop it"),
    ):
        q = sub.add_parser(name, parents=parents, help=text)
        q.add_argument("client_id", metavar="CLIENT_ID", help="letters, digits, . _ - (up to 128)")


def run_from_args(args: argparse.Namespace) -> int:
    """``modelplan client add|remove``: what was done on standard error, the ACL rule alone on standard
    output, for an ACL file."""
    from producer.client import Client

    client = Client.from_url(args.redis_url, args.prefix)
    keys, client_id = client.keys, check_client_id(args.client_id)
    if args.client_command == "add":
        added = client._call(lambda: add(client.redis, keys, client_id))
        print(acl_rule(keys, client_id))
        said = "registered" if added else "was registered already"
        print(f"{client_id} {said}; its user's rule is above: set its password in place of PASSWORD", file=sys.stderr)
        return 0
    removed = client._call(lambda: remove(client.redis, keys, client_id))
    if removed:
        print(f"{client_id} removed; remove its ACL user {acl_user(keys, client_id)} too", file=sys.stderr)
    else:
        print(f"{client_id} was not registered; nothing changed", file=sys.stderr)
    return 0
