"""Storing heartbeats (``heartbeat.lua``) and what the script says of each: ``Store`` has these as its own;
kept apart from its reads and commits.

``heartbeat.lua`` runs with the caller's rights and writes only the nodes' own keys; what a change means
to the pool is a worker's intake's to write (``intake.lua``, ``worker.intake``), rung by the server's
keyspace notifications. A caller with a worker's rights (a worker, a test, a pool loaded by hand: the
default user, or the worker's or the operator's login) takes its own changes in at once as well, so that
what it stored is in the pool when the call returns; a node agent's or relay's login leaves them to the
workers, and never tries (its login may not)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import redis

from worker import calls as calls_
from worker import constants as C
from worker.keys import Keys
from worker.replies import Reply
from worker.reports import NodeRecord
from worker.scripts import script

Beat = Reply
"""What became of one heartbeat: ``heartbeat.lua``'s code for it, one of ``Reply.OK``, ``STALE``, ``BAD``
or ``CONFLICT`` (the name ``producer`` gives it)."""


@dataclass(frozen=True, slots=True)
class BeatReply:
    """``heartbeat.lua``'s reply for one heartbeat."""

    beat: Beat
    wake: bool
    """The call's own intake signalled a wake-up pass (said of every heartbeat of one call): always False
    from a node's login, whose changes the workers take in."""
    restarted: bool
    """The node has a new boot, or came back after its heartbeat lapsed, while jobs hold reservations on
    it: the caller has those checked (``node_restarted``)."""
    changed: bool = False
    """The node's record (or its conflict record) was written: something for the intake to take."""

    @property
    def stored(self) -> bool:
        return self.beat is Beat.OK


WORKER_USERS = ("worker", "operator")
"""The roles (``producer.roles``) whose logins may run the intake."""
NODE_USERS = ("agent", "relay", "client")
"""The roles whose logins may not."""


class Heartbeats:
    """Heartbeats stored under one prefix, for ``Store``."""

    redis: redis.Redis
    keys: Keys
    inline_intake: bool | None = None
    """Whether ``beat_stored`` takes its changes in itself (``intake.lua``): None decides by the login's
    user name (the default user, a worker's or the operator's: yes; any other: no)."""

    def takes_in(self) -> bool:
        """Whether this caller takes its own changes in (``inline_intake``): the default user, a worker's or
        the operator's login do; a node's, a relay's or a client's (named as ``producer.roles`` names them)
        do not; any other login tries, once (``intake`` turns this off when refused)."""
        if self.inline_intake is None:
            user = self.redis.connection_pool.connection_kwargs.get("username")
            prefix = self.keys.prefix
            if user in (None, "", "default") or user in {f"{prefix}.{role}" for role in WORKER_USERS}:
                self.inline_intake = True
            elif any(str(user).startswith(f"{prefix}.{role}.") for role in NODE_USERS):
                self.inline_intake = False
            else:
                return True
        return self.inline_intake

    def intake(self, node_ids: Sequence[str]) -> bool:
        """Take what ``node_ids``' own keys say into the shared state (``intake.lua``), a batch of
        ``INTAKE_BATCH`` at a time: whether a wake-up pass was signalled."""
        run = script(self.redis, "intake")
        wake = False
        ids = list(dict.fromkeys(node_ids))
        for i in range(0, len(ids), C.INTAKE_BATCH):
            keys, args = calls_.intake_call(self.keys, ids[i : i + C.INTAKE_BATCH])
            reply = run(keys=keys, args=args)
            wake = wake or int(reply[0]) == 1
        return wake

    def put_heartbeat(self, record: NodeRecord) -> tuple[bool, bool, bool]:
        """Store a heartbeat: ``(stored, wake, restarted)``. An older heartbeat of the same boot is not
        stored; ``wake`` that it signalled a wake-up pass; ``restarted`` that the node has a new boot."""
        return self.put_stored([(record.node_id, record.model_dump_json())])[0]

    def put_heartbeats(self, records: Sequence[NodeRecord]) -> list[tuple[bool, bool, bool]]:
        """Store several heartbeats in one round trip, each checked against its node's last alone, exactly
        as ``put_heartbeat`` would: ``(stored, wake, restarted)`` for each, in order (``wake`` for the
        whole batch). For a relay that forwards many nodes' heartbeats, and for loading a pool."""
        return self.put_stored([(r.node_id, r.model_dump_json()) for r in records])

    def put_stored(self, beats: Sequence[tuple[str, str]]) -> list[tuple[bool, bool, bool]]:
        """``put_heartbeats`` of heartbeats already validated, each as its node's id and its stored record's
        JSON (``reports.stored_json``): ``(stored, wake, restarted)`` of each ``beat_stored`` reply."""
        return [(b.stored, b.wake, b.restarted) for b in self.beat_stored(beats)]

    def beat_stored(self, beats: Sequence[tuple[str, str]]) -> list[BeatReply]:
        """Store heartbeats already validated, each as its node's id and its stored record's JSON
        (``reports.stored_json``): what became of each, in order. ``heartbeat.lua`` a batch of
        ``HEARTBEAT_BATCH`` at a time, in one round trip."""
        if not beats:
            return []
        beat = script(self.redis, "heartbeat")
        step = C.HEARTBEAT_BATCH
        calls = [calls_.heartbeat_call(self.keys, beats[i : i + step]) for i in range(0, len(beats), step)]
        if len(calls) == 1:
            replies = [beat(keys=calls[0][0], args=calls[0][1])]
        else:
            with self.redis.pipeline(transaction=False) as pipe:
                for keys, args in calls:
                    beat.queue(pipe, keys, args)
                replies = pipe.execute(raise_on_error=False)
            for i, ((keys, args), reply) in enumerate(zip(calls, replies, strict=True)):
                if beat.lost(reply):  # the server lost its scripts: that call ran nothing
                    replies[i] = beat(keys=keys, args=args)
                elif isinstance(reply, Exception):
                    raise reply
        out: list[BeatReply] = []
        for reply in replies:
            out += [
                BeatReply(Reply.of(reply[j]), False, int(reply[j + 1]) == 1, int(reply[j + 2]) == 1)
                for j in range(1, len(reply), 3)
            ]
        changed = [node_id for (node_id, _), b in zip(beats, out, strict=True) if b.changed]
        guess = self.inline_intake is None
        if changed and self.takes_in():
            try:
                wake = self.intake(changed)
            except redis.ResponseError:
                if not guess:
                    raise
                self.inline_intake = False  # a login without a worker's rights: the workers take it in
                return out
            self.inline_intake = True
            out = [BeatReply(b.beat, wake, b.restarted, b.changed) for b in out]
        return out
