"""A client acting through its own request stream, as a service limited to its own keys does.

``Client(..., client_id="svc-a")`` sends ``submit``, ``release``, ``cancel`` and ``scale`` as entries of
``client:svc-a:requests`` and waits for each answer on ``client:svc-a:replies`` (up to
``ANSWER_TIMEOUT_S``): the jobs it submits are its own (``JobRecord.owner``), and its ACL user needs no
write on any other key (``producer.clients.acl_rule``). A refusal is raised as the exception a direct call
raises for it (the answer names its kind), with the worker's reason as its message.
"""

from __future__ import annotations

import time
from typing import Any

import redis

from planner import InvalidInput, ModelplanError
from producer.constants import ANSWER_TIMEOUT_S
from producer.errors import NoAnswer, RequestRefused
from worker import constants as C
from worker.errors import (
    BadId,
    Contended,
    JobExists,
    JobNotFound,
    JobTaken,
    NotOwner,
    OverQuota,
    StillRunning,
    WrongState,
)
from worker.keys import Keys
from worker.scripts import text

ANSWERED: dict[str, type[ModelplanError]] = {
    cls.__name__: cls
    for cls in (
        JobNotFound,
        JobExists,
        JobTaken,
        NotOwner,
        WrongState,
        StillRunning,
        Contended,
        OverQuota,
        InvalidInput,
        BadId,
    )
}
"""The refusals a worker's answer may name, raised again as themselves; another is ``RequestRefused``."""


def refusal(answer: dict[str, str]) -> ModelplanError:
    """The exception a refused answer stands for, its message the worker's reason."""
    cls = ANSWERED.get(answer.get("error", ""), RequestRefused)
    reason = answer.get("reason", "")
    error = cls.__new__(cls)
    ModelplanError.__init__(error, reason)
    # the attributes callers read, as the direct call's exception has them
    vars(error).update(job_id=answer.get("job_id") or None, state=answer.get("state", ""))
    if isinstance(error, InvalidInput):
        vars(error).update(source="", field="", problem=reason)
    return error


class OwnStream:
    """One client's request stream and replies stream."""

    def __init__(self, client: redis.Redis, keys: Keys, client_id: str, timeout_s: float = ANSWER_TIMEOUT_S) -> None:
        self.redis = client
        self.requests = keys.client_requests(client_id)
        self.replies = keys.client_replies(client_id)
        self.timeout_s = timeout_s

    def ask(self, op: str, job_id: str, **fields: str) -> dict[str, str]:
        """Append an entry and wait for its answer: its fields when done, else the refusal raised."""
        # the replies stream's last id is read before the entry is appended (one round trip, no
        # transaction: the client's ACL user needs none), so no answer to it can come before it
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.xrevrange(self.replies, count=1)
            entry: dict[Any, Any] = {"op": op, "job_id": job_id, **fields}
            pipe.xadd(self.requests, entry)
            last_entries, added = pipe.execute()
        last = text(last_entries[0][0]) if last_entries else "0-0"
        entry_id = text(added)
        deadline = time.monotonic() + self.timeout_s
        while (left := deadline - time.monotonic()) > 0:
            block = max(1, int(min(left * 1000, C.WATCH_BLOCK_MS)))
            got: Any = self.redis.xread({self.replies: last}, count=100, block=block)
            for reply_id, raw in got[0][1] if got else ():
                last = text(reply_id)
                answer = {text(k): text(v) for k, v in raw.items()}
                if answer.get("request") == entry_id:
                    if answer.get("ok") != "true":
                        raise refusal(answer)
                    return answer
        raise NoAnswer(f"{op} {job_id}", self.requests, self.timeout_s)
