"""Reading afresh and trying again: a commit against a record's version (``transition.lua``) or a ``WATCH``
transaction that lost a race to another writer is tried again from a fresh read by this one helper,
``with_retries``, which every such loop uses (``worker.operations``, ``worker.scaling``, ``worker.moves``,
``worker.ended``)."""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import TypeVar

import redis

from worker import constants as C
from worker.errors import Contended

T = TypeVar("T")


class Again(Enum):
    """What an attempt returns when its commit lost a race: read again and try again."""

    AGAIN = "again"


AGAIN = Again.AGAIN


def with_retries(job_id: str, attempt: Callable[[], T | Again], attempts: int | None = C.PLAN_ATTEMPTS) -> T:
    """``attempt``'s answer, trying it again while it returns ``AGAIN`` or its ``WATCH`` fired
    (``redis.WatchError``): each try reads afresh what it commits against. ``Contended`` naming ``job_id``
    once ``attempts`` tries all lost their races; ``attempts=None`` tries until one wins (a transaction that
    another writer's progress is all that can stop)."""
    tried = 0
    while attempts is None or tried < attempts:
        tried += 1
        try:
            got = attempt()
        except redis.WatchError:
            continue
        if got is not AGAIN:
            return got
    raise Contended(job_id)
