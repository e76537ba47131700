"""The pool ``modelplan plan`` plans on: a file of node records, or the live pool in Redis read as a worker
reads it, with what the engines of the model were observed to hold; read only, nothing written."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from planner import Estimate, InvalidInput, Option, PoolNode, Repository, Settings, parse_pool, plan, pool_nodes
from planner.observed import Seen, observe
from producer.client import Client
from producer.limits import read_bounded
from producer.named import flagged
from worker import observed
from worker.config import PREFIX_ENV, REDIS_URL_ENV, redact
from worker.config import prefix as default_prefix
from worker.config import redis_url as default_redis_url
from worker.records import ServeRequest


@dataclass
class PlanPool:
    """The nodes a dry run plans on, and where they were read. ``client``: the live pool's, through which
    the model's observations are read; None for a file."""

    nodes: list[PoolNode]
    where: str
    client: Client | None = None
    seen: tuple[Seen, ...] = field(default=())

    @property
    def live(self) -> bool:
        return self.client is not None

    def observe(self, request: ServeRequest) -> tuple[Seen, ...]:
        """What the engines of ``request``'s model were measured to hold, as a worker reads it (none for a
        file); kept for ``options``."""
        if self.client is not None:
            self.seen = observed.as_seen(observed.read(self.client.store, observed.identity(request)))
        return self.seen

    def close(self) -> None:
        if self.client is not None:
            self.client.redis.close()


def read_pool(args: argparse.Namespace) -> PlanPool:
    """``--pool FILE``, else the live pool at ``--redis-url`` (or ``MODELPLAN_REDIS_URL``) under ``--prefix``;
    refused where neither is given, or both."""
    url = args.redis_url or os.environ.get(REDIS_URL_ENV)
    if args.pool and args.redis_url:
        raise InvalidInput("arguments", "--pool/--redis-url", "give one pool: a file (--pool) or a Redis (--redis-url)")
    if args.pool:
        return PlanPool(_file_nodes(args.pool), f"the pool in {args.pool}")
    if not url:
        raise InvalidInput(
            "arguments",
            "--pool/--redis-url",
            f"give a pool: a file of node records (--pool) or a Redis (--redis-url, or ${REDIS_URL_ENV})",
        )
    prefix = default_prefix(args.prefix)
    client = Client.from_url(default_redis_url(url), prefix)
    try:
        nodes = client.pool().nodes
    except BaseException:
        client.redis.close()
        raise
    return PlanPool(nodes, f"the live pool at {redact(url)} (prefix {prefix!r}, ${PREFIX_ENV})", client)


def _file_nodes(path: str) -> list[PoolNode]:
    try:
        text = read_bounded(path, "--pool", "pool_bytes").decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidInput(path, "--pool", f"cannot be read: {e}") from e
    try:
        return pool_nodes(parse_pool(text, path))
    except InvalidInput as e:
        raise flagged(e, {path: "--pool"}) from e


def options(
    repo: Repository,
    nodes: Sequence[PoolNode],
    context: int,
    estimate: Estimate,
    settings: Settings,
    seen: Sequence[Seen],
) -> list[Option]:
    """The ranked options as a worker would count them: each kind of replica its engines were seen to hold
    (by as many nodes as ``MODELPLAN_OBSERVED_QUORUM`` asks) counted as observed."""
    ranked = plan(repo, list(nodes), context, estimate, settings)
    if not seen or not ranked:
        return ranked
    return observe(ranked, seen, repo.artifacts, repo.shape, list(nodes), context, settings, observed.quorum())


def pool_line(pool: PlanPool) -> str:
    """Which pool a dry run read: for the live pool, its Redis, its nodes and the runs observed of the model."""
    n = len(pool.nodes)
    runs = len(pool.seen)
    seen = f"; {runs} observed run{'s' if runs != 1 else ''} of this model" if pool.live else ""
    return f"planned on {pool.where}: {n} node{'s' if n != 1 else ''}{seen}; nothing written"
