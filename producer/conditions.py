"""What a job's record says of its engines, as a client waits on it (``Client.wait_serving``)."""

from __future__ import annotations

from worker.records import JobRecord, JobState


def serving(rec: JobRecord) -> bool:
    """Whether every replica the job wants is placed and its engine serves, on the hold it holds now."""
    reps = [r for r in rec.replicas if r.placement]
    return (
        rec.state is JobState.PLACED
        and len(reps) == rec.wanted > 0
        and all(
            r.engine is not None and r.engine.state == "serving" and r.engine.hold_id == r.placement[0].hold_id
            for r in reps
        )
    )


def serving_or_dead(rec: JobRecord) -> bool:
    """Whether ``serving``, or some replica's engine on the hold it holds now ended or failed to start."""
    return serving(rec) or any(
        r.engine is not None and r.engine.dead and r.placement and r.engine.hold_id == r.placement[0].hold_id
        for r in rec.replicas
    )
