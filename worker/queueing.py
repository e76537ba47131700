"""The planning queue: RQ's queue and job keys under modelplan's prefix, and a job class that runs only
modelplan's own job functions.

RQ's stock worker imports and calls whatever function a queued job names, and RQ reads that name from a
hash anyone who can write the queue's keys can write. Here a job is vetted before anything is imported or
called: it must name one of ``TASKS``, carry exactly that function's arguments, of their kinds, with the
worker's own prefix first, and no callbacks. The function is then taken from ``worker.jobs`` by its own
name, never imported from the name the job gives: the worker that runs them hands that module to the
queue's job class (``job_class``); a queue made only to enqueue runs nothing.

The queue's key and its jobs' keys carry the prefix (``Keys.rq_queue``, ``Keys.rq_job``): a client whose
Redis login is limited to ``{prefix}:*`` can queue work for its own workers and reach no one else's.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from types import ModuleType
from typing import Any

import redis
from rq import Queue
from rq.exceptions import NoSuchJobError
from rq.executions import Execution, ExecutionRegistry
from rq.job import Job
from rq.serializers import JSONSerializer

from worker.errors import Refused
from worker.ids import ID_PATTERN
from worker.keys import Keys

ArgCheck = Callable[[object], bool]

MAX_PAYLOAD_BYTES = 4096
"""The largest payload a planning job can have (``[name, null, [prefix, id, id], {}]`` is under 400
bytes): RQ inflates a compressed payload before anything else, so a larger one is refused unread."""


def _id(value: object) -> bool:
    return isinstance(value, str) and ID_PATTERN.fullmatch(value) is not None


def _flag(value: object) -> bool:
    return isinstance(value, bool)


TASKS: dict[str, tuple[ArgCheck, ...]] = {
    "worker.jobs.plan_job": (_id,),
    "worker.jobs.wake_pass": (_flag,),
    "worker.jobs.node_restarted": (_id, _id),
    "worker.jobs.node_silent": (_id,),
}
"""The job functions a worker runs, by the name RQ stores, with a check for each argument after the
prefix (which must be the worker's own)."""

_CALLBACKS = ("_success_callback_name", "_failure_callback_name", "_stopped_callback_name")


def vet(job: Job, prefix: str) -> tuple[str, tuple[Any, ...]]:
    """The function name and arguments of a queued job, if it is one of ``TASKS`` with arguments of their
    kinds and ``prefix`` first; ``Refused`` otherwise. Reads only what RQ's JSON payload holds: nothing is
    imported."""
    unreadable = getattr(job, "unreadable", "")
    if unreadable:
        raise Refused(job.id, "(unreadable)", unreadable)
    try:
        name, instance, args, kwargs = job.func_name, job.instance, job.args, job.kwargs
    except Exception as e:  # a payload that is not RQ's four-part JSON
        raise Refused(job.id, "(unreadable)", f"its payload does not parse ({type(e).__name__})") from e
    checks = TASKS.get(name) if isinstance(name, str) else None
    if name is None or checks is None:
        raise Refused(job.id, name, "which is not one of modelplan's job functions")
    if instance is not None or kwargs:
        raise Refused(job.id, name, "with an instance or keyword arguments, which modelplan's jobs never have")
    for attr in _CALLBACKS:
        if getattr(job, attr, None):
            raise Refused(job.id, name, f"with a callback ({attr.strip('_')}), which modelplan's jobs never have")
    args = tuple(args)
    if len(args) != len(checks) + 1:
        raise Refused(job.id, name, f"with {len(args)} arguments where it takes {len(checks) + 1}")
    if args[0] != prefix:
        raise Refused(job.id, name, f"for prefix {str(args[0])[:80]!r}, not this worker's {prefix!r}")
    for i, (check, value) in enumerate(zip(checks, args[1:], strict=True), start=2):
        if not check(value):
            raise Refused(job.id, name, f"with argument {i} of the wrong kind ({str(value)[:80]!r})")
    return name, args


# the RQ internals this module overrides are checked against the installed RQ: tests/worker/test_rq_internals.py
class _ExecutionsOnce(ExecutionRegistry):
    """A job's registry of executions that reads them from Redis once: RQ reads them twice as it deletes
    a job (to take them out of the started registry, then to delete them), a cleanup and two reads each
    time, one round trip apiece, with nothing written in between."""

    def __init__(self, job_id: str, connection: redis.Redis) -> None:
        super().__init__(job_id, connection)
        self._read: dict[tuple[int, int], list[Execution]] = {}

    def get_executions(self, start: int = 0, end: int = -1) -> list[Execution]:
        got = self._read.get((start, end))
        if got is None:
            got = self._read[(start, end)] = super().get_executions(start, end)
        return got


class PlanningJob(Job):
    """A planning job under one prefix (``prefix``, set by ``job_class``). Its function is looked up among
    modelplan's own after ``vet``; its callbacks are never loaded."""

    prefix = ""
    functions: ModuleType | None = None
    """The module the job functions are taken from (``worker.jobs``), given by the worker that runs them
    (``job_class``); None on a queue that only enqueues, whose jobs are never run."""
    unreadable = ""
    """Why the job's hash could not be read, if it could not: ``vet`` then refuses it. A worker that
    raised instead would stop on the first such hash."""

    _deleting: ExecutionRegistry | None = None
    """The registry of its executions while it is being deleted (``_ExecutionsOnce``)."""

    def delete(self, pipeline: Any = None, remove_from_queue: bool = True, delete_dependents: bool = False) -> None:
        self._deleting = _ExecutionsOnce(self.id, self.connection)
        try:
            super().delete(pipeline, remove_from_queue, delete_dependents)
        finally:
            self._deleting = None

    @property
    def execution_registry(self) -> ExecutionRegistry:
        return self._deleting if self._deleting is not None else super().execution_registry

    def refresh(self) -> None:
        try:
            super().refresh()  # type: ignore[no-untyped-call]
        except NoSuchJobError:
            raise
        except redis.ResponseError as e:  # the key is not a hash
            self.unreadable = f"its key does not hold a job ({e})"

    def restore(self, raw_data: Any) -> Any:
        data = raw_data.get(b"data", raw_data.get("data")) if isinstance(raw_data, dict) else None
        if data is not None and len(data) > MAX_PAYLOAD_BYTES:
            self.unreadable = f"its payload is {len(data)} bytes, past the {MAX_PAYLOAD_BYTES} a planning job has"
            return None
        try:
            return super().restore(raw_data)
        except NoSuchJobError:
            raise
        except Exception as e:  # a field RQ cannot parse
            self.unreadable = f"its hash does not parse ({type(e).__name__})"
            return None

    @property
    def func(self) -> Callable[..., Any]:
        name, _ = vet(self, self.prefix)
        if self.functions is None:
            raise Refused(self.id, name, "on a queue that only enqueues: it runs nothing")
        fn: Callable[..., Any] = getattr(self.functions, name.rsplit(".", 1)[1])
        return fn

    @property
    def success_callback(self) -> None:
        return None

    @property
    def failure_callback(self) -> None:
        return None

    @property
    def stopped_callback(self) -> None:
        return None


@cache
def job_class(prefix: str, functions: ModuleType | None = None) -> type[PlanningJob]:
    """The job class of ``prefix``'s planning queue; ``functions``: the module its jobs' functions are
    taken from, for a worker that runs them (``worker.jobs``)."""
    keys = Keys(prefix)
    attrs = {"prefix": keys.prefix, "redis_job_namespace_prefix": keys.rq_job_namespace, "functions": functions}
    return type("PlanningJob", (PlanningJob,), attrs)


@cache
def queue_class(prefix: str, functions: ModuleType | None = None) -> type[Queue]:
    """A Queue whose key, set of queues and jobs lie under ``prefix`` (``functions``: as for ``job_class``)."""
    keys = Keys(prefix)
    return type(
        "PlanningQueue",
        (Queue,),
        {
            "redis_queue_namespace_prefix": keys.rq_queue_namespace,
            "redis_queues_keys": keys.rq_queues,
            "job_class": job_class(prefix, functions),
        },
    )


def planning_queue(client: redis.Redis, keys: Keys, functions: ModuleType | None = None) -> Queue:
    """The planning queue under ``keys``' prefix, with RQ's JSON serializer (no pickle crosses Redis).
    ``functions``: the module of the job functions, for a worker that runs its jobs (``worker.jobs``)."""
    return queue_class(keys.prefix, functions)(keys.queue_name, connection=client, serializer=JSONSerializer)
