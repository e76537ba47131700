"""What ``worker/runner.py`` and ``worker/queueing.py`` take from RQ beyond its documented API, each checked
against the RQ installed: a rename, a changed signature or a removal fails here, naming the internal,
rather than as a worker that quietly stops doing what it relied on.

pyproject.toml pins RQ to the minor release these were written for (3.0). Before widening that pin, run
this file on the new release; where a case fails, read RQ's new code for that internal and change the
override, then the expected shape below.

The internals, by where modelplan relies on them:

``worker/runner.py``, ``PlanningWorker(SimpleWorker)`` and ``InProcessWorker``:

- ``BaseWorker.dequeue_timeout`` (a property): overridden, so that an idle worker's wait times out and its
  pool mirror keeps up.
- ``BaseWorker.heartbeat(timeout, pipeline)``: overridden to renew the registration at most once an
  interval, and to take a starting job off the intermediate list in RQ's pipeline.
- ``BaseWorker.set_state(state, pipeline)`` and the ``_state`` attribute it keeps, which ``get_state``
  reads: the override sets ``_state`` itself when it leaves out a repeated write.
- ``SimpleWorker.execute_job(job, queue)``: overridden to vet a job before anything is imported.
- ``BaseWorker.teardown()``: extended to close the loop's own connection.
- ``BaseWorker.prepare_job_execution(job, remove_from_intermediate_queue)``: called with the flag off, the
  job taken off the planning queue's own intermediate list instead.
- ``BaseWorker.handle_execution_ended(job, queue, heartbeat_ttl)``: replaced whole (RQ's writes the job's
  heartbeat, a round trip the job's end makes needless); so the body it replaces is checked too.
- ``BaseWorker.subscribe()`` and ``unsubscribe()``, and the ``pubsub`` and ``pubsub_thread`` attributes:
  replaced by a reader of the command channel that stops at once (``worker/commands.py``), and in
  ``InProcessWorker`` by none; ``teardown()`` still calls ``unsubscribe()`` and ``bootstrap()``
  ``subscribe()``, ``pubsub_channel_name`` (a property) names the channel, and ``handle_payload(message)``
  takes each command.
- ``BaseWorker.dequeue_job_and_maintain_ttl(timeout, max_idle_time)``: extended to run wake-up passes
  before each dequeue.
- ``BaseWorker._shutdown_requested_date``: read by ``_work`` to tell a stop on a signal from RQ's loop
  giving up on an error.
- ``IntermediateQueue.get_intermediate_queue_key(queue_key)``: names the planning queue's intermediate list.

``worker/queueing.py``, ``PlanningJob(Job)``, ``_ExecutionsOnce(ExecutionRegistry)`` and the queue class:

- ``Job._success_callback_name``, ``_failure_callback_name``, ``_stopped_callback_name``: ``vet`` refuses
  a job that names a callback by reading them; renamed, the check would find nothing and pass.
- ``ExecutionRegistry.__init__(job_id, connection)`` and ``get_executions(start, end)``: subclassed to read
  a deleted job's executions once.
- ``Job.delete(pipeline, remove_from_queue, delete_dependents)`` and ``Job.execution_registry`` (a
  property): overridden together, so that ``delete`` sees the registry that reads once.
- ``Job.refresh()`` and ``Job.restore(raw_data)``: extended to mark a hash that does not parse unreadable
  instead of raising.
- ``Job.func``, ``success_callback``, ``failure_callback``, ``stopped_callback`` (properties): replaced, so
  that no name a job gives is imported.
- ``Job.redis_job_namespace_prefix``, ``Queue.redis_queue_namespace_prefix``, ``Queue.redis_queues_keys``
  and ``Queue.job_class`` (class attributes): set per prefix, so that RQ's keys lie under modelplan's.
"""

from __future__ import annotations

import ast
import inspect
import signal
import textwrap
from collections.abc import Callable, Iterator
from typing import Any

import fakeredis
import pytest
import rq
from rq import Callback, Queue, SimpleWorker
from rq.exceptions import StopRequested
from rq.executions import ExecutionRegistry
from rq.intermediate_queue import IntermediateQueue
from rq.job import Job
from rq.serializers import JSONSerializer
from rq.worker.base import BaseWorker

from worker.queueing import _CALLBACKS

Shape = tuple[tuple[str, str, object], ...]
"""A signature without its annotations: each parameter's name, kind and default. Annotations are left out
so that a change of type hints alone does not fail; a renamed, added, dropped or reordered parameter, or a
changed default, does."""

NO_DEFAULT = "-"


def shape(fn: Callable[..., Any]) -> Shape:
    return tuple(
        (
            p.name,
            p.kind.name,
            NO_DEFAULT if p.default is inspect.Parameter.empty else p.default,
        )
        for p in inspect.signature(fn).parameters.values()
    )


def text(s: Shape) -> str:
    """A shape as a signature reads: ``(self, timeout=None)``."""
    return "(" + ", ".join(n if d == NO_DEFAULT else f"{n}={d!r}" for n, _, d in s) + ")"


def params(*names: str, **defaults: object) -> Shape:
    """The shape of a plain method: ``names`` without defaults, then ``defaults`` in order."""
    return tuple(
        [(n, "POSITIONAL_OR_KEYWORD", NO_DEFAULT) for n in names]
        + [(n, "POSITIONAL_OR_KEYWORD", d) for n, d in defaults.items()]
    )


METHODS: dict[str, tuple[type, str, Shape, str]] = {
    # id: (RQ's class, the method, its shape when the override was written, who overrides it)
    "heartbeat": (
        BaseWorker,
        "heartbeat",
        params("self", timeout=None, pipeline=None),
        "worker/runner.py PlanningWorker.heartbeat",
    ),
    "set_state": (
        BaseWorker,
        "set_state",
        params("self", "state", pipeline=None),
        "worker/runner.py PlanningWorker.set_state",
    ),
    "execute_job": (
        SimpleWorker,
        "execute_job",
        params("self", "job", "queue"),
        "worker/runner.py PlanningWorker.execute_job",
    ),
    "teardown": (BaseWorker, "teardown", params("self"), "worker/runner.py PlanningWorker.teardown"),
    "prepare_job_execution": (
        BaseWorker,
        "prepare_job_execution",
        params("self", "job", remove_from_intermediate_queue=False),
        "worker/runner.py PlanningWorker.prepare_job_execution",
    ),
    "handle_execution_ended": (
        BaseWorker,
        "handle_execution_ended",
        params("self", "job", "queue", "heartbeat_ttl"),
        "worker/runner.py PlanningWorker.handle_execution_ended",
    ),
    "subscribe": (
        BaseWorker,
        "subscribe",
        params("self"),
        "worker/runner.py PlanningWorker.subscribe and InProcessWorker.subscribe",
    ),
    "unsubscribe": (
        BaseWorker,
        "unsubscribe",
        params("self"),
        "worker/runner.py PlanningWorker.unsubscribe and InProcessWorker.unsubscribe",
    ),
    "handle_payload": (
        BaseWorker,
        "handle_payload",
        params("self", "message"),
        "worker/runner.py PlanningWorker.subscribe (its reader hands each command to it)",
    ),
    "dequeue_job_and_maintain_ttl": (
        BaseWorker,
        "dequeue_job_and_maintain_ttl",
        params("self", "timeout", max_idle_time=None),
        "worker/runner.py InProcessWorker.dequeue_job_and_maintain_ttl",
    ),
    "get_intermediate_queue_key": (
        IntermediateQueue,
        "get_intermediate_queue_key",
        params("queue_key"),  # a classmethod: bound, so without cls
        "worker/runner.py PlanningWorker.execute_job and prepare_job_execution",
    ),
    "ExecutionRegistry.__init__": (
        ExecutionRegistry,
        "__init__",
        params("self", "job_id", "connection"),
        "worker/queueing.py _ExecutionsOnce.__init__",
    ),
    "ExecutionRegistry.get_executions": (
        ExecutionRegistry,
        "get_executions",
        params("self", start=0, end=-1),
        "worker/queueing.py _ExecutionsOnce.get_executions",
    ),
    "Job.delete": (
        Job,
        "delete",
        params("self", pipeline=None, remove_from_queue=True, delete_dependents=False),
        "worker/queueing.py PlanningJob.delete",
    ),
    "Job.refresh": (Job, "refresh", params("self"), "worker/queueing.py PlanningJob.refresh"),
    "Job.restore": (Job, "restore", params("self", "raw_data"), "worker/queueing.py PlanningJob.restore"),
}

PROPERTIES: dict[str, tuple[type, str, str]] = {
    # id: (RQ's class, the property, who overrides it)
    "dequeue_timeout": (BaseWorker, "dequeue_timeout", "worker/runner.py PlanningWorker.dequeue_timeout"),
    "pubsub_channel_name": (
        BaseWorker,
        "pubsub_channel_name",
        "worker/runner.py PlanningWorker.subscribe (reads it for the channel)",
    ),
    "Job.execution_registry": (Job, "execution_registry", "worker/queueing.py PlanningJob.execution_registry"),
    "Job.func": (Job, "func", "worker/queueing.py PlanningJob.func"),
    "Job.success_callback": (Job, "success_callback", "worker/queueing.py PlanningJob.success_callback"),
    "Job.failure_callback": (Job, "failure_callback", "worker/queueing.py PlanningJob.failure_callback"),
    "Job.stopped_callback": (Job, "stopped_callback", "worker/queueing.py PlanningJob.stopped_callback"),
}

CLASS_ATTRIBUTES: dict[str, tuple[type, str, type]] = {
    # id: (RQ's class, the attribute queue_class and job_class set per prefix, its type)
    "Job.redis_job_namespace_prefix": (Job, "redis_job_namespace_prefix", str),
    "Queue.redis_queue_namespace_prefix": (Queue, "redis_queue_namespace_prefix", str),
    "Queue.redis_queues_keys": (Queue, "redis_queues_keys", str),
    "Queue.job_class": (Queue, "job_class", type),
}


def where() -> str:
    return f"rq {rq.__version__} (pyproject.toml pins the release this was written for)"


@pytest.mark.parametrize("case", list(METHODS))
def test_an_overridden_method_has_the_signature_it_was_written_for(case: str) -> None:
    owner, name, expected, override = METHODS[case]
    fn = inspect.getattr_static(owner, name, None)
    assert fn is not None, f"{where()}: {owner.__name__}.{name} is gone; {override} overrides it"
    got = shape(getattr(owner, name))
    assert got == expected, (
        f"{where()}: {owner.__name__}.{name} now takes {text(got)}; {override} was written for {text(expected)}"
    )


@pytest.mark.parametrize("case", list(PROPERTIES))
def test_an_overridden_property_is_still_a_property(case: str) -> None:
    owner, name, override = PROPERTIES[case]
    found = inspect.getattr_static(owner, name, None)
    assert isinstance(found, property), (
        f"{where()}: {owner.__name__}.{name} is {found!r}, not a property; {override} overrides it as one"
    )


@pytest.mark.parametrize("case", list(CLASS_ATTRIBUTES))
def test_a_class_attribute_set_per_prefix_is_still_read_from_the_class(case: str) -> None:
    owner, name, kind = CLASS_ATTRIBUTES[case]
    value = inspect.getattr_static(owner, name, None)
    assert isinstance(value, kind), (
        f"{where()}: {owner.__name__}.{name} is {value!r}; worker/queueing.py's queue_class and job_class "
        f"set it per prefix, as a {kind.__name__}"
    )


def _body(fn: Callable[..., Any]) -> list[str]:
    """The statements of ``fn``, without its docstring, as ASTs dumped to text (so layout and comments do
    not count)."""
    node = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
    assert isinstance(node, ast.FunctionDef)
    statements = node.body
    if statements and isinstance(statements[0], ast.Expr) and isinstance(statements[0].value, ast.Constant):
        statements = statements[1:]
    return [ast.dump(s) for s in statements]


def test_the_replaced_handle_execution_ended_still_does_only_what_its_replacement_leaves_out() -> None:
    # PlanningWorker.handle_execution_ended sets the job's end and heartbeat times without writing them: it
    # replaces RQ's whole, so anything RQ adds to it would be dropped unseen
    expected = [
        "job.ended_at = now()",
        "job.heartbeat(now(), heartbeat_ttl)",
    ]
    got = _body(BaseWorker.handle_execution_ended)
    assert got == [ast.dump(ast.parse(s).body[0]) for s in expected], (
        f"{where()}: BaseWorker.handle_execution_ended no longer does only {'; '.join(expected)}; "
        "worker/runner.py PlanningWorker.handle_execution_ended replaces it whole"
    )


@pytest.fixture
def worker() -> Iterator[SimpleWorker]:
    # fakeredis: only the attributes RQ sets as it makes a worker are looked at, nothing is worked
    connection = fakeredis.FakeRedis()
    queue = Queue("internals", connection=connection, serializer=JSONSerializer)
    yield SimpleWorker([queue], connection=connection, serializer=JSONSerializer)
    connection.close()


def test_state_is_kept_in_the_attribute_that_set_state_writes(worker: SimpleWorker) -> None:
    assert "_state" in vars(worker), f"{where()}: a worker has no _state; PlanningWorker.set_state sets it"
    worker._state = "busy"
    assert worker.get_state() == "busy", (
        f"{where()}: get_state no longer reads _state; PlanningWorker.set_state sets _state when it leaves "
        "out a repeated write"
    )


def test_a_worker_starts_with_no_command_channel_thread(worker: SimpleWorker) -> None:
    assert "pubsub_thread" in vars(worker) and worker.pubsub_thread is None, (
        f"{where()}: a worker has no pubsub_thread; InProcessWorker.subscribe sets it to None"
    )
    assert "pubsub" in vars(worker) and worker.pubsub is None, (
        f"{where()}: a worker has no pubsub; PlanningWorker.subscribe sets it to its reader's"
    )


def _calls(fn: Callable[..., Any]) -> set[str]:
    """The methods of ``self`` that ``fn`` calls, by name."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    return {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "self"
    }


@pytest.mark.parametrize(
    ("caller", "callee"),
    [("teardown", "unsubscribe"), ("bootstrap", "subscribe")],
)
def test_the_command_channel_is_still_opened_and_closed_through_the_replaced_methods(caller: str, callee: str) -> None:
    # PlanningWorker's subscribe starts the reader of the command channel and its unsubscribe stops it, at
    # once: RQ's loop calling neither would leave the reader running (or never start it)
    assert callee in _calls(getattr(BaseWorker, caller)), (
        f"{where()}: BaseWorker.{caller} no longer calls self.{callee}(); worker/runner.py PlanningWorker "
        f"replaces {callee} and relies on it"
    )


def test_a_stop_on_a_signal_is_recorded_where_the_loop_reads_it(
    worker: SimpleWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # _work tells a stop on a signal (return) from RQ's loop giving up (start it again) by this attribute,
    # read with getattr(..., None): renamed, every stop would look like a loop to start again
    assert worker._shutdown_requested_date is None
    monkeypatch.setattr(signal, "signal", lambda *_: None)  # request_stop installs the force-stop handlers
    with pytest.raises(StopRequested):
        worker.request_stop(signal.SIGTERM, None)  # type: ignore[no-untyped-call]
    assert worker._shutdown_requested_date is not None, (
        f"{where()}: request_stop no longer sets _shutdown_requested_date; worker/runner.py's _work reads it"
    )


@pytest.mark.parametrize("attr", _CALLBACKS)
def test_a_callback_name_is_read_into_the_attribute_vet_checks(attr: str) -> None:
    kind = attr.split("_")[1]  # _success_callback_name: success
    connection = fakeredis.FakeRedis()
    try:
        queue = Queue("internals", connection=connection, serializer=JSONSerializer)
        queued = queue.enqueue("os.getcwd", **{f"on_{kind}": Callback("os.getpid")})
        job = Job.fetch(queued.id, connection=connection, serializer=JSONSerializer)
    finally:
        connection.close()
    assert getattr(job, attr, None) == "os.getpid", (
        f"{where()}: a job's {kind} callback is no longer read into {attr}; worker/queueing.py's vet refuses "
        "a job with a callback by reading it, and would find none"
    )
