"""A Hugging Face Hub repository (``org/name`` at a revision) as the planner's ``Repository``.

What the planner needs of a repository is its file listing (paths and sizes), its ``config.json`` and,
where there is one, its ``model.safetensors.index.json``; where the client can, the original's safetensors
headers too (range reads of each shard's first bytes), which make the parameter count exact and tell which
layers cache keys and values (``planner.weights``). ``resolve`` asks the Hub for them through
``huggingface_hub`` and caches them in Redis under ``Keys.hub`` for ``HUB_CACHE_TTL_S`` (the headers as
what was read of them), so that a thousand jobs for one model ask the Hub once. ``huggingface_hub`` is
imported only on a cache miss: a producer without it still uses what another one cached.

Many callers missing the cache at once (a batch submitting one new model) do not all ask the Hub: the first
takes a short lock (``Keys.lock``) and asks; the others look at the cache every ``HUB_LOCK_POLL_S`` and,
past ``HUB_LOCK_WAIT_S``, ask the Hub themselves. A holder that fails lets go of the lock at once, and one
that dies loses it after ``HUB_LOCK_TTL_S``; either way a waiter pays a wait, never a failure of its own.

    from producer.hub import resolve
    repo = resolve("meta-llama/Llama-3.1-8B-Instruct", cache=client.redis, keys=client.keys)
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

import redis
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from planner.errors import InvalidInput
from planner.quantconfig import original_quant
from planner.repository import (
    MAX_FILE_BYTES,
    Repository,
    original_safetensors,
    parse_listing,
    repository_from_listing,
)
from planner.weights import WeightsReading, read_weights
from producer.errors import HubClientMissing, HubError, HubUnavailable
from producer.hubclient import HUB_REQUEST_TIMEOUT_S, HfHubClient, HubClient, HubListing, named_error
from worker.errors import redis_failure
from worker.ids import ID_PATTERN
from worker.keys import Keys
from worker.records import utcnow

__all__ = [
    "HUB_CACHE_TTL_S",
    "HUB_REQUEST_TIMEOUT_S",
    "HfHubClient",
    "HubClient",
    "HubEntry",
    "HubListing",
    "check_repo_id",
    "check_revision",
    "looks_like_repo_id",
    "resolve",
]

HUB_CACHE_TTL_S = 3600
"""How long a resolved repository is cached: listings change rarely, and a new upload shows within the
hour."""

HUB_LOCK_TTL_S = 30
"""How long the lock of one resolve lives: past the three requests a resolve makes and its header reads
(``HEADER_READS`` at a time: about 20 rounds of one range request for a model of 163 shards), so a live
holder keeps it; a holder that died frees it within this."""

HUB_LOCK_WAIT_S = 15.0
"""How long a caller waits for another's resolve to land in the cache before asking the Hub itself."""

HUB_LOCK_POLL_S = 0.1
"""How often a waiting caller looks at the cache: one GET each time; a resolve takes about a second."""

CONFIG_FILE = "config.json"
INDEX_FILE = "model.safetensors.index.json"
QUANT_FILE = "hf_quant_config.json"
"""ModelOpt's account of a quantised checkpoint whose config.json names no quantization_config."""
ADAPTER_FILE = "adapter_config.json"

REPO_ID_PATTERN = re.compile(r"(?P<org>[A-Za-z0-9][A-Za-z0-9._-]{0,95})/(?P<name>[A-Za-z0-9][A-Za-z0-9._-]{0,95})")
"""A Hub repository id: ``org/name``, each letters, digits, ``.``, ``_``, ``-``, starting with a letter or
digit, up to 96 (the Hub's own limit); ``..`` nowhere."""


def looks_like_repo_id(text: str) -> bool:
    """Whether ``text`` has the form of a Hub repository id (``org/name``); the CLI asks this of a
    ``--repo`` value that is not a local folder."""
    return isinstance(text, str) and REPO_ID_PATTERN.fullmatch(text) is not None and ".." not in text


def check_repo_id(repo_id: str) -> str:
    """``repo_id`` if it names a Hub repository, else ``InvalidInput`` saying what is allowed."""
    if not looks_like_repo_id(repo_id):
        shown = repr(repo_id) if len(repr(repo_id)) <= 80 else repr(repo_id)[:77] + "..."
        raise InvalidInput(
            "--repo",
            "repo_id",
            f"{shown} is not a Hugging Face Hub repository: org/name, each letters, digits, '.', '_' and '-', "
            "starting with a letter or digit, up to 96, no '..'",
        )
    return repo_id


def check_revision(revision: str) -> str:
    """``revision`` if it can name a cache key, else ``InvalidInput`` saying what is allowed."""
    if not isinstance(revision, str) or not ID_PATTERN.fullmatch(revision):
        shown = repr(revision) if len(repr(revision)) <= 80 else repr(revision)[:77] + "..."
        raise InvalidInput(
            "--revision",
            "revision",
            f"{shown} is not supported: a branch, tag or commit of letters, digits, '.', '_' and '-' "
            "(no '/'), starting with a letter or digit, up to 128",
        )
    return revision


# --- what the cache holds -------------------------------------------------------------------------------


class HubFile(BaseModel):
    """One file of a cached listing."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    path: str = Field(min_length=1, max_length=1024)
    size: int = Field(ge=0, le=MAX_FILE_BYTES)


class HubEntry(BaseModel):
    """A resolved repository as the cache holds it (``Keys.hub``, JSON): its listing, its ``config.json``,
    the ``metadata`` of its ``model.safetensors.index.json`` (null without one), the commit the revision
    was, and when it was fetched."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1] = 1
    repo_id: str
    revision: str
    commit: str
    fetched_at: datetime
    listing: tuple[HubFile, ...]
    config: dict[str, Any]
    index: dict[str, Any] | None = None
    hf_quant: dict[str, Any] | None = None
    """ModelOpt's ``hf_quant_config.json``, where the repository has one."""
    weights: dict[str, Any] | None = None
    """What the original's safetensors headers say (``WeightsReading.to_json``), where they were read."""

    @field_validator("weights")
    @classmethod
    def _a_reading(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        """A damaged reading fails the entry, as any other damaged field does: it is asked for again."""
        if value is not None:
            try:
                WeightsReading.from_json(value)
            except (AttributeError, TypeError, ValueError) as e:
                raise ValueError(f"not a reading of safetensors headers: {e}") from e
        return value

    def to_json(self) -> str:
        # optional parts are left out where there are none, so entries read the same as before they were kept
        empty = {name for name in ("hf_quant", "weights") if getattr(self, name) is None}
        return self.model_dump_json(exclude=empty or None)

    @classmethod
    def from_json(cls, raw: str | bytes) -> HubEntry:
        return cls.model_validate_json(raw)

    def repository(self) -> Repository:
        return repository_from_listing(
            [f.model_dump() for f in self.listing],
            self.config,
            self.index,
            hf_quant=self.hf_quant,
            source=f"{self.repo_id}@{self.revision}",
            weights=WeightsReading.from_json(self.weights) if self.weights is not None else None,
        )


# --- resolve --------------------------------------------------------------------------------------------


def resolve(
    repo_id: str,
    revision: str = "main",
    *,
    cache: redis.Redis | None,
    keys: Keys,
    hub_client: HubClient | None = None,
    ttl: int = HUB_CACHE_TTL_S,
) -> Repository:
    """The repository ``repo_id`` (``org/name``) at ``revision`` on the Hugging Face Hub.

    A cached entry is used as it is; otherwise the Hub is asked (through ``hub_client``, else
    ``HfHubClient``), and what it answered is cached for ``ttl`` seconds once the planner has read it
    without fault. With ``cache`` None the Hub is asked every time.

    Raises ``InvalidInput`` for a malformed ``repo_id`` or ``revision`` (before anything is asked), and for
    a repository without ``config.json`` or that the planner cannot read; ``HubUnavailable`` (its subclass
    ``HubClientMissing`` when ``huggingface_hub`` is not installed) when the Hub cannot be asked;
    ``HubRepoNotFound`` when the repository or revision is missing, private or gated; ``RedisUnavailable``
    when the cache cannot be reached, and the other errors of ``worker.errors.redis_failure`` when it
    answers with one. Only a resolve that succeeds writes to the cache.
    """
    check_repo_id(repo_id)
    check_revision(revision)
    if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl <= 0:
        raise InvalidInput("resolve", "ttl", f"must be a whole number of seconds above 0 (given {ttl!r})")

    def fetch() -> HubEntry:
        return _fetch(repo_id, revision, hub_client)

    if cache is None:
        return fetch().repository()
    key = keys.hub(repo_id, revision)
    lock_name = "hub." + hashlib.sha256(f"{repo_id}@{revision}".encode()).hexdigest()[:32]
    try:
        entry = _cached_or_fetched(cache, key, keys.lock(lock_name), fetch, ttl)
    except redis.RedisError as e:
        raise redis_failure(_where(cache), e) from e
    return entry.repository()


def _cached_or_fetched(
    cache: redis.Redis, key: str, lock_key: str, fetch: Callable[[], HubEntry], ttl: int
) -> HubEntry:
    lock = cache.lock(lock_key, timeout=HUB_LOCK_TTL_S)
    deadline = time.monotonic() + HUB_LOCK_WAIT_S
    while True:
        entry = _read(cache, key)
        if entry is not None:
            return entry
        if lock.acquire(blocking=False):
            try:
                # The holder before us may have stored it between our read and our lock.
                entry = _read(cache, key)
                if entry is None:
                    entry = fetch()
                    cache.set(key, entry.to_json(), ex=ttl)
                return entry
            finally:
                # A lock that lapsed while we asked the Hub is no longer ours to release.
                with contextlib.suppress(redis.exceptions.LockError):
                    lock.release()
        if time.monotonic() >= deadline:
            # The holder is slow or gone: asking twice beats waiting on.
            entry = fetch()
            cache.set(key, entry.to_json(), ex=ttl)
            return entry
        time.sleep(HUB_LOCK_POLL_S)


def _read(cache: redis.Redis, key: str) -> HubEntry | None:
    raw = cache.get(key)
    if raw is None:
        return None
    try:
        return HubEntry.from_json(raw)
    except ValidationError:
        return None  # another schema or a damaged value: asked for again and overwritten


def _fetch(repo_id: str, revision: str, hub_client: HubClient | None) -> HubEntry:
    """What the Hub holds for the repository, read by the planner once, so that nothing unusable is cached."""
    source = f"{repo_id}@{revision}"
    try:
        hub: HubClient = hub_client if hub_client is not None else HfHubClient()
    except ImportError as e:
        raise HubClientMissing(repo_id, revision) from e
    try:
        listing = hub.list_files(repo_id, revision)
        files = parse_listing(list(listing.files), source)
        present = {f.path for f in files}
        config = _read_json(hub, repo_id, revision, listing.commit, CONFIG_FILE) if CONFIG_FILE in present else None
        index = _read_json(hub, repo_id, revision, listing.commit, INDEX_FILE) if INDEX_FILE in present else None
        quant = _read_json(hub, repo_id, revision, listing.commit, QUANT_FILE) if QUANT_FILE in present else None
        adapter = None
        if config is None and ADAPTER_FILE in present:
            adapter = _read_json(hub, repo_id, revision, listing.commit, ADAPTER_FILE)
        weights = None
        originals = original_safetensors(present)
        if isinstance(config, Mapping) and originals:
            weights = _read_headers(hub, repo_id, listing.commit, originals, original_quant(config, quant), source)
    except HubError:
        raise
    except OSError as e:
        raise HubUnavailable(repo_id, revision, named_error(e)) from e
    if adapter is not None:  # an adapter alone: refused naming its base model
        repository_from_listing([f.model_dump() for f in files], None, adapter=adapter, source=source)
    if config is None:
        raise InvalidInput(
            source,
            CONFIG_FILE,
            "not in the repository: modelplan reads the model's shape from it; give --files FILES.json "
            "--config CONFIG.json instead",
        )
    # Only the index's metadata (its total size) counts; its weight map can run to megabytes.
    meta = index.get("metadata") if isinstance(index, Mapping) else None
    repository_from_listing(
        [f.model_dump() for f in files], config, index, hf_quant=quant, source=source, weights=weights
    )
    return HubEntry(
        repo_id=repo_id,
        revision=revision,
        commit=listing.commit,
        fetched_at=utcnow(),
        listing=tuple(HubFile(path=f.path, size=f.size) for f in files),
        config=dict(config),
        index={"metadata": dict(meta)} if isinstance(meta, Mapping) else None,
        hf_quant=dict(quant) if isinstance(quant, Mapping) else None,
        weights=weights.to_json() if weights is not None else None,
    )


def _read_headers(
    hub: HubClient, repo_id: str, commit: str, files: Sequence[str], quant: str, source: str
) -> WeightsReading | None:
    """What the original's safetensors headers say, where the client reads them (``safetensors_headers``,
    which a client may lack) and they can be read; None otherwise, and the config's arithmetic stands."""
    reader = getattr(hub, "safetensors_headers", None)
    if reader is None:
        return None
    headers = reader(repo_id, commit, files)
    if headers is None:
        return None
    try:
        reading = read_weights(headers, quant=quant, source=f"{source} headers")
    except InvalidInput:
        return None  # a file the Hub holds that is no safetensors: the config still plans it
    return reading if reading.params else None


def _read_json(hub: HubClient, repo_id: str, revision: str, commit: str, filename: str) -> Any:
    """A file read at the commit the listing came from, so that both are of one upload; an error about
    it names the revision asked for."""
    try:
        return hub.read_json(repo_id, filename, commit)
    except HubError as e:
        if e.revision == revision:
            raise
        raise e.at(revision) from e


def _where(cache: redis.Redis) -> str:
    """Where the cache is, for a message: no password."""
    kw = cache.connection_pool.connection_kwargs
    if "path" in kw:
        return f"unix://{kw['path']}"
    return f"redis://{kw.get('host', 'localhost')}:{kw.get('port', 6379)}/{kw.get('db', 0)}"
