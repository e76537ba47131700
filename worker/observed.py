"""A model's observations as stored (``observed:{identity}``: what its engines were measured to hold, per
kind of replica) and read back: for a plan (``seen_for``, ``prefetch``: re-read at most every
``OBSERVED_REREAD_S``), and for ``modelplan status`` (``furthest_off``). ``worker.observations`` writes
them."""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Iterable, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from planner.model import Artifact, Engine
from planner.observed import Seen
from worker import constants as C
from worker import logs
from worker.records import ServeRequest
from worker.scripts import text
from worker.store import Store

log = logs.get_logger("modelplan.observations")


class Run(BaseModel):
    """One hold's footprint as kept: its largest card's figure (or the RAM's peak), the KV cache's part of
    it (0 unknown), what the formula counted, and whether it was flagged."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    hold_id: str
    at: datetime
    bytes: int
    kv_bytes: int = 0
    formula_bytes: int
    ratio: float
    flagged: bool = False


class Kind(BaseModel):
    """The runs of one kind of replica of a model, at one engine release."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    artifact: str
    engine: Engine
    gpu_class: str = ""
    gpus_per_node: int = 0
    nodes: int = 0
    context: int
    settings: tuple[str, ...] = ()
    version: str = ""
    runs: tuple[Run, ...] = ()

    @property
    def where(self) -> tuple[str, Engine, str, int, int, int, tuple[str, ...]]:
        """What makes a kind: artifact, engine, card class, cards a node, nodes, context, settings."""
        return (self.artifact, self.engine, self.gpu_class, self.gpus_per_node, self.nodes, self.context, self.settings)

    def seen(self, figure: int, kv_bytes: int, since: str = "") -> Seen:
        """A run of this kind as a plan reads it."""
        return Seen(*self.where, figure, kv_bytes, 1, since)


class Observed(BaseModel):
    """``observed:{identity}``: a model's kinds of replica with their runs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    kinds: tuple[Kind, ...] = ()

    @property
    def furthest(self) -> float:
        """The furthest any run's ratio is from 1, as ``|log2 ratio|`` (0: none)."""
        return max((abs(math.log2(r.ratio)) for k in self.kinds for r in k.runs if r.ratio > 0), default=0.0)


def identity(req: ServeRequest) -> str:
    """What names a model across requests: a digest of its files' names and sizes (a request carries no
    repository revision; the same files are the same model whatever the repository is called)."""
    return _digest(req.artifacts)


@lru_cache(maxsize=C.OBSERVED_CACHE_KEPT)
def _digest(artifacts: tuple[Artifact, ...]) -> str:
    """Worked out once per set of files: a wake-up pass asks it of every job it plans."""
    files = sorted((a.name, a.bytes, a.shards) for a in artifacts)
    return hashlib.sha256(json.dumps(files).encode()).hexdigest()[:32]


def release(version: str) -> tuple[int, ...]:
    """An engine's release for ordering: its numbers in turn (``0.11.0`` → (0, 11, 0), ``b6500`` →
    (6500,)); "" (unknown) before any."""
    return tuple(int(n) for n in re.findall(r"\d+", version))


_cache: dict[str, tuple[float, Observed | None]] = {}


def read(store: Store, ident: str) -> Observed | None:
    """``observed:{ident}``, or None when there is none or it does not parse (then it is said and written
    over by the next run)."""
    return parsed(ident, store.redis.get(store.keys.observed(ident)))


def parsed(ident: str, raw: Any) -> Observed | None:
    if raw is None:
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
        try:
            _cache[ident] = (now, Observed.model_validate_json(raw) if raw is not None else None)
        except ValidationError:
            _cache[ident] = (now, None)


def as_seen(observed: Observed | None) -> tuple[Seen, ...]:
    if observed is None:
        return ()
    return tuple(
        k.seen(r.bytes, r.kv_bytes, r.at.date().isoformat()) for k in observed.kinds for r in k.runs if not r.flagged
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
    for raw in r.mget([k.observed(i) for i in idents]) if idents else []:
        try:
            obs = Observed.model_validate_json(raw) if raw is not None else None
        except ValidationError:
            obs = None
        worst = _worst(obs.kinds) if obs else None
        if obs is not None and worst is not None:
            out.append((obs.model, *worst))
    return out


def _worst(kinds: Iterable[Kind]) -> tuple[Kind, Run] | None:
    pairs: Sequence[tuple[Kind, Run]] = [(k, r) for k in kinds for r in k.runs if r.ratio > 0]
    return max(pairs, key=lambda p: abs(math.log2(p[1].ratio)), default=None)
