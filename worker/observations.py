"""What the engines of each model were measured to hold: taken from the node records' footprints
(``worker.footprints``), judged, kept in ``observed:{identity}``, and read back for a plan
(``planner.observed``).

Ingest runs in the maintenance sweep (one sweeper at a time, off the wake-up path and the heartbeat
script): the node records with footprints this process's mirrors read as they changed
(``worker.reports.FOOTPRINTS``: a worker reads them anyway), skipping the footprints it took already.

- Trust: a footprint counts only for a hold on its own node (``held:{node}``, read as it is taken),
  of a job whose replica holds it there; one whose figures are past the node's card or RAM, or that lists
  another number of cards than the hold took, or another engine than the option's, is refused, counted
  (``observations_refused``) and said in one line.
- Judged against the formula: the option's need as the plan counted it by the formula
  (``Option.formula_gb`` for an observed option). A figure under half or over twice that is kept and
  flagged (``observations_flagged``): it shows in ``modelplan status`` and the ratio metric, and no plan
  is counted from it.
- Kept: per model (its identity: the request's files, by name and size), per kind of replica (artifact,
  engine, card class and width, nodes, context, settings), one run per node: the node's peak at the
  release it last reported (``added``). A node's runs never touch another node's: a node can fill one
  slot of ``OBSERVED_NODES_KEPT``, and a release it names (a made-up ``999.0`` too) drops none of the
  others' runs, as releases are never ordered: each run keeps its own, and a plan compares runs of one
  release only (``planner.observed.agreed``). Flagged runs are kept apart (``OBSERVED_FLAGGED_KEPT``
  nodes), and never push out an accepted run. A record stays within ``OBSERVED_RECORD_BYTES``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import timedelta

import redis

from planner.constants import GIB
from planner.model import Option
from planner.observed import kv_per_card, observed_bytes
from planner.settings import NO_SETTINGS, merged
from worker import constants as C
from worker import logs, metrics
from worker.config import settings
from worker.footprints import Footprint
from worker.ids import job_of_hold
from worker.keys import CPU_CLASS
from worker.observed import Kind, Observed, Run, identity, parsed, remember
from worker.pool import Held
from worker.records import JobRecord, utcnow
from worker.refused import say_per_node
from worker.reports import NodeRecord
from worker.scripts import text
from worker.store import Store

log = logs.get_logger("modelplan.observations")

OUTLIER_LOW, OUTLIER_HIGH = 0.5, 2.0
"""A footprint under half or over twice the formula's estimate is kept but flagged."""

RATIO_FIELD = "estimate_observed_ratio"
"""``stats`` fields ``{RATIO_FIELD}:{engine}:{gpu_class}``: the latest footprint over the formula."""


# --- ingest ------------------------------------------------------------------------------------------------


class Taken:
    """The footprints a sweeper has taken already, by (node, hold): skipped while they stay the same."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], Footprint] = {}


def ingest(store: Store, records: Mapping[str, NodeRecord], taken: Taken | None = None) -> int:
    """Take the footprints of ``records`` (node records by node id) not taken already: kept, flagged or
    refused. Two round trips for them all (their holds, their jobs), and one more for each run kept. How
    many were kept."""
    taken = taken if taken is not None else Taken()
    todo = [
        (node_id, hold_id, fp, record)
        for node_id, record in records.items()
        for hold_id, fp in record.footprints.items()
        if taken.seen.get((node_id, hold_id)) != fp
    ]
    if not todo:
        return 0
    with store.redis.pipeline(transaction=False) as pipe:
        for node_id, hold_id, _, _ in todo:
            pipe.hget(store.keys.held(node_id), hold_id)
        holds = pipe.execute()
    job_ids = sorted({job_of_hold(hold_id) for _, hold_id, _, _ in todo})
    jobs = dict(zip(job_ids, store.jobs(job_ids), strict=True))
    if len(taken.seen) > C.OBSERVED_TAKEN_KEPT:
        taken.seen.clear()
    kept = 0
    refused: dict[str, list[tuple[str, str]]] = {}
    for (node_id, hold_id, fp, record), raw in zip(todo, holds, strict=True):
        job = jobs[job_of_hold(hold_id)]
        held = Held.parse(raw) if raw is not None else None
        why = _one(store, record, node_id, hold_id, fp, held, job if isinstance(job, JobRecord) else None)
        if isinstance(why, str):
            refused.setdefault(node_id, []).append((hold_id, why))
        else:
            kept += why
        taken.seen[(node_id, hold_id)] = fp
    say_per_node("footprint_refused", refused)
    return kept


def _one(
    store: Store,
    record: NodeRecord,
    node_id: str,
    hold_id: str,
    fp: Footprint,
    held: Held | None,
    job: JobRecord | None,
) -> int | str:
    """How many runs the footprint kept (0 or 1), or why it is refused."""
    if held is None or held.unreadable:
        return "an agent reports only for holds on its own node"
    option = _option_of(job, node_id, hold_id)
    if job is None or option is None:
        return 0  # released meanwhile: nothing to take it for
    node = record.to_pool_node()
    why = judge(fp, option, held.gpus, node.gpu_mem_gb, node.host_mem_gb)
    if why:
        return why
    figure = max(fp.card_bytes, default=0) if not option.cpu else max(fp.ram_bytes, fp.ram_peak_bytes)
    if not figure:
        return 0  # nothing measured yet
    req = job.request
    formula_gb = option.formula_gb or option.need_gb
    run_settings = merged(req.settings or NO_SETTINGS, settings())
    kv_now = kv_per_card(req.planned_artifacts(), req.shape, req.context, run_settings)(option)
    kind = Kind(
        artifact=option.artifact,
        engine=option.engine,
        gpu_class=option.gpu_class,
        gpus_per_node=option.gpus_per_node,
        nodes=option.nodes,
        context=req.context,
        settings=option.settings,
    )
    comparable = observed_bytes(kind.seen(figure, fp.kv_bytes), req.context, kv_now) or figure
    ratio = round(comparable / max(formula_gb * GIB, 1.0), 4)
    flagged = not OUTLIER_LOW <= ratio <= OUTLIER_HIGH
    if flagged:
        metrics.count("observations_flagged")
        log.warning("footprint_flagged", node=node_id, hold=hold_id, ratio=ratio, model=req.model)
    run = Run(
        hold_id=hold_id,
        node=node_id,
        version=fp.version,
        at=utcnow(),
        bytes=figure,
        kv_bytes=fp.kv_bytes,
        formula_bytes=int(formula_gb * GIB),
        ratio=ratio,
        flagged=flagged,
    )
    stored = keep(store, identity(req), req.model, kind, run)
    if stored:
        field = f"{RATIO_FIELD}:{option.engine}:{option.gpu_class or CPU_CLASS}"
        store.redis.hset(store.keys.stats, field, ratio)
    return int(stored)


def judge(fp: Footprint, option: Option, cards: int, card_gb: int, ram_gb: int) -> str:
    """Why a footprint cannot be what it says of a hold of ``cards`` cards of ``card_gb`` GiB on a node
    of ``ram_gb`` GiB of RAM; "" when it can."""
    if fp.engine != option.engine:
        return f"engine {fp.engine} is not the option's {option.engine}"
    if not option.cpu and fp.card_bytes and len(fp.card_bytes) != cards:
        return f"{len(fp.card_bytes)} card figures for a hold of {cards} cards"
    past = [b for b in fp.card_bytes if b > card_gb * GIB]
    if past:
        return f"a card figure of {past[0] / GIB:.1f} GiB is past the card's {card_gb} GiB"
    ram = max(fp.ram_bytes, fp.ram_peak_bytes)
    if ram > ram_gb * GIB:
        return f"{ram / GIB:.1f} GiB of RAM is past the node's {ram_gb} GiB"
    if fp.kv_bytes and fp.kv_bytes > max(fp.card_bytes or (ram,)):
        return "its KV cache is more than its whole figure"
    return ""


def _option_of(job: JobRecord | None, node_id: str, hold_id: str) -> Option | None:
    if job is None:
        return None
    for rep in job.replicas:
        if any(r.hold_id == hold_id and r.node_id == node_id for r in rep.placement):
            return rep.option
    return None


def keep(store: Store, ident: str, model: str, kind: Kind, run: Run) -> bool:
    """Add ``run`` to ``kind``'s runs in ``observed:{ident}``; False when it adds nothing (the node's figure
    at that release no higher than it had). Written only over what it read (a sweep that overran its lock
    may meet another): read again and retried when the key changed between."""
    k, r = store.keys, store.redis
    key = k.observed(ident)
    for _ in range(C.PLAN_ATTEMPTS):
        with r.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(key)  # type: ignore[no-untyped-call]
                new = added(parsed(ident, pipe.get(key)), model, kind, run)
                if new is None:
                    return False
                pipe.multi()
                pipe.set(key, new.model_dump_json(), ex=C.OBSERVED_TTL_S)
                pipe.zadd(k.observed_models, {ident: time.time()})
                pipe.zadd(k.estimates_off, {ident: new.furthest})
                pipe.execute()
            except redis.WatchError:
                continue
        _trim(store)
        remember(ident, new)
        return True
    return False


def added(old: Observed | None, model: str, kind: Kind, run: Run) -> Observed | None:
    """``old`` with ``run`` of ``kind`` added; None when that adds nothing.

    The run goes to its node's slot in the kind: ``runs`` for an accepted one, ``flagged`` for a flagged
    one, so that neither pushes the other out. A node's slot keeps its peak at the release it reported
    last: a figure of the same release no higher adds nothing, a higher one replaces it, one of another
    release replaces it (that node's engine changed; no other node's did). No other node's slot is touched
    but to drop runs past ``OBSERVED_TTL_S``; past ``OBSERVED_NODES_KEPT`` (``OBSERVED_FLAGGED_KEPT``)
    nodes, the slot written longest ago goes. The kind written goes last; past ``OBSERVED_KINDS_KEPT``
    kinds, or ``OBSERVED_RECORD_BYTES`` of JSON, the kinds written longest ago go."""
    kinds = list(old.kinds) if old is not None else []
    at = next((i for i, x in enumerate(kinds) if x.where == kind.where), None)
    had = kinds.pop(at) if at is not None else kind.model_copy(update={"runs": (), "flagged": ()})
    if run.flagged:
        flagged = _slotted(had.flagged, run, C.OBSERVED_FLAGGED_KEPT)
        if flagged is None:
            return None
        kinds.append(had.model_copy(update={"flagged": flagged}))
    else:
        runs = _slotted(had.runs, run, C.OBSERVED_NODES_KEPT)
        if runs is None:
            return None
        kinds.append(had.model_copy(update={"runs": runs}))
    new = Observed(model=model, kinds=tuple(kinds[-C.OBSERVED_KINDS_KEPT :]))
    while len(new.kinds) > 1 and len(new.model_dump_json()) > C.OBSERVED_RECORD_BYTES:
        new = new.model_copy(update={"kinds": new.kinds[1:]})
    if len(new.model_dump_json()) > C.OBSERVED_RECORD_BYTES:
        log.warning("observed_too_large", model=model, kind=str(kind.where)[:200])
        return None
    return new


def _slotted(slots: tuple[Run, ...], run: Run, nodes: int) -> tuple[Run, ...] | None:
    """``slots`` (one run per node, the latest written last) with ``run`` in its node's; None when the node's
    run at that release is as high already (and not past ``OBSERVED_TTL_S``: then any figure renews it)."""
    oldest = run.at - timedelta(seconds=C.OBSERVED_TTL_S)
    mine = next((x for x in slots if x.node == run.node), None)
    if mine is not None and mine.at >= oldest and mine.version == run.version and run.bytes <= mine.bytes:
        return None
    others = tuple(x for x in slots if x.node != run.node and x.at >= oldest)
    return (*others, run)[-nodes:]


def _trim(store: Store) -> None:
    """Drop the models written longest ago past ``OBSERVED_MODELS_KEPT``."""
    k, r = store.keys, store.redis
    over = int(r.zcard(k.observed_models)) - C.OBSERVED_MODELS_KEPT
    if over <= 0:
        return
    gone = [text(m) for m in r.zrange(k.observed_models, 0, over - 1)]
    with r.pipeline(transaction=True) as pipe:
        pipe.delete(*(k.observed(i) for i in gone))
        pipe.zrem(k.observed_models, *gone)
        pipe.zrem(k.estimates_off, *gone)
        pipe.execute()
