"""The request streams: what a service in any language asks of modelplan, with ``XADD`` alone.

A client appends an entry of string fields to its own stream ``{prefix}:client:{id}:requests``
(``Keys.client_requests``; the operator registers ``id`` with ``modelplan client add``), or, a trusted
service, to the shared ``{prefix}:requests`` (``Keys.requests``)::

    op        submit | release | cancel | scale | retry
    job_id    the job's id (for submit optional: without one the job is named after the entry: r-{entry id},
              on a client's stream r-{client id}-{entry id})
    request   submit: the serve request as JSON, as the Python client takes it (``modelplan schema request``)
    replicas  scale: the number of replicas wanted
    reply_to  shared stream only, optional: a name; the answer is appended to ``{prefix}:reply:{name}``

Redis does not say who appended an entry, only where: a client's own stream is one only its ACL user may
append to, so its entries act for that client (``worker.owners``). A job submitted there is that
client's (``JobRecord.owner``), and only its entries may release, cancel, scale or retry it, or submit
its id again; the shared stream reaches only the jobs no client owns. Each client's entries are answered on its
own ``client:{id}:replies`` (an entry naming ``reply_to`` there is refused, so that no entry can make a
worker write another client's replies), the shared stream's on the ``reply:{name}`` an entry names. A
refusal is written nowhere else, above all not on the job's own stream, which every client may read and
a watcher takes for the job's state: without a reply stream it is only logged (``request_refused``).
Submits and scales are bounded by the worker's quotas (``MODELPLAN_MAX_REPLICAS`` a job,
``MODELPLAN_CLIENT_REPLICAS`` a client's live jobs).

Workers read every stream as the consumer group ``workers`` (``worker.streams``) and carry each entry
out through ``worker.operations``, as the Python client carries out its calls: one record and one queue
entry, and the same job id twice is one job. Then they acknowledge it and delete it. The reason a refusal
is answered with is the line the CLI prints for the same refusal. A refused entry stores nothing else.

An entry a worker took and never acknowledged (it died) is taken by another after
``REQUEST_CLAIM_IDLE_MS``; one handed out ``REQUEST_MAX_DELIVERIES`` times is answered as refused. Entries
are carried out in order by one worker, not across workers: send a job's next operation once its last
one has been answered (its stream or the reply).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import redis

from planner import InvalidInput, ModelplanError
from worker import constants as C
from worker import logs, retry
from worker.errors import NotReplicated, RedisForbidden, RedisUnavailable, WrongState
from worker.ids import check_id
from worker.keys import Keys
from worker.mirrored import MirroredStore
from worker.operations import Operations
from worker.owners import Owned, Quotas
from worker.records import JobRecord, JobState, ServeRequest, parse_request
from worker.scripts import text
from worker.streams import Source, Streams

log = logs.get_logger("modelplan.requests")

OPS = ("submit", "release", "cancel", "scale", "retry")
FIELDS = ("op", "job_id", "request", "replicas", "reply_to")
SOURCE = "request entry"

FAULT_PAUSE_ENV = "MODELPLAN_FAULT_PAUSE_AFTER_READ_S"
"""Fault injection for tests: a worker pauses this long after taking entries off the request stream and
before carrying them out, so that a test can kill it holding them. Unset in production."""

_DONE_STATE = {"release": JobState.RELEASED, "cancel": JobState.CANCELLED}
"""The state a release or cancel leaves: asked again of a job already there, it is answered as done (an
entry carried out and then handed out again after its worker died is one operation)."""


@dataclass(frozen=True)
class Entry:
    """One entry of the request stream, validated."""

    op: str
    job_id: str | None
    request: ServeRequest | None = None
    replicas: int | None = None


@dataclass(frozen=True)
class Answer:
    ok: bool
    job_id: str | None
    reason: str
    state: str = ""
    version: int = 0
    error: str = ""
    """A refusal's kind: the name of the exception the Python client raises for it."""


def _field(fields: dict[str, str], name: str, problem: str) -> str:
    value = fields.get(name)
    if value is None:
        raise InvalidInput(SOURCE, name, problem)
    return value


def decode(fields: dict[Any, Any]) -> dict[str, str]:
    """An entry's fields as text, within ``REQUEST_MAX_BYTES`` and with no field but ``FIELDS``."""
    size = sum(len(k) + len(v) for k, v in fields.items())
    if size > C.REQUEST_MAX_BYTES:
        raise InvalidInput(SOURCE, "(entry)", f"is {size} bytes, past the {C.REQUEST_MAX_BYTES} an entry may have")
    out: dict[str, str] = {}
    for k, v in fields.items():
        try:
            name, value = (k.decode() if isinstance(k, bytes) else k), (v.decode() if isinstance(v, bytes) else v)
        except UnicodeDecodeError as e:
            raise InvalidInput(SOURCE, "(entry)", f"holds a field that is not UTF-8 text (byte {e.start})") from e
        if name not in FIELDS:
            raise InvalidInput(SOURCE, name[:40], f"is not a field of an entry ({', '.join(FIELDS)})")
        out[name] = value
    return out


def parse(entry_id: str, fields: dict[str, str], client_id: str | None = None) -> Entry:
    """The operation an entry of ``client_id``'s stream (None: the shared one) asks for, or
    ``InvalidInput`` naming the field."""
    op = _field(fields, "op", f"is missing: one of {', '.join(OPS)}")
    if op not in OPS:
        raise InvalidInput(SOURCE, "op", f"{op[:40]!r} is not one of {', '.join(OPS)}")
    given = fields.get("job_id")
    if op == "submit":
        job_id = check_id(given, "job_id") if given is not None else default_job_id(entry_id, client_id)
        if "replicas" in fields:
            raise InvalidInput(SOURCE, "replicas", "is for scale; a submit gives replicas in its request")
        return Entry(op, job_id, request=parse_request(_field(fields, "request", "is missing"), "request"))
    job_id = check_id(_field(fields, "job_id", f"is missing: {op} names the job"), "job_id")
    if "request" in fields:
        raise InvalidInput(SOURCE, "request", f"is for submit, not {op}")
    if op != "scale":
        if "replicas" in fields:
            raise InvalidInput(SOURCE, "replicas", f"is for scale, not {op}")
        return Entry(op, job_id)
    raw = _field(fields, "replicas", "is missing: scale says how many replicas")
    if not raw.isdigit() or len(raw) > 6:
        raise InvalidInput(SOURCE, "replicas", f"must be a whole number (given {raw[:40]!r})")
    return Entry(op, job_id, replicas=int(raw))


def _safe(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def default_job_id(entry_id: str, client_id: str | None = None) -> str:
    """A submit without a job id is named after its entry, so that the entry handed out twice is one job,
    and after its client's stream, whose entry ids are another stream's too."""
    return f"r-{entry_id}" if client_id is None else f"r-{client_id}-{entry_id}"


class Consumer:
    """One worker's reader of the request streams, carrying each entry out through ``worker.operations``.

    The Python client (``producer.Client``) carries out its calls through the same operations, so that an
    entry and a call make the same record, the same queue entry and the same refusals."""

    def __init__(self, store: MirroredStore, name: str, quotas: Quotas | None = None) -> None:
        self.store, self.keys, self.redis = store, store.keys, store.redis
        self.name = name
        self.operations = Operations(store)
        self.quotas = quotas or Quotas.from_env()
        self.streams = Streams(store.redis, store.keys, name)

    def poll(self, block_ms: int | None = C.REQUEST_BLOCK_MS) -> int:
        """Take over entries whose worker died, then read and carry out new ones (waiting up to
        ``block_ms`` for one; None: not at all). How many entries were answered."""
        done = self.reclaim()
        entries = self.streams.read(block_ms)
        pause = float(os.environ.get(FAULT_PAUSE_ENV) or 0)
        if entries and pause:
            time.sleep(pause)
        for source, entry_id, fields in entries:
            self.handle(source, entry_id, fields)
            done += 1
        return done

    def drain(self) -> int:
        """Carry out every entry there is now (``--burst``, tests)."""
        total = 0
        while n := self.poll(block_ms=None):
            total += n
        return total

    def reclaim(self) -> int:
        """Take over the entries another worker took and left unacknowledged past the claim time."""
        done = 0
        for source, entry_id, delivered in self.streams.stale():
            fields = self.streams.claim(source, entry_id)
            if fields is None:
                continue  # another worker took it first
            log.warning("request_claimed", entry=entry_id, delivered=delivered + 1, worker=self.name)
            if not fields:  # deleted under its worker before it could acknowledge
                self.streams.finish(source, entry_id)
            elif delivered >= C.REQUEST_MAX_DELIVERIES:
                why = f"handed out {delivered} times and never answered (each worker that took it stopped)"
                log.warning("request_refused", entry=entry_id, reason=why, client=source.client_id)
                answer = Answer(False, self._job_id(source, entry_id, fields), why)
                self._respond(source, entry_id, self._reply_to(source, fields), answer)
            else:
                self.handle(source, entry_id, fields)
            done += 1
        return done

    # --- one entry ----------------------------------------------------------------------------------------

    def handle(self, source: Source, entry_id: str, raw: dict[Any, Any]) -> Answer:
        """Carry out one entry, answer it and acknowledge it. Only Redis going away leaves it pending (for
        this worker or another to take again); any other failure is its answer."""
        reply_to = self._reply_to(source, raw)
        try:
            fields = decode(raw)
            if source.client_id is not None and "reply_to" in fields:
                raise InvalidInput(
                    SOURCE, "reply_to", f"is for the shared stream; this stream's answers go to {reply_to}"
                )
            answer = self._carry_out(parse(entry_id, fields, source.client_id), source.client_id)
        except (RedisUnavailable, RedisForbidden, redis.ConnectionError, redis.TimeoutError):
            raise
        except ModelplanError as e:
            op = _safe(raw.get(b"op", raw.get("op", "")))[:40]
            reason = str(e).removeprefix(f"{op}: ")
            state = e.state if isinstance(e, WrongState) else ""
            answer = Answer(False, self._job_id(source, entry_id, raw), reason, state, error=type(e).__name__)
        except Exception as e:  # a bug must not stop the reader, nor come back forever
            log.exception("request_failed", entry=entry_id)
            reason = f"could not be carried out ({type(e).__name__})"
            answer = Answer(False, self._job_id(source, entry_id, raw), reason, error="ModelplanError")
        if not answer.ok:
            log.warning(
                "request_refused", entry=entry_id, job_id=answer.job_id, reason=answer.reason, client=source.client_id
            )
        self._respond(source, entry_id, reply_to, answer)
        return answer

    def _respond(self, source: Source, entry_id: str, reply_to: str | None, answer: Answer) -> None:
        """Answer an entry and acknowledge it. An answer that cannot be written (the reply key holds
        something else) is logged, and the entry acknowledged all the same: it is never handed out again
        for that."""
        if reply_to is not None:
            try:
                self._answer(reply_to, entry_id, answer)
            except redis.ResponseError as e:
                log.warning("request_unanswerable", entry=entry_id, reply_to=reply_to, error=str(e)[:200])
        self.streams.finish(source, entry_id)

    def _carry_out(self, entry: Entry, client_id: str | None) -> Answer:
        c, job_id, q = self.operations, entry.job_id, self.quotas
        assert job_id is not None
        owned = Owned(self.store, client_id, q.client_replicas) if client_id is not None else None
        try:
            if entry.op == "submit":
                assert entry.request is not None
                q.check_job(job_id, entry.request.replicas)
                c.submit(entry.request, job_id, as_client=client_id, owned=owned)
                rec = c.get(job_id)
            elif entry.op == "release":
                rec = c.release(job_id, as_client=client_id)
            elif entry.op == "cancel":
                rec = c.cancel(job_id, as_client=client_id)
            elif entry.op == "retry":
                rec = c.retry(job_id, as_client=client_id, owned=owned)
            else:
                assert entry.replicas is not None
                rec = self._scale(job_id, entry.replicas, client_id, owned)
        except NotReplicated as e:  # done on the master; the sender is told it may not survive a failover
            return Answer(True, job_id, str(e))
        except WrongState as e:
            if e.state != _DONE_STATE.get(entry.op):
                raise
            rec = c.get(job_id)
        return Answer(True, job_id, rec.reason, rec.state.value, rec.version)

    def _scale(self, job_id: str, replicas: int, client_id: str | None, owned: Owned | None) -> JobRecord:
        """A scale within the quotas: a client's new count is reserved before it is planned, so that two
        entries carried out at once cannot both pass, and settled on what the record says after."""
        if owned is None:
            self.quotas.check_job(job_id, replicas)
            return self.operations.scale(job_id, replicas, as_client=client_id)
        # another client's job is refused as that before any bound is named
        bound = lambda: self.quotas.check_job(job_id, replicas)  # noqa: E731
        return self.operations.scale(job_id, replicas, as_client=client_id, owned=owned, bound=bound)

    def _reply_to(self, source: Source, raw: dict[Any, Any]) -> str | None:
        """Where an entry's answer goes: a client's own replies stream, whatever the entry says; on the
        shared stream the reply stream the entry names, if it names a valid one."""
        if source.client_id is not None:
            return self.keys.client_replies(source.client_id)
        name = raw.get(b"reply_to", raw.get("reply_to"))
        try:
            return self.keys.reply(text(name)) if name is not None and len(name) <= 128 else None
        except (InvalidInput, UnicodeDecodeError):
            return None

    def _job_id(self, source: Source, entry_id: str, raw: dict[Any, Any]) -> str | None:
        """The job an entry is about, if it names a valid id (or, a submit, none)."""
        given = raw.get(b"job_id", raw.get("job_id"))
        op = raw.get(b"op", raw.get("op"))
        if given is None:
            return default_job_id(entry_id, source.client_id) if op in (b"submit", "submit") else None
        try:
            return check_id(text(given), "job_id") if len(given) <= 128 else None
        except (InvalidInput, UnicodeDecodeError):
            return None

    def _answer(self, reply_to: str, entry_id: str, answer: Answer) -> None:
        fields = {
            "request": entry_id,
            "ok": "true" if answer.ok else "false",
            "job_id": answer.job_id or "",
            "state": answer.state,
            "reason": answer.reason,
            "error": answer.error,
        }
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.xadd(reply_to, fields, maxlen=C.REPLY_MAXLEN, approximate=True)  # type: ignore[arg-type]
            pipe.expire(reply_to, C.REPLY_TTL_S)
            pipe.execute()

    def leave(self) -> None:
        """Drop this worker from the groups, where it holds no entry (one it holds is left for another)."""
        self.streams.leave()


def serve(url: str, keys: Keys, name: str, stop: Any) -> None:
    """The worker's request thread: read and carry out entries until ``stop`` is set. Redis going away or
    busy (or refusing the stream commands for the login's ACL rules) is logged once, as one line, and
    tried again after ``OUTAGE_RETRY_S``, a pause that doubles while it keeps failing (``retry.Backoff``)."""
    from worker.config import connect

    consumer = Consumer(MirroredStore(connect(url), keys), name)
    backoff = retry.Backoff(C.OUTAGE_RETRY_S)
    trouble = ""
    error: Exception
    while not stop.is_set():
        try:
            consumer.poll()
            if trouble:
                log.info("requests_resumed", worker=name)
                trouble = ""
            backoff.succeeded()
            continue
        except (redis.exceptions.NoPermissionError, RedisForbidden) as e:
            now, event, error = "forbidden", "requests_forbidden", e
        except Exception as e:
            if isinstance(e, RedisUnavailable) or retry.unavailable(e):
                now, event, error = "unavailable", "requests_unavailable", e
            else:  # a bug: said once per kind, with its traceback, not every time round
                now, event, error = f"failed:{type(e).__name__}", "requests_failed", e
                if now != trouble:
                    log.exception(event, worker=name)
        if now != trouble and event != "requests_failed":
            log.warning(event, worker=name, error=str(error)[:200], error_type=type(error).__name__)
        trouble = now
        stop.wait(backoff.failed())
    consumer.leave()
