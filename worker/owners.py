"""Whose a job is, and how many replicas a client may ask for.

Redis does not record who appended a stream entry, so a job's owner is taken from where its submit was
written: an entry of ``client:{id}:requests``, a stream only client ``id``'s ACL user may append to, is
client ``id``'s. A job records it (``JobRecord.owner``), and from then on only entries of that stream may
release, cancel, scale or retry it, or submit its id again. The shared ``requests`` stream acts for no
client (``None``): it reaches the jobs submitted on it or by direct calls, never a client's. A direct call of the
Python client acts for anyone (``ANYONE``): it writes the records itself, so it is trusted with every job.

The quotas are the worker's settings (``MODELPLAN_MAX_REPLICAS`` for one job, ``MODELPLAN_CLIENT_REPLICAS``
for all of a client's live jobs together). A client's count lives in ``owned:{id}`` (job id -> replicas
counted), which every submit and scale of that client writes under ``WATCH``: two workers carrying out two
entries of one client at once cannot both pass on the same room. A job counts the larger of its field and
its record's ``wanted`` while it is not final, so that a scale under way is counted before and after.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from worker.config import CLIENT_REPLICAS_ENV, MAX_REPLICAS_ENV, client_replicas, max_replicas
from worker.errors import BadRecord, JobTaken, NotOwner, OverQuota
from worker.jobtext import read_job
from worker.records import JobRecord
from worker.scripts import text

if TYPE_CHECKING:
    from worker.store import Store


class Anyone(Enum):
    ANYONE = "anyone"


ANYONE = Anyone.ANYONE
"""Acting for no one in particular: a direct call, which may act on every job."""

Acting = str | None | Anyone
"""Whom a call acts for: a client id (an entry of that client's stream), None (an entry of the shared
stream) or ``ANYONE`` (a direct call)."""


def recorded(acting: Acting) -> str | None:
    """The owner a submit acting so records."""
    return acting if isinstance(acting, str) else None


def check(rec: JobRecord, acting: Acting) -> None:
    """``NotOwner`` unless a call acting so may change ``rec``."""
    if acting is not ANYONE and rec.owner != acting:
        raise NotOwner(rec.job_id)


def check_submit(rec: JobRecord, acting: Acting) -> None:
    """``JobTaken`` unless a submit acting so may name ``rec``'s id again."""
    if acting is not ANYONE and rec.owner != acting:
        raise JobTaken(rec.job_id)


@dataclass(frozen=True)
class Quotas:
    """A worker's bounds on what request-stream entries may ask for."""

    max_replicas: int
    client_replicas: int

    @classmethod
    def from_env(cls) -> Quotas:
        return cls(max_replicas(), client_replicas())

    def check_job(self, job_id: str, replicas: int) -> None:
        """``OverQuota`` for one job asking more than ``max_replicas``."""
        if replicas > self.max_replicas:
            problem = f"{replicas} replicas asked, past the {self.max_replicas} one job may have"
            raise OverQuota(job_id, MAX_REPLICAS_ENV, problem)


Admit = Callable[[Any], None]
"""Queues, on a transaction's pipeline, the write that counts a job's replicas against its client."""


class Owned:
    """One client's count of replicas, read and written inside a ``WATCH`` transaction of its caller
    (``operations.submit``, ``operations.reserve``)."""

    def __init__(self, store: Store, client_id: str, limit: int) -> None:
        self.store, self.client_id, self.limit = store, client_id, limit
        self.key = store.keys.owned(client_id)

    def admit(self, pipe: Any, job_id: str, replicas: int) -> Admit:
        """On ``pipe`` watching ``self.key`` (immediate mode): ``OverQuota`` if the client's other live jobs
        and ``replicas`` for ``job_id`` would pass the limit (asking no more than the job has is never
        refused: a lowered limit must not stop a client from shrinking); else what to queue after ``MULTI``."""
        counted = {text(j): _whole(n) for j, n in pipe.hgetall(self.key).items()}
        ids = sorted(counted)
        records = dict(zip(ids, self._records(pipe, ids), strict=True))
        live = {j: _counted(counted[j], rec) for j, rec in records.items() if rec is not None}
        used = sum(n for j, n in live.items() if j != job_id)
        if used + replicas > self.limit and replicas > live.get(job_id, 0):
            problem = (
                f"{replicas} replicas with the {used} this client's other live jobs want would pass the "
                f"{self.limit} one client may have"
            )
            raise OverQuota(job_id, CLIENT_REPLICAS_ENV, problem)
        dead = [j for j in ids if j not in live and j != job_id]

        def write(tx: Any) -> None:
            tx.hset(self.key, job_id, replicas)
            if dead:
                tx.hdel(self.key, *dead)

        return write

    def _records(self, pipe: Any, ids: list[str]) -> list[JobRecord | BadRecord | None]:
        """Each job's record, None once it is final or gone; one that does not parse counts as live."""
        if not ids:
            return []
        keys = [self.store.keys.job(j) for j in ids]
        out: list[JobRecord | BadRecord | None] = []
        for key, raw in zip(keys, pipe.mget(keys), strict=True):
            if raw is None:
                out.append(None)
                continue
            try:
                rec = read_job(raw, key)
            except BadRecord as e:
                out.append(e)
                continue
            out.append(None if rec.state.final else rec)
        return out

    def settle(self, job_id: str) -> None:
        """Count what ``job_id`` wants now that its scale is done (or refused): its record's ``wanted``."""
        rec = self.store.job(job_id)
        if rec is not None and rec.owner == self.client_id and not rec.state.final:
            self.store.redis.hset(self.key, job_id, rec.wanted)


def _whole(raw: Any) -> int:
    value = text(raw)
    return int(value) if value.isdigit() and len(value) < 7 else 0  # else the record's own count stands


def _counted(field: int, rec: JobRecord | BadRecord) -> int:
    return field if isinstance(rec, BadRecord) else max(field, rec.wanted)
