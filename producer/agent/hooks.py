"""What the agent calls to start and stop a replica's engine, and the default hooks, which only log."""

from __future__ import annotations

from typing import Protocol

from producer.agent.engines import engine_env, node_command, node_part, replica_of, shown
from worker import logs
from worker.ids import job_of_hold
from worker.records import JobRecord, Reservation

log = logs.get_logger("modelplan.agent")


class StartHook(Protocol):
    """Starts a replica's engine on the node: ``reservation`` is its hold here (``replica_of(job,
    reservation.hold_id)`` gives the replica and the option it runs on), ``cards`` the card indices it is
    given (none for a CPU replica).

    It runs inside a tick: it returns once the engine is launched, not once it serves. When it returns,
    the hold goes into the heartbeat's ``started``; when it raises, it is tried again next tick. An agent
    that restarts hands the holds on its node over again, so a start hook checks for an engine it already
    runs for the hold id."""

    def __call__(self, job: JobRecord, reservation: Reservation, cards: tuple[int, ...]) -> None: ...


class StopHook(Protocol):
    """Stops the engine of a hold no longer on the node (``{job_id}:{replica}:{version}``: the job was
    released, or the replica planned again, elsewhere or on other cards), on the cards it was given."""

    def __call__(self, hold_id: str, cards: tuple[int, ...]) -> None: ...


def log_start(
    job: JobRecord, reservation: Reservation, cards: tuple[int, ...], *, models_dir: str | None = None
) -> None:
    """The default start hook: logs what it would start (``engine_start_planned``) and starts nothing;
    ``models_dir`` is the agent's ``--models-dir``."""
    replica = replica_of(job, reservation.hold_id)
    if replica is None or replica.option is None:  # the agent checks before calling
        return
    option = replica.option
    command = node_command(job, reservation, models_dir)
    # pipeline parallel over several nodes: which stage this node is (one hold id names all its nodes)
    part = node_part(replica, reservation.node_id)
    rank = part.rank if part is not None else 0
    log.info(
        "engine_start_planned",
        job_id=job.job_id,
        hold_id=reservation.hold_id,
        replica=replica.index,
        engine=option.engine,
        artifact=option.artifact,
        cards=list(cards),
        cuda_visible_devices=engine_env(cards)["CUDA_VISIBLE_DEVICES"],
        host_gb=reservation.host_gb,
        node_rank=rank,
        nodes=len(replica.placement),
        command=command,
        command_line=shown(command),
    )


def log_stop(hold_id: str, cards: tuple[int, ...]) -> None:
    """The default stop hook: logs what it would stop (``engine_stop_planned``)."""
    log.info("engine_stop_planned", job_id=job_of_hold(hold_id), hold_id=hold_id, cards=list(cards))
