"""Who may do what in Redis: the ACL rule of each role, built from the keys it needs and no more.

=========  =====================================================================================
role       what its login may do
=========  =====================================================================================
operator   load modelplan's functions, set ACL users, register clients; every key of the prefix
worker     every key of the prefix (and RQ's), FCALL of modelplan's functions, the keyspace
           notifications of node and conflict records; no EVAL, no SCRIPT
agent      one node: its record, its boots, conflict and beat keys; read its holds and the job
           records; FCALL; no other key, no channel, no EVAL, no SCRIPT
relay      as an agent, for every node whose id matches its pattern (``rack7-*``)
client     append to its own request stream, read its replies, job records and which workers run
=========  =====================================================================================

An agent's heartbeat is written by the heartbeat function, which Redis runs with the caller's rights: the
key patterns of the agent's own node are what stop it from writing another node's record, even through
the function, and it writes nothing else. What a heartbeat means to the pool (the change feed, the index
of nodes, the epoch, wake-ups, restarts, conflicts, counters) is written by the workers' intake, rung by
the server's keyspace notifications (``worker.intake``), so no key another node or a worker reads as
shared is an agent's to write (see ``docs/THREAT-MODEL.md``). Pure: nothing here talks to Redis.
"""

from __future__ import annotations

import hashlib
import re
import secrets

from worker.ids import ID_PATTERN, check_id
from worker.keys import Keys

ROLES = ("operator", "worker", "agent", "relay", "client")

SCRIPTING = ("fcall",)
"""How every role but the operator runs modelplan's Lua: the functions the operator loaded, never a
script of its own (``EVAL``, ``SCRIPT LOAD``) that could hold the server for every tenant."""

WORKER_COMMANDS = (
    "ping", "info", "client|setname", "client|info", "multi", "exec", "discard", "watch", "unwatch",
    "get", "set", "mget", "del", "exists", "expire", "persist", "incr", "incrby", "type", "pttl", "time",
    "hget", "hset", "hdel", "hgetall", "hkeys", "hmget", "hlen", "hexists", "hincrby", "hincrbyfloat",
    "lpush", "rpush", "lpop", "lrange", "lrem", "llen", "lpos", "lmove", "blmove", "blpop",
    "sadd", "srem", "spop", "smembers", "scard", "sismember",
    "zadd", "zrem", "zcard", "zscore", "zrange", "zrevrange", "zrangebyscore", "zremrangebyscore",
    "zremrangebyrank",
    "xadd", "xlen", "xread", "xrevrange", "xrange", "xreadgroup", "xack", "xdel", "xpending", "xclaim",
    "xgroup|create", "xgroup|delconsumer", "xinfo|stream",
    "rename", "subscribe", "unsubscribe", "psubscribe", "punsubscribe", "publish", "wait",
    "scan", "strlen",
)  # fmt: skip
"""What a worker sends, itself, through RQ, and inside the functions it calls (which Redis checks against
the caller's rules too)."""

AGENT_COMMANDS = (
    "ping", "client|setname", "get", "mget", "set", "del", "exists", "time", "hgetall", "hget", "hlen",
    "hset", "hstrlen", "strlen", "pexpire", "pttl", "type",
)  # fmt: skip
"""What an agent's heartbeat function runs (as the agent), and what the agent reads: its node's holds and
the records of the jobs placed there."""

CLIENT_COMMANDS = ("ping", "get", "mget", "smembers", "xadd", "xread", "xrange", "xrevrange")
"""What a client's user runs: XADD its entries, XREAD and XREVRANGE its replies, GET a job's record and
XREAD, XRANGE or XREVRANGE its stream (``Client.get``, ``Client.watch``), SMEMBERS and MGET the workers'
registrations (``Client.workers_alive``), PING (a connection's health check)."""

OPERATOR_EXTRA = (
    "function|load", "function|delete", "function|list", "sunionstore", "acl|setuser", "acl|log", "acl|list",
    "config|get", "config|set",
)  # fmt: skip
"""What the operator runs beyond a worker: ``modelplan setup-redis`` (load the library, turn on the keyspace
notifications the workers' intake needs, move an older version's index) and ``modelplan acl --apply``, and
reading what the ACL refused (``modelplan status``)."""

NODE_PATTERN = re.compile(ID_PATTERN.pattern.removesuffix("}") + r"}\*?|\*")
"""A relay's nodes: an id, an id's beginning followed by ``*``, or ``*`` alone (every node)."""


def user_name(keys: Keys, role: str, name: str = "") -> str:
    """The ACL user a role logs in as: the prefix, the role and its node, relay or client, so that no id
    names another deployment's user or another role's."""
    if role not in ROLES:
        raise ValueError(f"role {role!r} is not one of {', '.join(ROLES)}")
    return f"{keys.prefix}.{role}" + (f".{name}" if name else "")


def new_password() -> str:
    return secrets.token_urlsafe(24)


def check_password(password: str) -> str:
    """``password``, where a rule line can hold it: not empty, no space and no control character (an ACL
    file splits its lines at spaces); else ``ValueError``, which does not quote it."""
    if not password or any(c.isspace() or not c.isprintable() for c in password):
        raise ValueError("a password holds no space or control character, which an ACL rule line cannot hold")
    return password


def hashed(rule: str, password: str) -> str:
    """``rule`` naming its password by SHA-256 (``#`` and 64 hex digits), which Redis takes as it takes
    ``>password``: a rule to print, save or hand on without the password in it."""
    digest = hashlib.sha256(password.encode()).hexdigest()
    return rule.replace(f" on >{password} ", f" on #{digest} ", 1)


def _rule(user: str, password: str, commands: tuple[str, ...], patterns: list[str], channels: str = "") -> str:
    allowed = " ".join(f"+{c}" for c in commands)
    return f"user {user} on >{password} resetchannels {channels}resetkeys -@all {allowed} {' '.join(patterns)}"


def worker_rule(keys: Keys, password: str, rq_prefix: str = "") -> str:
    """A worker's login: every key of the prefix, RQ's keys under ``rq_prefix`` (``RQ_KEY_PREFIX``,
    ``{prefix}:rq`` by default, which the prefix's pattern covers), its command channels, and the keyspace
    notifications its intake listens to (the node and conflict records' patterns as it subscribes to them:
    Redis grants a pattern subscription only to a pattern the rule spells alike; its own probe key's)."""
    rq = rq_prefix or f"{keys.prefix}:rq"
    patterns = [f"~{keys.prefix}:*"] + ([] if rq.startswith(keys.prefix + ":") else [f"~{rq}:*"])
    user = user_name(keys, "worker")
    channels = [f"{rq}:pubsub:*", *keys.keyspace_patterns(), keys.probe_channels]
    return _rule(user, password, WORKER_COMMANDS + SCRIPTING, patterns, "".join(f"&{c} " for c in channels))


def _node_patterns(keys: Keys, nodes: str) -> list[str]:
    p = keys.prefix
    return [
        f"~{p}:node:{nodes}",
        f"~{p}:boots:{nodes}",
        f"~{p}:conflict:{nodes}",
        f"~{p}:beat:{nodes}",
        f"%R~{p}:held:{nodes}",
        f"%R~{p}:job:*",
    ]


def _heartbeat_selector(keys: Keys, nodes: str) -> str:
    """A selector for FCALL alone, naming the heartbeat function's keys with the node's ``held`` among them.
    Redis checks each key handed to FCALL as one the function may both read and write, so the read-only
    ``held`` pattern above refuses the call; here it is writable, for FCALL alone. Every command the
    function runs is checked again, against the rules above (where ``held`` is read-only) or this selector
    (which allows no command but FCALL): the agent still cannot write ``held``, through a function or not."""
    patterns = [p.replace("%R~", "~", 1) for p in _node_patterns(keys, nodes) if not p.endswith(":job:*")]
    return "(" + " ".join(patterns) + " +fcall)"


def agent_rule(keys: Keys, node_id: str, password: str) -> str:
    """One node's agent: that node's keys alone, and reading what runs there."""
    check_id(node_id, "node_id")
    user = user_name(keys, "agent", node_id)
    rule = _rule(user, password, AGENT_COMMANDS + SCRIPTING, _node_patterns(keys, node_id))
    return rule + " " + _heartbeat_selector(keys, node_id)


def relay_rule(keys: Keys, name: str, nodes: str, password: str) -> str:
    """A relay, forwarding the heartbeats of every node whose id matches ``nodes`` (``rack7-*``)."""
    check_id(name, "relay name")
    if not NODE_PATTERN.fullmatch(nodes):
        raise ValueError(f"nodes {nodes!r}: give a node id, an id's beginning and *, or *")
    user = user_name(keys, "relay", name)
    rule = _rule(user, password, AGENT_COMMANDS + SCRIPTING, _node_patterns(keys, nodes))
    return rule + " " + _heartbeat_selector(keys, nodes)


def client_rule(keys: Keys, client_id: str, password: str) -> str:
    """A client's login: of modelplan's keys it may write only its own ``client:{id}:*`` (its request
    stream, and its replies, which it reads), and read job records and their streams, and which workers
    run (``workers``, ``worker:*``)."""
    user = user_name(keys, "client", client_id)
    reads = [keys.job_pattern, keys.workers, keys.worker_pattern]
    return _rule(user, password, CLIENT_COMMANDS, [f"~{keys.client_pattern(client_id)}", *(f"%R~{p}" for p in reads)])


def operator_rule(keys: Keys, password: str, rq_prefix: str = "") -> str:
    """The operator's login: a worker's rights, and loading functions and setting ACL users."""
    rule = worker_rule(keys, password, rq_prefix).replace(user_name(keys, "worker"), user_name(keys, "operator"), 1)
    return rule + " " + " ".join(f"+{c}" for c in OPERATOR_EXTRA)
