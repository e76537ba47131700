"""Storing heartbeats (``heartbeat.lua``) and what the script says of each: ``Store`` has these as its own;
kept apart from its reads and commits."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import redis

from worker import calls as calls_
from worker import constants as C
from worker.keys import Keys
from worker.replies import Reply
from worker.reports import NodeRecord
from worker.scripts import script, text

Beat = Reply
"""What became of one heartbeat: ``heartbeat.lua``'s code for it, one of ``Reply.OK``, ``STALE``, ``BAD``
or ``CONFLICT`` (the name ``producer`` gives it)."""


@dataclass(frozen=True, slots=True)
class BeatReply:
    """``heartbeat.lua``'s reply for one heartbeat."""

    beat: Beat
    wake: bool
    """The call signalled a wake-up pass (said of every heartbeat of one call)."""
    restarted: bool
    """The node has a new boot, or came back after its heartbeat lapsed, while jobs hold reservations on
    it: the caller has those checked (``node_restarted``)."""

    @property
    def stored(self) -> bool:
        return self.beat is Beat.OK


class Heartbeats:
    """Heartbeats stored under one prefix, for ``Store``."""

    redis: redis.Redis
    keys: Keys

    def repair(self, key: str) -> None:
        raise NotImplementedError

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
        for i, ((keys, args), reply) in enumerate(zip(calls, replies, strict=True)):
            # a shared key of another type (its first element a code, not the wake flag): nothing written,
            # the hint repaired and the call run again
            if not isinstance(reply[0], int) and Reply.of(reply[0]) is Reply.WRONGTYPE:
                self.repair(text(reply[1]))
                replies[i] = beat(keys=keys, args=args)
        out: list[BeatReply] = []
        for reply in replies:
            wake = int(reply[0]) == 1
            out += [BeatReply(Reply.of(reply[j]), wake, int(reply[j + 1]) == 1) for j in range(1, len(reply), 2)]
        return out
