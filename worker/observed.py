"""A model's observations as stored (``observed:{identity}``: what its engines were measured to hold, per
kind of replica, one run per node) and read back: for a plan (``seen_for``, ``prefetch``: re-read at most
every ``OBSERVED_REREAD_S``), and for ``modelplan status`` (``furthest_off``). ``worker.observations``
writes them.

A record an older modelplan wrote (one engine release per kind, on the kind; flagged runs among the
others; runs naming no node) is read as this one: each run takes its kind's release, the flagged go apart,
and the runs naming no node count as one node, unnamed (their peak). One that does not parse, or is past
``OBSERVED_RECORD_BYTES``, is said in one line and planned without (the next run writes over it)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from planner.errors import InvalidInput
from planner.model import Artifact, Engine
from planner.observed import QUORUM, Seen
from worker import constants as C
from worker import logs
from worker.records import ServeRequest, utcnow
from worker.scripts import text
from worker.store import Store

log = logs.get_logger("modelplan.observations")


QUORUM_ENV = "MODELPLAN_OBSERVED_QUORUM"


def quorum(given: int | None = None) -> int:
    """How many nodes must agree before what their engines held counts in a plan (``planner.observed``):
    ``MODELPLAN_OBSERVED_QUORUM``, else 2. A worker reads it at start and for each plan."""
    raw: object = given if given is not None else os.environ.get(QUORUM_ENV, "")
    if raw == "":
        return QUORUM
    value = int(raw) if isinstance(raw, str) and raw.isdigit() else raw
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= C.OBSERVED_NODES_KEPT:
        most = C.OBSERVED_NODES_KEPT  # a quorum past the nodes kept could never be met
        said = str(raw)[:40]
        raise InvalidInput(QUORUM_ENV, "(setting)", f"must be a whole number from 1 to {most} (given {said!r})")
    return value


class Run(BaseModel):
    """One hold's footprint as kept: its largest card's figure (or the RAM's peak), the KV cache's part of
    it (0 unknown), what the formula counted, and whether it was flagged; the node whose agent reported it
    ("" in a record kept before runs named their node) and the engine's release as it said."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    hold_id: str
    node: str = ""
    version: str = ""
    at: datetime
    bytes: int
    kv_bytes: int = 0
    formula_bytes: int
    ratio: float
    flagged: bool = False


class Kind(BaseModel):
    """The runs of one kind of replica of a model: ``runs``, accepted, one per node (its peak at its latest
    release), the node written latest last; ``flagged``, apart, one per node, which no plan reads and
    which never push out an accepted run (``worker.observations.added``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    artifact: str
    engine: Engine
    gpu_class: str = ""
    gpus_per_node: int = 0
    nodes: int = 0
    context: int
    settings: tuple[str, ...] = ()
    runs: tuple[Run, ...] = ()
    flagged: tuple[Run, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _older(cls, data: Any) -> Any:
        """A kind as an older modelplan kept it: its release on the kind, flagged runs among the runs,
        none naming its node. Each run takes the kind's release; the flagged go apart; of those naming no
        node, the peak stays (they count as one node) and the latest flagged one."""
        if not isinstance(data, dict) or "version" not in data:
            return data
        data = dict(data)
        version = data.pop("version")
        runs = [{"version": version, **r} if isinstance(r, dict) else r for r in data.get("runs") or ()]
        data["runs"] = _one_each([r for r in runs if not (isinstance(r, dict) and r.get("flagged"))], peak=True)
        data["flagged"] = _one_each([r for r in runs if isinstance(r, dict) and r.get("flagged")], peak=False)
        return data

    @property
    def where(self) -> tuple[str, Engine, str, int, int, int, tuple[str, ...]]:
        """What makes a kind: artifact, engine, card class, cards a node, nodes, context, settings."""
        return (self.artifact, self.engine, self.gpu_class, self.gpus_per_node, self.nodes, self.context, self.settings)

    def seen(self, figure: int, kv_bytes: int, since: str = "", node: str = "", release: str = "") -> Seen:
        """A run of this kind as a plan reads it."""
        return Seen(*self.where, figure, kv_bytes, 1, since, node, release)

    def agreeing(self, run: Run) -> int:
        """The nodes whose accepted runs of this kind are at ``run``'s release: what a quorum counts."""
        return len({r.node for r in self.runs if r.version == run.version})


def _one_each(runs: list[Any], *, peak: bool) -> list[Any]:
    """Of an older record's runs (as JSON), one for each node they name: the largest, or the latest."""
    out: dict[Any, Any] = {}
    for r in runs:
        node = r.get("node", "") if isinstance(r, dict) else None
        had = out.get(node)
        if had is None or not peak or _figure(r) > _figure(had):
            out[node] = r
    return list(out.values())


def _figure(run: Any) -> int:
    value = run.get("bytes") if isinstance(run, dict) else None
    return value if isinstance(value, int) else 0


class Observed(BaseModel):
    """``observed:{identity}``: a model's kinds of replica with their runs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    kinds: tuple[Kind, ...] = ()

    @property
    def furthest(self) -> float:
        """The furthest any run's ratio is from 1, as ``|log2 ratio|`` (0: none), flagged ones too."""
        return max((abs(math.log2(r.ratio)) for _, r in _pairs(self.kinds) if r.ratio > 0), default=0.0)


def _pairs(kinds: Iterable[Kind]) -> list[tuple[Kind, Run]]:
    return [(k, r) for k in kinds for r in (*k.runs, *k.flagged)]


def identity(req: ServeRequest) -> str:
    """What names a model across requests: a digest of its files' names and sizes (a request carries no
    repository revision; the same files are the same model whatever the repository is called)."""
    return _digest(req.artifacts)


@lru_cache(maxsize=C.OBSERVED_CACHE_KEPT)
def _digest(artifacts: tuple[Artifact, ...]) -> str:
    """Worked out once per set of files: a wake-up pass asks it of every job it plans."""
    files = sorted((a.name, a.bytes, a.shards) for a in artifacts)
    return hashlib.sha256(json.dumps(files).encode()).hexdigest()[:32]


_cache: dict[str, tuple[float, Observed | None]] = {}


def read(store: Store, ident: str) -> Observed | None:
    """``observed:{ident}``, or None when there is none or it does not parse (then it is said and written
    over by the next run)."""
    return parsed(ident, store.redis.get(store.keys.observed(ident)))


def parsed(ident: str, raw: Any) -> Observed | None:
    """``raw`` as stored for model ``ident``; None (said in one line) where it is past
    ``OBSERVED_RECORD_BYTES`` or does not parse."""
    if raw is None:
        return None
    if len(raw) > C.OBSERVED_RECORD_BYTES:
        log.warning("observed_unreadable", identity=ident, error=f"{len(raw)} bytes, past {C.OBSERVED_RECORD_BYTES}")
        return None
    try:
        return Observed.model_validate_json(raw)
    except ValidationError as e:
        log.warning("observed_unreadable", identity=ident, error=str(e)[:200])
        return None


def seen_for(store: Store, req: ServeRequest) -> tuple[Seen, ...]:
    """What a plan for ``req`` is counted with: each unflagged run of its model, read at most once every
    ``OBSERVED_REREAD_S`` by this process."""
    ident = identity(req)
    now = time.monotonic()
    got = _cache.get(ident)
    if got is None or now - got[0] > C.OBSERVED_REREAD_S:
        if len(_cache) >= C.OBSERVED_CACHE_KEPT:
            _cache.clear()
        got = _cache[ident] = (now, read(store, ident))
    return as_seen(got[1])


def prefetch(store: Store, reqs: Iterable[ServeRequest]) -> None:
    """Read in one round trip the observations of the models of ``reqs`` this process does not hold
    fresh: a wake-up pass plans many jobs, each with its model's."""
    now = time.monotonic()
    stale = list(
        {i for i in map(identity, reqs) if (got := _cache.get(i)) is None or now - got[0] > C.OBSERVED_REREAD_S}
    )
    if not stale:
        return
    if len(_cache) + len(stale) >= C.OBSERVED_CACHE_KEPT:
        _cache.clear()
    for ident, raw in zip(stale, store.redis.mget([store.keys.observed(i) for i in stale]), strict=True):
        _cache[ident] = (now, parsed(ident, raw))


def as_seen(observed: Observed | None, now: datetime | None = None) -> tuple[Seen, ...]:
    """The accepted runs of ``observed`` as a plan reads them, each with its node and release; those taken
    more than ``OBSERVED_TTL_S`` ago left out (its engines may have changed since)."""
    if observed is None:
        return ()
    oldest = (now or utcnow()) - timedelta(seconds=C.OBSERVED_TTL_S)
    return tuple(
        k.seen(r.bytes, r.kv_bytes, r.at.date().isoformat(), r.node, r.version)
        for k in observed.kinds
        for r in k.runs
        if not r.flagged and r.at >= oldest
    )


def remember(ident: str, observed: Observed) -> None:
    """What this process just wrote of a model: planned with at once."""
    _cache[ident] = (time.monotonic(), observed)


def forget() -> None:
    """Drop what this process read (tests)."""
    _cache.clear()


def furthest_off(store: Store, count: int = 5) -> list[tuple[str, Kind, Run]]:
    """The models whose estimate was furthest off: for each, its model name, and its kind and run whose
    footprint was furthest from the formula."""
    k, r = store.keys, store.redis
    idents = [text(i) for i in r.zrange(k.estimates_off, 0, count - 1, desc=True)]
    out = []
    for ident, raw in zip(idents, r.mget([k.observed(i) for i in idents]) if idents else [], strict=True):
        obs = parsed(ident, raw)
        worst = _worst(obs.kinds) if obs else None
        if obs is not None and worst is not None:
            out.append((obs.model, *worst))
    return out


def _worst(kinds: Iterable[Kind]) -> tuple[Kind, Run] | None:
    pairs: Sequence[tuple[Kind, Run]] = [(k, r) for k, r in _pairs(kinds) if r.ratio > 0]
    return max(pairs, key=lambda p: abs(math.log2(p[1].ratio)), default=None)
