"""What a store hands on to the workers: tasks on the planning queue (RQ jobs), and the wake-up signal
(``wake:signal``) that a worker's waker takes. ``Store`` has these as its own; kept apart from its reads
and commits."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import redis
from rq import Queue

from worker import constants as C
from worker import logs
from worker.ids import ID_PATTERN, planning_job_id
from worker.keys import Keys
from worker.scripts import script

log = logs.get_logger("modelplan.worker")


class Handoffs:
    """The queue and the wake-up signal of one prefix, for ``Store``."""

    redis: redis.Redis
    keys: Keys
    queue: Queue
    intake: Callable[[Sequence[str]], bool]
    """``Heartbeats.intake``."""

    # --- the wake-up signal ---------------------------------------------------------------------------

    def signal_pass(self, full: bool = False) -> int:
        """Signal a wake-up pass (``full``: over every pending job, not only the woken classes), as the
        scripts do when they free capacity (``signal_pass.lua``): a token on ``wake:signal``, one at most.
        In a script, so that it needs no command the scripts do not (it was a transaction with LTRIM).
        ``wake:signal`` or ``wake:classes`` of the wrong type is put right (and the pass made full): how
        many of them were."""
        k = self.keys
        _, repaired = script(self.redis, "signal_pass")(keys=[k.wake_signal, k.wake_classes], args=[int(full)])
        return int(repaired)

    def wait_for_pass(self, timeout_s: float) -> bool:
        """Take the token on ``wake:signal``, waiting up to ``timeout_s`` for one (0: not at all): True when
        a wake-up pass is due.

        A key of another type there (anyone who may write the prefix can) is a signal too: the scripts
        that free capacity push a token only onto a key that is not there, so a wrong-typed key stands for
        every token they did not push. It is deleted, said once, and a pass is due (one may be: a pass
        looks again, and decides nothing on the signal alone)."""
        k = self.keys
        try:
            if timeout_s <= 0:
                return self.redis.lpop(k.wake_signal) is not None
            return self.redis.blpop([k.wake_signal], timeout=timeout_s) is not None
        except redis.ResponseError as e:
            if not str(e).startswith("WRONGTYPE"):
                raise
            self.redis.delete(k.wake_signal)
            log.warning("wake_signal_repaired", key=k.wake_signal, error=str(e)[:200])
            return True

    # --- the queue ----------------------------------------------------------------------------------------

    def _enqueue(self, func: str, *args: Any, **options: Any) -> None:
        self.queue.enqueue_call(
            f"worker.jobs.{func}",
            args=(self.keys.prefix, *args),
            timeout=C.RQ_JOB_TIMEOUT_S,
            result_ttl=0,
            failure_ttl=C.RQ_FAILURE_TTL_S,
            **options,
        )

    def enqueue_plan(self, job_id: str, pipeline: Any = None) -> None:
        """Queue a planning job for ``job_id`` (in ``pipeline``'s transaction if one is given)."""
        self._enqueue("plan_job", job_id, job_id=planning_job_id(job_id), pipeline=pipeline)

    def hand_off_silent(self, node_id: str, until_ms: int) -> None:
        """Queue a ``node_silent`` task for a silent node that held jobs, at the front, and move the node's
        score in ``nodes`` on to ``until_ms`` (unless a heartbeat moved it further), so that the sweeps
        meanwhile leave it to that task."""
        self.intake([node_id])  # taken in as gone, should its expiry have been announced to no one
        self.redis.zadd(self.keys.nodes, {node_id: until_ms}, xx=True, gt=True)
        self._enqueue("node_silent", node_id, at_front=True)

    def enqueue_restart(self, node_id: str, boot_id: str) -> None:
        self._enqueue("node_restarted", node_id, boot_id, at_front=True)

    def take_restarts(self) -> int:
        """Queue a ``node_restarted`` task for each node ``restarts`` holds (a worker's intake puts there a
        node back with a new boot while holding reservations), with the boot its record reports now: a
        notice only makes the task look, and the task acts only on what the node's record says. How many
        were queued."""
        k = self.keys
        taken = self.redis.spop(k.restarts, C.RESTARTS_TAKEN)
        done = 0
        for raw in taken or []:
            node_id = raw.decode() if isinstance(raw, bytes) else str(raw)
            if not ID_PATTERN.fullmatch(node_id):
                continue
            boot = self.node_boot(node_id)
            if boot is not None:
                self.enqueue_restart(node_id, boot)
                done += 1
        return done

    def node_boot(self, node_id: str) -> str | None:
        raise NotImplementedError
