"""What other services and node agents use: submit and watch serve jobs, release and cancel them, and
publish heartbeats.

    from producer import Client, request_from_listing
    client = Client.from_url("redis://127.0.0.1:6379/0")
    job_id = client.submit(request_from_listing(files, config, context=8192, model="org/name"))
    for record in client.watch(job_id, timeout=30):  # until placed, waiting or over
        print(record.state, record.reason)
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar

import redis

from producer.conditions import serving, serving_or_dead
from producer.errors import NotServing
from producer.ownstream import OwnStream
from producer.relayed import Relayed, Stored
from producer.serve import request_from_folder, request_from_listing, request_from_repository
from worker import alive, apikeys, conflicts, owners, quarantine
from worker import constants as C
from worker.beats import Beat
from worker.config import client_id as default_client_id
from worker.config import connect, redact
from worker.config import prefix as default_prefix
from worker.config import redis_url as default_url
from worker.config import wait_replicas as default_wait_replicas
from worker.config import wait_timeout_ms as default_wait_timeout_ms
from worker.conflicts import ConflictRecord
from worker.errors import NotOwner
from worker.ids import check_client_id, check_id
from worker.keys import Keys
from worker.mirrored import MirroredStore
from worker.operations import Operations, check_replicas, existing
from worker.owners import ANYONE, Acting, Owned
from worker.pool import Held, Snapshot
from worker.records import JobRecord, JobState, ServeRequest, parse_request, utcnow
from worker.reports import Heartbeat, NodeRecord, parse_heartbeat, stored_tail
from worker.scripts import text

T = TypeVar("T")

__all__ = ["BeatLog", "Client", "request_from_folder", "request_from_listing", "request_from_repository"]


def as_of_state(rec: JobRecord) -> JobRecord:
    """``rec`` with the reason of its state. Taking a queued job into planning rewrites only the head of its
    record (``claim.lua``), so the stored reason is still the one it was queued with; a record being
    planned says who plans it, in the words its stream gives that change (``planning on {worker}``)."""
    if rec.state is JobState.PLANNING and rec.worker:
        return rec.model_copy(update={"reason": f"planning on {rec.worker}"})
    return rec


class BeatLog:
    """What the publisher of one node's heartbeats (its agent) logs of what became of them: each one
    older than the stored one of its boot; and another agent publishing under the node's id, once when
    it is found (``node_conflict``, a warning) and once when it is over (``node_conflict_cleared``), not
    at every heartbeat between. The log is the agent's, bound with the node's id and boot."""

    def __init__(self) -> None:
        self.conflict = False

    def note(self, log: Any, hb: Heartbeat, beat: Beat) -> None:
        if beat is Beat.STALE:
            log.warning("heartbeat_stale", seq=hb.seq, why="a newer heartbeat of this boot is stored")
            return
        if beat is Beat.CONFLICT and not self.conflict:
            log.warning(
                "node_conflict",
                why="another agent publishes under this node id (a cloned machine image?): the node is out of "
                "the pool until only one is heard; give each node its own --node-id",
            )
        elif beat is not Beat.CONFLICT and self.conflict:
            log.info("node_conflict_cleared")
        self.conflict = beat is Beat.CONFLICT


class Client:
    """One service's handle on modelplan's state in Redis."""

    def __init__(
        self,
        client: redis.Redis,
        prefix: str | None = None,
        *,
        url: str = "",
        wait_replicas: int | None = None,
        wait_timeout_ms: int | None = None,
        client_id: str | None = None,
    ) -> None:
        self.store = MirroredStore(client, Keys(default_prefix(prefix)))
        self.keys = self.store.keys
        self.redis = client
        self._url = redact(url) if url else ""
        self.operations = Operations(
            self.store,
            url=self._url,
            wait_replicas=default_wait_replicas(wait_replicas),
            wait_timeout_ms=default_wait_timeout_ms(wait_timeout_ms),
        )
        """Submit, release, cancel, scale and retry, as the request streams' reader carries them out. Each waits
        for ``wait_replicas`` replicas before it returns (``MODELPLAN_WAIT_REPLICAS``, 0 by default): with
        N, what returned survives a failover that promotes one of those N."""
        self._relayed = Relayed()
        """The heartbeats ``heartbeats`` validated from text, so that a refresh's next text is not again."""
        self.client_id = check_client_id(client_id) if client_id is not None else None
        """The registered client this one acts as: its submit, release, cancel, scale and retry go through
        that client's own request stream and wait for the answer (``producer.ownstream``); None: direct."""
        self._own = OwnStream(client, self.keys, self.client_id) if self.client_id is not None else None

    @classmethod
    def from_url(
        cls, url: str | None = None, prefix: str | None = None, *, client_id: str | None = None, **wait: int | None
    ) -> Client:
        """A client for ``url``, else ``MODELPLAN_REDIS_URL``, else the local default; acting as
        ``client_id``, else ``MODELPLAN_CLIENT_ID``, else directly."""
        resolved = default_url(url)
        return cls(connect(resolved), prefix, url=resolved, client_id=default_client_id(client_id), **wait)

    def _call(self, fn: Callable[[], T]) -> T:
        """``fn``'s answer; any error Redis answers with, or its absence, as one of modelplan's errors
        (``worker.errors.redis_failure``), with the URL redacted."""
        return self.operations.call(fn)

    # --- serve jobs -------------------------------------------------------------------------------------

    def submit(
        self,
        request: ServeRequest | Mapping[str, Any],
        job_id: str | None = None,
        *,
        exists_ok: bool = True,
        as_client: Acting = ANYONE,
        owned: Owned | None = None,
    ) -> str:
        """Record a serve job and queue it for planning, in one transaction: when this returns, the job is
        stored and queued; when it raises, nothing was. Submitting the same id with the same request again
        returns the id and queues nothing; with another request it raises ``JobExists``. ``exists_ok=False``
        refuses any id already recorded with ``AlreadySubmitted`` (a ``JobExists``), which says what that
        job is (its state and reason; a failed one is planned again by ``retry``). Acting through the
        client's own stream, the record is read before the entry is sent.

        ``as_client`` and ``owned`` are the request reader's (``worker.requests``): whom the submit acts for
        (the job's owner; ``JobTaken`` if the id is another's) and the client's count of replicas, which
        the submit is admitted to in the same transaction."""
        req = request if isinstance(request, ServeRequest) else parse_request(request)
        job_id = check_id(job_id, "job_id") if job_id is not None else uuid.uuid4().hex
        own = self._own
        if own is not None:
            if not exists_ok:
                self._refuse_recorded(job_id, req)
            self._call(lambda: own.ask("submit", job_id, request=req.model_dump_json()))
            return job_id
        return self.operations.submit(req, job_id, as_client=as_client, owned=owned, exists_ok=exists_ok)

    def _refuse_recorded(self, job_id: str, req: ServeRequest) -> None:
        """Raise what a submit of ``req`` under a recorded ``job_id`` is told (``JobTaken`` if another
        client's); nothing if there is no record."""
        old = self._call(lambda: self.store.job(job_id))
        if old is not None:
            owners.check_submit(old, self.client_id)
            raise existing(old, req)

    def get(self, job_id: str) -> JobRecord:
        return self.operations.get(job_id)

    def watch(
        self,
        job_id: str,
        timeout: float = 60.0,
        *,
        through_waiting: bool = False,
        until: Callable[[JobRecord], bool] | None = None,
    ) -> Iterator[JobRecord]:
        """Yield the job's record now and at each change, until it is placed, waiting or over (failed,
        cancelled, released), or ``timeout`` seconds pass. Reads the job's stream; does not poll. Each
        record's reason is that of its state (``as_of_state``).

        A waiting job waits for its hardware to free, for as long as that takes: the watch returns with
        its record, which says what it waits for. With ``through_waiting`` it watches on until the job is
        placed or over. Whichever way it ends, the last record yielded is the job's state then: one still
        queued, planning or (with ``through_waiting``) waiting means the timeout passed first. ``until``:
        watch on, past a placed record too, until it holds of the record or the job is over."""
        stream = self.keys.job_events(job_id)
        last = self._call(lambda: self.redis.xrevrange(stream, count=1))
        last_id = text(last[0][0]) if last else "0-0"
        rec = self.get(job_id)
        yield as_of_state(rec)
        deadline = time.monotonic() + timeout

        def done(rec: JobRecord) -> bool:
            if until is not None:
                return rec.state.final or until(rec)
            return rec.state.settled or (rec.state is JobState.WAITING and not through_waiting)

        while not done(rec):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            block = max(1, int(min(left * 1000, C.WATCH_BLOCK_MS)))
            got: Any = self._call(partial(self.redis.xread, {stream: last_id}, block=block))
            if not got:
                continue
            last_id = text(got[0][1][-1][0])
            new = self.get(job_id)
            if new.version != rec.version:
                rec = new
                yield as_of_state(rec)

    def api_key(self, job_id: str) -> str:
        """The API key the job's engines want of every caller (``Authorization: Bearer KEY``;
        ``worker.apikeys``): for a job this client submitted on its own request stream, its own copy
        (``client:{client_id}:key:{job_id}``, which no other client reads); for a job submitted directly,
        made from the deployment's secret, which only a login with the workers' rights reads."""
        rec = self.get(job_id)
        if rec.owner is not None:
            if rec.owner != self.client_id:
                raise NotOwner(job_id)
            raw = self._call(lambda: self.redis.get(self.keys.client_key(rec.owner or "", job_id)))
            if raw is None:
                raise NotServing(job_id, "its API key is gone (kept for 30 days after it was submitted)", rec)
            return text(raw)
        return apikeys.job_key(self._call(lambda: apikeys.secret(self.redis, self.keys)), job_id)

    def wait_serving(self, job_id: str, timeout: float = 600.0) -> JobRecord:
        """The job's record once every replica it wants is placed and its engine serves (``serving``, with
        the endpoint other services call, ``Replica.engine.endpoint``). Reads the job's stream, on which
        each engine's change comes; does not poll. ``NotServing`` when ``timeout`` seconds pass first, the
        job ends, or an engine of it ended or failed to start (an engine out of memory at start is planned
        again by the workers, and waited for)."""
        # the last record the watch yields (at least one: the record as it is now)
        rec = deque(self.watch(job_id, timeout, through_waiting=True, until=serving_or_dead), maxlen=1)[0]
        if rec.state.final:
            raise NotServing(job_id, f"it is {rec.state.value} ({rec.reason})", rec)
        if serving(rec):
            return rec
        if serving_or_dead(rec):
            raise NotServing(job_id, rec.reason, rec)
        raise NotServing(job_id, f"not all its engines serve after {timeout:g} s ({rec.reason})", rec)

    def release(self, job_id: str, *, as_client: Acting = ANYONE) -> JobRecord:
        """Free a placed job's cards (or memory); waiting jobs that can use them are planned at once.
        ``as_client``: whom the call acts for (the request reader's); ``NotOwner`` if the job is not theirs."""
        if self._own is not None:
            return self._asked("release", job_id)
        return self.operations.release(job_id, as_client=as_client)

    def scale(self, job_id: str, replicas: int, *, as_client: Acting = ANYONE) -> JobRecord:
        """Ask for ``replicas`` replicas: new ones are planned at once, surplus ones freed. ``as_client``:
        as for ``release``."""
        if self._own is not None:
            check_replicas(replicas)  # refused here, with the field named, as a direct call is
            return self._asked("scale", job_id, replicas=str(replicas))
        return self.operations.scale(job_id, replicas, as_client=as_client)

    def cancel(self, job_id: str, *, as_client: Acting = ANYONE) -> JobRecord:
        """Cancel a job that is queued, being planned, or waiting. ``as_client``: as for ``release``."""
        if self._own is not None:
            return self._asked("cancel", job_id)
        return self.operations.cancel(job_id, as_client=as_client)

    def retry(self, job_id: str, *, as_client: Acting = ANYONE) -> JobRecord:
        """Queue a failed job for planning again under the same id, to be planned on the pool as it is then
        (a node that can hold it may have joined since it failed): its record, back in ``queued``. Only a
        failed job (``WrongState`` otherwise). ``as_client``: as for ``release``."""
        if self._own is not None:
            return self._asked("retry", job_id)
        return self.operations.retry(job_id, as_client=as_client)

    def _asked(self, op: str, job_id: str, **fields: str) -> JobRecord:
        """``op`` carried out through this client's own stream: the job's record once it is answered."""
        check_id(job_id, "job_id")
        own = self._own
        assert own is not None
        self._call(lambda: own.ask(op, job_id, **fields))
        return self.get(job_id)

    # --- nodes --------------------------------------------------------------------------------------------

    def heartbeat(self, heartbeat: Heartbeat | Mapping[str, Any]) -> bool:
        """Publish a node's heartbeat; False when it was not stored: an older one of the same boot (nothing
        changed), or refused because two agents publish under its node id (``publish`` tells which)."""
        return self.publish(heartbeat) is Beat.OK

    def publish(self, heartbeat: Heartbeat | Mapping[str, Any]) -> Beat:
        """Publish a node's heartbeat: what became of it. ``Beat.CONFLICT``: another agent publishes under
        the same node id (a cloned machine image, say), and the node is out of the pool until only one
        has been heard for a while (``conflicts`` shows them)."""
        hb = heartbeat if isinstance(heartbeat, Heartbeat) else parse_heartbeat(heartbeat)
        record = NodeRecord.model_validate({**dict(hb), "received_at": utcnow()})
        return self._put([(hb.node_id, hb.boot_id, record.model_dump_json())])[0]

    def heartbeats(self, heartbeats: Sequence[Heartbeat | Mapping[str, Any] | str | bytes]) -> list[bool]:
        """Publish several nodes' heartbeats in one round trip (a relay forwarding a rack's, say, as the
        agents' JSON text or parsed): each is validated and stored as ``heartbeat`` would, every one
        refused before anything is stored if one is bad; True for each stored, False for each older than
        its node's last or refused for a conflict (``publish_all`` tells which). A burst that frees cards
        signals one wake-up pass."""
        return [beat is Beat.OK for beat in self.publish_all(heartbeats)]

    def publish_all(self, heartbeats: Sequence[Heartbeat | Mapping[str, Any] | str | bytes]) -> list[Beat]:
        """``heartbeats``, saying what became of each (``publish``)."""
        # each heartbeat is validated, and the time is ours: the stored record needs no second pass; a text
        # that differs from its node's last only in the seq was validated then (``Relayed``)
        tail = stored_tail(utcnow())
        return self._put([self._stored(item, tail) for item in heartbeats])

    def _put(self, beats: Sequence[Stored]) -> list[Beat]:
        def put() -> list[Beat]:
            # a node back with a new boot while holding reservations is put in restarts, with a wake-up
            # signal, by the workers' intake: a worker's waker has it checked, whoever sent it
            replies = self.store.beat_stored([(node_id, raw) for node_id, _, raw in beats])
            return [reply.beat for reply in replies]

        return self._call(put)

    def last_seq(self, node_id: str, boot_id: str) -> int | None:
        """The seq of the node's stored heartbeat when it is of ``boot_id``: what a heartbeat of that boot
        must rise above to be stored. None when none of that boot is stored."""
        rec = self._call(lambda: self.store.node_record(node_id))
        if rec is None or rec.boot_id != boot_id:
            return None
        # a refresh keeps its seq beside the record (``beat:{id}``), which it leaves as it was
        refreshed = self._call(lambda: self.store.redis.hget(self.keys.beat(node_id), "seq"))
        seq = refreshed.decode() if isinstance(refreshed, bytes) else str(refreshed or "")
        return max(rec.seq, int(seq)) if seq.isdigit() else rec.seq

    def conflicts(self) -> list[ConflictRecord]:
        """The node ids two agents publish under now, by id: each out of the pool until one is left."""
        return self._call(lambda: conflicts.read(self.store))

    def _stored(self, item: Heartbeat | Mapping[str, Any] | str | bytes, tail: str) -> Stored:
        if isinstance(item, bytes) and item.isascii():
            item = item.decode()
        if isinstance(item, str):
            return self._relayed.stored(item, tail)
        hb = item if isinstance(item, Heartbeat) else parse_heartbeat(item)
        return hb.node_id, hb.boot_id, hb.model_dump_json()[:-1] + tail

    def pool(self) -> Snapshot:
        """The live nodes with what each reports and what placed jobs hold on it."""
        return self._call(self.store.snapshot)

    def held_on(self, node_id: str) -> dict[str, Held]:
        """What is held on a node, by hold id: placed replicas' reservations and nominations."""
        return self._call(lambda: self.store.held_on(node_id))

    def records(self, job_ids: Sequence[str]) -> list[JobRecord | None]:
        """The records of several jobs in one round trip (None for an id with no readable record: see
        ``quarantined``)."""
        return [r if isinstance(r, JobRecord) else None for r in self._call(lambda: self.store.jobs(job_ids))]

    def counts(self) -> dict[str, int]:
        """How many jobs are in each state."""

        def count() -> dict[str, int]:
            with self.redis.pipeline(transaction=False) as pipe:
                for s in JobState:
                    pipe.zcard(self.keys.jobs(s))
                return {s.value: int(n) for s, n in zip(JobState, pipe.execute(), strict=True)}

        return self._call(count)

    def jobs(self, state: JobState) -> list[JobRecord]:
        """The readable records of the jobs in ``state``; one that does not parse is left out, and counted
        in ``quarantined``."""
        out = []
        for r in self._call(lambda: self.store.jobs(self.store.job_ids(state))):
            if isinstance(r, JobRecord):
                out.append(as_of_state(r))
            elif r is not None:
                self._call(partial(self.store.report_bad, r, "skipped"))
        return out

    def latest(self, state: JobState, count: int) -> list[JobRecord]:
        """The readable records of the last ``count`` jobs to enter ``state`` (its index's highest scores),
        the latest first; one gone or not parsing is left out (``jobs`` reports the latter)."""

        def read() -> list[JobRecord]:
            key = self.keys.jobs(state)
            ids = self.store.valid_ids(self.redis.zrevrange(key, 0, count - 1), key, "a job id", "skipped")
            return [r for r in self.store.jobs(ids) if isinstance(r, JobRecord)]

        return self._call(read) if count > 0 else []

    def check_indexes(self) -> None:
        """Read every state index, so that a member that is not a job id is counted in ``quarantined``."""
        for state in JobState:
            self._call(partial(self.store.job_ids, state))

    def quarantined(self) -> dict[str, dict[str, Any]]:
        """The stored records that do not parse, by key: what is wrong with each and what was done."""
        return self._call(lambda: quarantine.entries(self.redis, self.keys))

    def workers_alive(self) -> int:
        """How many workers are running now (``worker.alive``): none, and queued jobs wait for one."""
        return len(self._call(lambda: alive.alive(self.redis, self.keys)))
