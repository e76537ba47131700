"""The no-op RQ job: RQ's own ceiling, on the same worker class, serializer and queue keys as the planning
jobs. ``modelplan worker`` runs only modelplan's job functions, so the no-op jobs are drained by this
module's worker (``python -m bench.noop URL PREFIX``): a ``PlanningWorker`` that skips the vetting, whose
job class calls ``noop``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from rq import Queue, SimpleWorker
from rq.job import Job

from worker.config import connect
from worker.keys import Keys
from worker.runner import PlanningWorker, planning_worker
from worker.store import Store


def noop(prefix: str, job_id: str) -> None:
    """Takes the planning job's arguments and does nothing."""
    return None


class NoopJob(Job):
    @property
    def func(self) -> Callable[..., Any]:
        return noop


class NoopWorker(PlanningWorker):
    def execute_job(self, job: Job, queue: Queue) -> None:
        SimpleWorker.execute_job(self, job, queue)


def main(url: str, prefix: str) -> None:
    store = Store(connect(url), Keys(prefix))
    job_class: type[Job] = type("NoopJob", (NoopJob,), {"redis_job_namespace_prefix": store.keys.rq_job_namespace})
    worker = planning_worker(store, NoopWorker)
    worker.job_class = job_class
    worker.work(burst=True, logging_level="WARNING")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
