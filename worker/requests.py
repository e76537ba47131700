"""The request stream: what a service in any language asks of modelplan, with ``XADD`` alone.

A client appends an entry of string fields to ``{prefix}:requests`` (``Keys.requests``)::

    op        submit | release | cancel | scale
    job_id    the job's id (for submit optional: without one the job is named after the entry, r-{entry id})
    request   submit: the serve request as JSON, as the Python client takes it (``modelplan schema request``)
    replicas  scale: the number of replicas wanted
    reply_to  optional: a name; the answer is appended to ``{prefix}:reply:{name}``

Workers read the stream as the consumer group ``workers`` and carry each entry out through the Python
client (``producer.Client``): one record and one queue entry, and the same job id twice is one job. Then
they acknowledge it and delete it. An entry is answered where its sender can see it: always on
``reply:{name}`` when it names one; else a refusal goes to the job's own stream (``job:{id}:events``, the
job's state, or ``failed`` when there is no record, and the reason). The reason is the line the CLI
prints for the same refusal. A refused entry stores nothing else.

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
from worker.errors import BadRecord, NotReplicated, RedisForbidden, RedisUnavailable, WrongState
from worker.keys import Keys, check_id
from worker.records import JobState, ServeRequest, parse_request
from worker.scripts import text
from worker.store import Store

log = logs.get_logger("modelplan.requests")

OPS = ("submit", "release", "cancel", "scale")
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


def parse(entry_id: str, fields: dict[str, str]) -> Entry:
    """The operation an entry asks for, or ``InvalidInput`` naming the field."""
    op = _field(fields, "op", f"is missing: one of {', '.join(OPS)}")
    if op not in OPS:
        raise InvalidInput(SOURCE, "op", f"{op[:40]!r} is not one of {', '.join(OPS)}")
    given = fields.get("job_id")
    if op == "submit":
        job_id = check_id(given, "job_id") if given is not None else default_job_id(entry_id)
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


def default_job_id(entry_id: str) -> str:
    """A submit without a job id is named after its entry, so that the entry handed out twice is one job."""
    return "r-" + entry_id


class Consumer:
    """One worker's reader of the request stream, carrying each entry out through ``producer.Client``.

    The worker runs the client's own code (not a copy of it) so that an entry and a call of the Python
    client make the same record, the same queue entry and the same refusals."""

    def __init__(self, store: Store, name: str) -> None:
        from producer.client import Client  # the client imports the worker's modules; this is its caller

        self.store, self.keys, self.redis = store, store.keys, store.redis
        self.name = name
        self.client = Client(store.redis, store.keys.prefix)
        self._group_ready = False

    def ensure_group(self) -> None:
        """Create the consumer group (from the stream's start, so that entries appended before any worker
        ran are carried out), and the stream with it."""
        try:
            self.redis.xgroup_create(self.keys.requests, C.REQUEST_GROUP, id="0", mkstream=True)
        except redis.ResponseError as e:
            if "BUSYGROUP" not in str(e):
                raise
        self._group_ready = True

    def poll(self, block_ms: int | None = C.REQUEST_BLOCK_MS) -> int:
        """Take over entries whose worker died, then read and carry out new ones (waiting up to
        ``block_ms`` for one; None: not at all). How many entries were answered."""
        if not self._group_ready:
            self.ensure_group()
        done = self.reclaim()
        try:
            got: Any = self.redis.xreadgroup(
                C.REQUEST_GROUP, self.name, {self.keys.requests: ">"}, count=C.REQUEST_BATCH, block=block_ms
            )
        except redis.ResponseError as e:
            if "NOGROUP" not in str(e):
                raise
            self._group_ready = False  # the stream was deleted with its group: made again next time
            return done
        entries = got[0][1] if got else []
        pause = float(os.environ.get(FAULT_PAUSE_ENV) or 0)
        if entries and pause:
            time.sleep(pause)
        for entry_id, fields in entries:
            self.handle(text(entry_id), fields or {})
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
        k = self.keys
        stale: Any = self.redis.xpending_range(
            k.requests, C.REQUEST_GROUP, min="-", max="+", count=C.REQUEST_BATCH, idle=C.REQUEST_CLAIM_IDLE_MS
        )
        done = 0
        for item in stale:
            entry_id, delivered = text(item["message_id"]), int(item["times_delivered"])
            idle = C.REQUEST_CLAIM_IDLE_MS
            claimed: Any = self.redis.xclaim(k.requests, C.REQUEST_GROUP, self.name, idle, [entry_id])
            if not claimed:
                continue  # another worker took it first
            _, fields = claimed[0]
            log.warning("request_claimed", entry=entry_id, delivered=delivered + 1, worker=self.name)
            if not fields:  # deleted under its worker before it could acknowledge
                self._finish(entry_id)
            elif delivered >= C.REQUEST_MAX_DELIVERIES:
                why = f"handed out {delivered} times and never answered (each worker that took it stopped)"
                log.warning("request_refused", entry=entry_id, reason=why)
                self._respond(entry_id, self._sender(fields), Answer(False, self._job_id(entry_id, fields), why))
            else:
                self.handle(entry_id, fields)
            done += 1
        return done

    # --- one entry ----------------------------------------------------------------------------------------

    def handle(self, entry_id: str, raw: dict[Any, Any]) -> Answer:
        """Carry out one entry, answer it and acknowledge it. Only Redis going away leaves it pending (for
        this worker or another to take again); any other failure is its answer."""
        reply_to = self._sender(raw)
        try:
            entry = parse(entry_id, decode(raw))
            answer = self._carry_out(entry)
        except (RedisUnavailable, RedisForbidden, redis.ConnectionError, redis.TimeoutError):
            raise
        except ModelplanError as e:
            op = _safe(raw.get(b"op", raw.get("op", "")))[:40]
            answer = Answer(False, self._job_id(entry_id, raw), str(e).removeprefix(f"{op}: "))
        except Exception as e:  # a bug must not stop the reader, nor come back forever
            log.exception("request_failed", entry=entry_id)
            answer = Answer(False, self._job_id(entry_id, raw), f"could not be carried out ({type(e).__name__})")
        if not answer.ok:
            log.warning("request_refused", entry=entry_id, job_id=answer.job_id, reason=answer.reason)
        self._respond(entry_id, reply_to, answer)
        return answer

    def _respond(self, entry_id: str, reply_to: str | None, answer: Answer) -> None:
        """Answer an entry and acknowledge it. An answer that cannot be written (the reply key holds
        something else, the job's record does not parse) is logged, and the entry acknowledged all the
        same: it is never handed out again for that."""
        try:
            self._answer(entry_id, reply_to, answer)
        except (redis.ResponseError, BadRecord) as e:
            log.warning("request_unanswerable", entry=entry_id, reply_to=reply_to, error=str(e)[:200])
        self._finish(entry_id)

    def _carry_out(self, entry: Entry) -> Answer:
        c, job_id = self.client, entry.job_id
        assert job_id is not None
        try:
            if entry.op == "submit":
                assert entry.request is not None
                c.submit(entry.request, job_id)
                rec = c.get(job_id)
            elif entry.op == "release":
                rec = c.release(job_id)
            elif entry.op == "cancel":
                rec = c.cancel(job_id)
            else:
                assert entry.replicas is not None
                rec = c.scale(job_id, entry.replicas)
        except NotReplicated as e:  # done on the master; the sender is told it may not survive a failover
            return Answer(True, job_id, str(e))
        except WrongState as e:
            if e.state != _DONE_STATE.get(entry.op):
                raise
            rec = c.get(job_id)
        return Answer(True, job_id, rec.reason, rec.state.value, rec.version)

    def _sender(self, raw: dict[Any, Any]) -> str | None:
        """The reply stream an entry names, if it names a valid one."""
        name = raw.get(b"reply_to", raw.get("reply_to"))
        try:
            return self.keys.reply(text(name)) if name is not None and len(name) <= 128 else None
        except (InvalidInput, UnicodeDecodeError):
            return None

    def _job_id(self, entry_id: str, raw: dict[Any, Any]) -> str | None:
        """The job an entry is about, if it names a valid id (or, a submit, none)."""
        given = raw.get(b"job_id", raw.get("job_id"))
        op = raw.get(b"op", raw.get("op"))
        if given is None:
            return default_job_id(entry_id) if op in (b"submit", "submit") else None
        try:
            return check_id(text(given), "job_id") if len(given) <= 128 else None
        except (InvalidInput, UnicodeDecodeError):
            return None

    def _answer(self, entry_id: str, reply_to: str | None, answer: Answer) -> None:
        k = self.keys
        if reply_to is not None:
            fields = {
                "request": entry_id,
                "ok": "true" if answer.ok else "false",
                "job_id": answer.job_id or "",
                "state": answer.state,
                "reason": answer.reason,
            }
            with self.redis.pipeline(transaction=True) as pipe:
                pipe.xadd(reply_to, fields, maxlen=C.REPLY_MAXLEN, approximate=True)  # type: ignore[arg-type]
                pipe.expire(reply_to, C.REPLY_TTL_S)
                pipe.execute()
            return
        if answer.ok:
            return  # the job's own stream already shows what was done
        if answer.job_id is None:
            return  # nowhere the sender can look: the log line is all
        rec = self.store.job(answer.job_id)
        event = {
            "job_id": answer.job_id,
            "state": rec.state.value if rec else JobState.FAILED.value,
            "version": str(rec.version if rec else 0),
            "reason": answer.reason,
            "request": entry_id,
        }
        stream = k.job_events(answer.job_id)
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.xadd(stream, event, maxlen=C.JOB_EVENTS_MAXLEN, approximate=True)  # type: ignore[arg-type]
            if rec is None:  # a job that never was: its stream goes as a final job's does
                pipe.expire(stream, C.FINISHED_TTL_S)
            pipe.execute()

    def _finish(self, entry_id: str) -> None:
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.xack(self.keys.requests, C.REQUEST_GROUP, entry_id)
            pipe.xdel(self.keys.requests, entry_id)
            pipe.execute()

    def leave(self) -> None:
        """Drop this worker from the group, if it holds no entry (one it holds is left for another)."""
        try:
            pending: Any = self.redis.xpending_range(
                self.keys.requests, C.REQUEST_GROUP, "-", "+", 1, consumername=self.name
            )
            if not pending:
                self.redis.xgroup_delconsumer(self.keys.requests, C.REQUEST_GROUP, self.name)
        except redis.RedisError:
            pass  # a worker stopping while Redis is away leaves its name in the group; harmless


def serve(url: str, keys: Keys, name: str, stop: Any) -> None:
    """The worker's request thread: read and carry out entries until ``stop`` is set. Redis going away or
    busy (or refusing the stream commands for the login's ACL rules) is logged once, as one line, and
    tried again after ``OUTAGE_RETRY_S``, a pause that doubles while it keeps failing (``retry.Backoff``)."""
    from worker.config import connect

    consumer = Consumer(Store(connect(url), keys), name)
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
