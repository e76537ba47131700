"""The ids that go into modelplan's keys and the fields of its hashes: jobs, nodes, clients, holds; each
checked where a key is made (``worker.keys``), so that no id can reach outside its own key."""

from __future__ import annotations

import re

from worker.errors import BadId

ID_MAX = 128
ID_PATTERN = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{ID_MAX - 1}}}")
"""Job and node ids: letters, digits, ``.``, ``_``, ``-``. No ``:``, ``*``, space or newline, so an id can
never reach outside its own key."""

HOLD_PATTERN = re.compile(ID_PATTERN.pattern + r"(:\d+:\d+|:nominated)")
"""Hold ids, the fields of ``held:{node}``: a job id, then ``:{replica}:{version}`` for a reservation or
``:nominated`` for a nomination. ``:`` never occurs in a job id, so the parts split cleanly."""

NOMINATED = "nominated"

CLIENT_ID_MAX = 64
"""Client ids are ids of at most this many characters, so that a job an entry of a client's stream names
after itself (``r-{client_id}-{entry id}``, ``worker.requests``) still has an id."""


def check_id(value: str, what: str) -> str:
    if not isinstance(value, str) or not ID_PATTERN.fullmatch(value):
        raise BadId(what, value)
    return value


def check_client_id(value: str, what: str = "client_id") -> str:
    if not isinstance(value, str) or not ID_PATTERN.fullmatch(value) or len(value) > CLIENT_ID_MAX:
        raise BadId(what, value, CLIENT_ID_MAX)
    return value


def hold_id(job_id: str, replica: int, version: int) -> str:
    """The id of a replica's reservation placed at a job version: new whenever the replica is placed."""
    return f"{check_id(job_id, 'job_id')}:{replica}:{version}"


def planning_job_id(job_id: str) -> str:
    """The RQ job id of a serve job's planning job: fixed, so that the sweep can tell whether it is still on
    the queue. RQ ids take letters, digits, ``_`` and ``-``, so the id is written in hex."""
    return "plan-" + check_id(job_id, "job_id").encode().hex()


def nomination_id(job_id: str) -> str:
    return f"{check_id(job_id, 'job_id')}:{NOMINATED}"


def job_of_hold(hold: str) -> str:
    return hold.split(":", 1)[0]
