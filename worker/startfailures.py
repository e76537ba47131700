"""An engine that ran out of memory as it started: evidence that the plan counted too little for its model
on that card class. The workers keep it as an observation that raises the need (``worker.observations``'
rules: per model and kind of replica, one run per node, a quorum of nodes before it counts in a plan,
``planner.observed``), and plan the replica again at once, freeing the cards its dead engine held
(``moves.lose_replicas``), so that it does not sit on them.

An out-of-memory only ever raises: its run is the need the plan counted for the option times
``OOM_RAISE``, never less than the node's run already kept at that release (``observations.added`` keeps a
node's peak), and at most ``OUTLIER_HIGH`` times the formula (past that a run would be flagged, and no plan
would read it). A replica planned again after ``OOM_REPLANS_MAX`` out-of-memory starts is left with its
engine ``failed to start``: the engine is told nothing new by one more try."""

from __future__ import annotations

from planner.constants import GIB
from planner.model import Option
from worker import logs
from worker.conditions import EngineReport
from worker.observations import OUTLIER_HIGH, keep
from worker.observed import Kind, Run, identity
from worker.records import JobRecord, Replica, utcnow
from worker.store import Store

log = logs.get_logger("modelplan.observations")

OOM_RAISE = 1.2
"""An engine out of memory at start needed more than the plan counted: a fifth more each time, enough to
pass the activation and CUDA-graph margins an estimate is short by, not so much that one failure takes a
card class away from a model."""

OOM_REPLANS_MAX = 3
"""How many times one replica is planned again after its engine ran out of memory at start; after that
its engine is ``failed to start``, and it waits for its owner (release, or retry with other settings)."""


def observe(store: Store, rec: JobRecord, replica: Replica, node_id: str, hold_id: str, report: EngineReport) -> bool:
    """Keep the out-of-memory start of ``replica``'s engine on ``node_id`` as a run that raises its kind's
    need. Whether a run was kept (False when the node's run at that release was as high already)."""
    option: Option | None = replica.option
    if option is None:
        return False
    req = rec.request
    formula_gb = option.formula_gb or option.need_gb
    raised = min(option.need_gb * OOM_RAISE, formula_gb * OUTLIER_HIGH)
    figure = int(raised * GIB)
    kind = Kind(
        artifact=option.artifact,
        engine=option.engine,
        gpu_class=option.gpu_class,
        gpus_per_node=option.gpus_per_node,
        nodes=option.nodes,
        context=req.context,
        settings=option.settings,
    )
    run = Run(
        hold_id=hold_id,
        node=node_id,
        version=report.version,
        at=utcnow(),
        bytes=figure,
        kv_bytes=0,  # what the cache would have taken is unknown: the run counts at its own context only
        formula_bytes=int(formula_gb * GIB),
        ratio=round(figure / max(formula_gb * GIB, 1.0), 4),
    )
    kept = keep(store, identity(req), req.model, kind, run)
    log.warning(
        "engine_out_of_memory",
        job_id=rec.job_id,
        hold_id=hold_id,
        node=node_id,
        model=req.model,
        need_gb=option.need_gb,
        raised_gb=round(raised, 2),
        kept=kept,
    )
    return kept
