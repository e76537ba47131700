"""Where RQ keeps a worker's own bookkeeping, and whether the worker's login may use it.

RQ names its worker registrations, registries of started and failed jobs and each worker's command
channel from ``RQ_KEY_PREFIX``, an environment variable it reads once, as it is imported (``rq`` unless
set). The worker role's rules (``modelplan acl worker``) grant those under ``{prefix}:rq``, inside the
prefix, so a worker on that login runs with ``RQ_KEY_PREFIX={prefix}:rq``.

The worker does not set it for itself: RQ is imported, and its prefix fixed, before the command line is
read, and a deployment may keep RQ's default on purpose (rules made with ``--rq-prefix rq``), which a
worker cannot tell from a forgotten setting. Instead it checks at start-up, before it writes anything,
that its login may use RQ's keys and channels under the prefix RQ has; where it may not, it stops with one
line naming the setting (``RqPrefixRefused``), where RQ would have stopped it with a traceback.
"""

from __future__ import annotations

import redis
from rq.defaults import RQ_KEY_PREFIX

from planner.errors import ModelplanError
from worker.errors import RedisForbidden
from worker.keys import Keys

PROBE = "modelplan-start-check"
"""The name the check gives RQ's keys and channel: no worker is named so (``runner.worker_name`` names
one by host, pid and a random tail), so the probe's message reaches no one."""


def expected(keys: Keys) -> str:
    """The ``RQ_KEY_PREFIX`` the worker role's rules grant by default: RQ's keys under the prefix."""
    return f"{keys.prefix}:rq"


class RqPrefixRefused(RedisForbidden):
    """The worker's login may not use RQ's keys or channel under ``RQ_KEY_PREFIX``: said with what to set."""

    def __init__(self, url: str, cause: BaseException, keys: Keys, rq_prefix: str) -> None:
        self.url, self.cause = url, cause
        want = expected(keys)
        where = f"Redis at {url}" if url else "Redis"
        said = f"{where} refused RQ's keys under {rq_prefix!r} (RQ_KEY_PREFIX, 'rq' unless set)"
        if rq_prefix != want:
            said += (
                f": start the worker with RQ_KEY_PREFIX={want}, which `modelplan acl worker` grants, or give "
                f"its user the rules of `modelplan acl worker --rq-prefix {rq_prefix}`"
            )
        else:
            said += (
                f": its user's rules were made for another RQ prefix or key prefix; set them again with "
                f"`modelplan acl worker --apply` (prefix {keys.prefix})"
            )
        ModelplanError.__init__(self, said)


def check(r: redis.Redis, keys: Keys, url: str = "", rq_prefix: str = RQ_KEY_PREFIX) -> None:
    """Raise ``RqPrefixRefused`` unless ``r``'s login may read RQ's keys and publish on RQ's channels under
    ``rq_prefix``, as a worker's RQ does from its first step. Writes nothing: an ``EXISTS`` and a
    ``PUBLISH`` that no one hears. ``url``: shown, redacted, in the message."""
    try:
        with r.pipeline(transaction=False) as pipe:
            pipe.exists(f"{rq_prefix}:worker:{PROBE}")
            pipe.publish(f"{rq_prefix}:pubsub:{PROBE}", "")
            pipe.execute()
    except redis.exceptions.NoPermissionError as e:
        raise RqPrefixRefused(url, e, keys, rq_prefix) from e
