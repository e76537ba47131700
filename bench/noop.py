"""The no-op RQ job: RQ's own ceiling. ``python -m bench.noop URL PREFIX`` drains the no-op queue with RQ's
stock ``SimpleWorker`` and the JSON serializer, as ``rq worker --burst -w rq.SimpleWorker`` would, on
the same queue and job keys as the planning jobs (the prefix's queue and job classes) and with none of
``PlanningWorker``'s own ways: no vetting, and RQ's bookkeeping round trips as RQ makes them. Its rate
is what RQ itself gets through; ``modelplan worker`` runs only modelplan's job functions, so it could
not run these."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from rq import SimpleWorker
from rq.job import Job
from rq.serializers import JSONSerializer

from worker.config import connect
from worker.keys import Keys
from worker.queueing import planning_queue


def noop(prefix: str, job_id: str) -> None:
    """Takes the planning job's arguments and does nothing."""
    return None


class NoopJob(Job):
    @property
    def func(self) -> Callable[..., Any]:
        return noop


def main(url: str, prefix: str) -> None:
    keys = Keys(prefix)
    queue = planning_queue(connect(url), keys)
    job_class: type[Job] = type("NoopJob", (NoopJob,), {"redis_job_namespace_prefix": keys.rq_job_namespace})
    worker = SimpleWorker(
        [queue], connection=queue.connection, serializer=JSONSerializer, queue_class=type(queue), job_class=job_class
    )
    worker.work(burst=True, logging_level="WARNING")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
