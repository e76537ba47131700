"""The no-op RQ job: RQ's own ceiling, run by the same ``modelplan worker`` as the planning jobs."""

from __future__ import annotations


def noop(prefix: str, job_id: str) -> None:
    """Takes the planning job's arguments and does nothing."""
    return None
