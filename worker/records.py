"""The records modelplan keeps in Redis, as pydantic models with explicit JSON conversion.

A node's heartbeat and a job's record are JSON strings that any service can read with ``GET``; every
record carries ``schema_version`` so that a reader can tell what it holds.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from planner import Artifact, Estimate, InvalidInput, Option, Settings, Shape, check_context
from planner.pool import ID_REGEX, invalid_from
from planner.settings import check_settings
from worker.conditions import EngineCondition
from worker.constants import PRIORITY_MAX, SCHEMA_VERSION, SchemaVersion
from worker.errors import BadRecord

MAX_REPLICAS = 256
"""How many replicas one job may ask for."""
MAX_ARTIFACTS = 1000
"""How many artifacts one request may carry; the largest repositories hold a few dozen."""


def utcnow() -> datetime:
    return datetime.now(UTC)


_DATETIME = TypeAdapter(datetime)


def json_of(at: datetime) -> str:
    """``at`` as a record's JSON holds a time."""
    return _DATETIME.dump_json(at).decode()


class JobState(StrEnum):
    """Where a job stands. The score of its entry in ``jobs:{state}`` is given beside each."""

    QUEUED = "queued"
    """Recorded and on the queue (score: when queued, ms)."""
    PLANNING = "planning"
    """A worker holds it under a lease (score: when the lease ends, ms)."""
    PLACED = "placed"
    """Its cards, or host memory, are reserved on named nodes (score: when placed, ms); a job scaled to
    zero replicas is placed with none, and holds nothing."""
    WAITING = "waiting"
    """Its best option exists but is busy; it waits for that hardware (score: priority, then arrival)."""
    FAILED = "failed"
    """Nothing in the pool could ever hold it; the record says what was too large for what (final)."""
    CANCELLED = "cancelled"
    """Ended by ``cancel`` while no replica ran: queued, planning, or waiting with none placed (final)."""
    RELEASED = "released"
    """Ended by ``release``; what its replicas held was freed, and each keeps where it ran (final)."""

    @property
    def final(self) -> bool:
        return self in (JobState.FAILED, JobState.CANCELLED, JobState.RELEASED)

    @property
    def settled(self) -> bool:
        """A state ``watch`` stops at: planning has an outcome that only an outside change alters."""
        return self.final or self is JobState.PLACED


def as_json(data: Any, source: str) -> str:
    """Data as JSON text, so that it is validated as JSON arrives (lists for tuples, objects for
    dataclasses), whether it came from a file or from Python."""
    if isinstance(data, str):
        return data
    if isinstance(data, bytes):
        try:
            return data.decode()
        except UnicodeDecodeError as e:
            raise InvalidInput(source, "(record)", f"not UTF-8 text: {e.reason} at byte {e.start}") from e
    try:
        return json.dumps(data, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as e:
        raise InvalidInput(source, "(record)", f"not JSON data: {str(e)[:80]}") from e


MODEL_PATH = re.compile(r"/[^\x00-\x1f\x7f]*|[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
"""A request's ``model_path``: an absolute path (no control character), or a Hub id as ``producer.hub``'s
``REPO_ID_PATTERN`` has it."""


class ServeRequest(BaseModel):
    """What a service asks to run: a repository's artifacts and model shape, resolved on the client side so
    that workers need no access to the files, with the context, priority and an optional pinned artifact."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    model: str = Field(min_length=1, max_length=200)
    """A name for people: the repository, such as ``meta-llama/Llama-3.1-8B-Instruct``."""
    artifacts: tuple[Artifact, ...] = Field(min_length=1, max_length=MAX_ARTIFACTS)
    shape: Shape
    context: int
    artifact: str | None = None
    """Pin one artifact by name; the others are not considered."""
    priority: int = Field(default=0, ge=0, le=PRIORITY_MAX)
    replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    fallback: bool = False
    """While its best option is busy, run on the best option free now, and move when the best frees."""
    estimate: Estimate | None = None
    """How each card's need is counted (``measured`` or ``seed``); none: the deployment's default."""
    settings: Settings | None = None
    """The engines' settings that move memory (``planner.settings``); each one left out: the deployment's,
    else the engine's default on the card."""
    # left out of the record when None: a request that names none reads as before to an older modelplan
    model_path: str | None = Field(default=None, min_length=1, max_length=1024, exclude_if=lambda v: v is None)
    """Where the nodes load the model from: a Hub id (``org/name``) or an absolute path on the nodes (a
    folder of the original weights or of the GGUF files, or one ``.gguf`` file). None: ``model`` where it is
    a Hub id, else the folder of that name under each agent's ``--models-dir``
    (``producer.agent.engines``)."""

    @model_validator(mode="after")
    def _consistent(self) -> ServeRequest:
        if not self.model.isprintable():
            raise ValueError("model holds control characters")
        if self.model_path is not None and not MODEL_PATH.fullmatch(self.model_path):
            raise ValueError(
                f"model_path {self.model_path[:80]!r} is neither a Hub id (org/name) nor an absolute path on the nodes"
            )
        names = [a.name for a in self.artifacts]
        if len(set(names)) != len(names):
            raise ValueError("artifacts: two artifacts share a name")
        for a in self.artifacts:
            if not 0 < a.bytes <= 1 << 50 or not 0 <= a.shards <= 10_000 or not a.name or len(a.name) > 1024:
                raise ValueError(f"artifacts: {a.name[:80]!r} has impossible bytes or shards")
            if not 0 <= a.load_bytes <= a.bytes:
                raise ValueError(f"artifacts: {a.name[:80]!r} has load_bytes past its bytes")
            if not a.name.isprintable():
                raise ValueError(f"artifacts: the name {a.name[:80]!r} holds control characters")
        s = self.shape
        if not (0 <= s.kv_bytes_per_token <= 1 << 32 and 0 <= s.kv_heads <= 1 << 24 and 0 <= s.params <= 1 << 50):
            raise ValueError("shape: a field is out of range")
        windows_ok = len(s.windows) <= 8 and all(
            0 < w <= 1 << 24 and 0 <= b <= s.kv_bytes_per_token for w, b in s.windows
        )
        if not (0 <= s.heads <= 1 << 24 and windows_ok and len(s.max_context_source) <= 200):
            raise ValueError("shape: a field is out of range")
        if not 0 <= s.vision_params <= s.params:
            raise ValueError("shape: a field is out of range")
        if not all(0 <= n <= 1 << 24 for n in (s.layers, s.hidden, s.vocab, s.experts, s.attention_layers)):
            raise ValueError("shape: a field is out of range")
        if not 0 <= s.vision_hidden <= 1 << 24:
            raise ValueError("shape: a field is out of range")
        if not 0 <= s.state_bytes_per_sequence <= 1 << 50:
            raise ValueError("shape: a field is out of range")
        if self.artifact is not None and self.artifact not in names:
            shown = ", ".join(repr(n[:80]) for n in names[:5]) + (
                f" and {len(names) - 5} more" if len(names) > 5 else ""
            )
            raise ValueError(f"artifact {self.artifact[:80]!r} is not one of the repository's: {shown}")
        check_context(s, self.context)
        if self.settings is not None:
            check_settings(self.settings, "request")
        return self

    def planned_artifacts(self) -> tuple[Artifact, ...]:
        if self.artifact is None:
            return self.artifacts
        return tuple(a for a in self.artifacts if a.name == self.artifact)


def parse_request(data: Any, source: str = "request") -> ServeRequest:
    """A serve request from JSON data (text or parsed), or ``InvalidInput`` naming the field."""
    try:
        return ServeRequest.model_validate_json(as_json(data, source))
    except ValidationError as e:
        raise invalid_from(e, source) from e
    except InvalidInput as e:
        raise InvalidInput(source, e.field, e.problem) from e


class Reservation(BaseModel):
    """What a replica holds on one node. ``hold_id`` (``{job_id}:{replica}:{version}``) names it in
    ``held:{node}`` and in a heartbeat's ``started``; a replica moved or placed again gets a new one."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node_id: str
    hold_id: str
    gpus: int = Field(ge=0)
    host_gb: float = Field(ge=0)
    """GiB of RAM, for a replica on the CPU."""


class WaitRecord(BaseModel):
    """Why a replica is not on its best option: ``kind`` is ``resources`` (the hardware is busy),
    ``priority`` (it would fit in cards held for a job ahead) or ``gone`` (nothing in the pool holds it
    now); ``nodes`` could hold it, nearest to free first; ``missing`` is what each lacks now (cards, or GiB
    of RAM for the CPU)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["resources", "priority", "gone"]
    option: Option | None = None
    nodes: tuple[str, ...] = ()
    missing: dict[str, int] = Field(default_factory=dict)
    text: str = ""


class Replica(BaseModel):
    """One replica of a job. ``state``: ``placed`` on the job's best option, ``fallback`` on another
    that was free while the best was busy, or ``waiting``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int = Field(ge=0)
    state: Literal["placed", "fallback", "waiting"]
    option: Option | None = None
    """Where it runs now."""
    placement: tuple[Reservation, ...] = ()
    wait: WaitRecord | None = None
    engine: EngineCondition | None = None
    """What its engine is doing (``worker.conditions``): a condition beside the replica's state, written from
    its node's heartbeats; none until an agent reports it."""
    start_failures: int = Field(default=0, ge=0)
    """How many times its engine ran out of memory at start and it was planned again with more."""

    @property
    def running(self) -> bool:
        """Whether it holds cards (or memory) and its engine is not known dead."""
        return bool(self.placement) and not (self.engine is not None and self.engine.dead)


class Nomination(BaseModel):
    """Cards held on nodes for the waiting job at the head of the line, so that small jobs do not keep
    taking each card that frees: ``holds`` grow as cards free until the job fits; past ``until`` without
    a card freeing into them, they are let go."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    holds: tuple[Reservation, ...]
    wanted: int
    """Cards the job needs on each node."""
    until: datetime


class JobRecord(BaseModel):
    """A serve job as stored at ``job:{job_id}``: ``state`` says where it stands, ``option`` is its best
    option (what its replicas run on, or wait for), ``replicas`` each replica with its nodes and cards,
    and ``reason`` says why, in words."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: SchemaVersion = SCHEMA_VERSION
    job_id: str
    state: JobState
    version: int = Field(ge=0)
    """Rises with every change; a change is committed only against the version it was made from."""
    updated_at: datetime
    worker: str | None = None
    """The worker holding it while planning."""
    lease_until: datetime | None = None
    # the fields above come first, in this order, in every stored record: ``claim.lua`` takes a queued job
    # into planning by rewriting them alone
    request: ServeRequest
    wanted: int
    """Replicas wanted now (the request's, until scaled)."""
    seq: int
    """Arrival order."""
    created_at: datetime
    attempts: int = 0
    """How many times it has been planned."""
    option: Option | None = None
    replicas: tuple[Replica, ...] = ()
    alternatives: tuple[Option, ...] = ()
    nomination: Nomination | None = None
    hold_lapsed_at: datetime | None = None
    """When its nomination last lapsed: it is not held for again until NOMINATION_S later."""
    reason: str = ""
    ever_fit: bool = False
    """Whether any plan ever found an option: a job that once could run waits, rather than fails, when its
    hardware leaves the pool."""
    owner: str | None = Field(default=None, pattern=ID_REGEX)
    """The client whose own request stream carried the submit; none for the shared stream and direct calls.
    Only the owner may release, cancel, scale or retry the job through a request stream."""

    @property
    def placement(self) -> tuple[Reservation, ...]:
        """Every reservation of every replica."""
        return tuple(r for rep in self.replicas for r in rep.placement)

    @property
    def holds(self) -> tuple[Reservation, ...]:
        """Everything the job holds: its replicas' reservations and its nomination."""
        return self.placement + (self.nomination.holds if self.nomination else ())

    @property
    def pending(self) -> bool:
        """Whether some replica is not on the best option: the job is re-planned when capacity frees."""
        return not self.state.final and any(r.state != "placed" for r in self.replicas)

    @property
    def summary(self) -> str:
        """``placed 2 of 3``: replicas running (on the best option or a fallback) of those wanted, and how
        many of them run on a fallback. A final record says what the end left: ``2 of 3 were running;
        freed``, ``none was running``, ``nothing could hold it``; a job scaled to zero, ``scaled to zero``."""
        running = sum(1 for r in self.replicas if r.placement)
        fallback = sum(1 for r in self.replicas if r.state == "fallback")
        if self.state is JobState.FAILED:
            return "nothing could hold it"
        if self.state.final:
            if not running:
                return "none was running"
            return f"{running} of {self.wanted} {'was' if running == 1 else 'were'} running; freed"
        if self.wanted == 0 and not self.replicas:
            return "scaled to zero"
        text = f"placed {running} of {self.wanted}"
        return text + (f", {fallback} on a fallback" if fallback else "")

    def to_stored(self) -> str:
        """The record's JSON text, as stored in ``job:{id}``."""
        return self.model_dump_json()

    @classmethod
    def from_stored(cls, raw: str | bytes) -> JobRecord:
        """A record from its stored JSON text (``read_job`` reports one that does not parse)."""
        return cls.model_validate_json(raw)

    def advance(self, state: JobState, *, at: datetime, **changes: Any) -> JobRecord:
        """The next version of this record, in ``state``, made at ``at`` (the caller's clock)."""
        changes.update(state=state, version=self.version + 1, updated_at=at)
        return self.model_copy(update=changes)


Stored = TypeVar("Stored", bound=BaseModel)


def stored_schema(raw: bytes | str) -> int:
    """The ``schema_version`` a stored record says it has: 0 when it says none or is not a JSON object."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return 0
    version = data.get("schema_version") if isinstance(data, dict) else None
    return version if isinstance(version, int) and not isinstance(version, bool) else 0


def read_record(model: type[Stored], raw: bytes | str, key: str) -> Stored:
    """A stored record, or ``BadRecord`` naming ``key`` and what is wrong with it in one line; ``newer``
    when a newer version of modelplan wrote it."""
    try:
        return model.model_validate_json(raw)
    except (ValidationError, ValueError, RecursionError) as e:
        blob = raw.encode() if isinstance(raw, str) else bytes(raw)
        version = stored_schema(raw)
        if version > SCHEMA_VERSION:
            what = f"written by a newer modelplan (schema_version {version}; this one reads {SCHEMA_VERSION})"
            raise BadRecord(key, what, blob, newer=True) from e
        if isinstance(e, ValidationError):
            problem = invalid_from(e, "")
            what = f"{problem.field}: {problem.problem}"
        else:
            what = f"not a record ({type(e).__name__})"
        raise BadRecord(key, what, blob) from e
