"""modelplan's planner: pure functions from a repository's files, a model's shape and a pool snapshot to
ranked ways of running it. No Redis, queue, logging, clock or network in here."""

from __future__ import annotations

from planner.configs import supported_model_types
from planner.constants import DEFAULT_CONTEXT
from planner.errors import InvalidInput, ModelplanError
from planner.estimate import DEFAULT_ESTIMATE, ESTIMATES, Estimate
from planner.model import ORIGINAL, Artifact, Option, PoolNode, Shape
from planner.options import classes, options, quality, rank, rank_key
from planner.pool import NodeReport, parse_node, parse_pool, pool_nodes
from planner.quant import QUANT_BITS, mem_from_class, quant_of
from planner.repository import Repository, repository_from_folder, repository_from_listing
from planner.settings import NO_SETTINGS, LlamacppSettings, Settings, VllmSettings, parse_settings
from planner.shape import shape_from_config

MAX_CONTEXT = 1 << 24
"""The longest context a request may name (16M tokens): past every model, short of overflowing sizes."""


def check_context(shape: Shape, context: int, source: str = "request") -> int:
    """``context`` if a model of ``shape`` can take it, else ``InvalidInput`` saying what it may be."""
    if isinstance(context, bool) or not isinstance(context, int) or not 0 < context <= MAX_CONTEXT:
        allowed = f"must be a whole number of tokens from 1 to {MAX_CONTEXT}"
        raise InvalidInput(source, "context", f"{allowed} (given {context!r})")
    if shape.max_context and context > shape.max_context:
        plain = f"max_position_embeddings {shape.max_context}"
        where = shape.max_context_source or plain
        limit = plain if where == plain else f"{shape.max_context} tokens ({where}, as vLLM derives max_model_len)"
        raise InvalidInput(source, "context", f"{context} is more than the model's {limit}")
    return context


def plan(
    repo: Repository,
    nodes: list[PoolNode],
    context: int = DEFAULT_CONTEXT,
    estimate: Estimate = DEFAULT_ESTIMATE,
    settings: Settings = NO_SETTINGS,
) -> list[Option]:
    """Every way the repository's artifacts could run on ``nodes``, best first, each card's need counted by
    ``estimate`` for the engines started with ``settings`` (the rest at their defaults for the card)."""
    return options(repo.artifacts, repo.shape, nodes, check_context(repo.shape, context), estimate, settings)


__all__ = [
    "DEFAULT_CONTEXT",
    "DEFAULT_ESTIMATE",
    "ESTIMATES",
    "MAX_CONTEXT",
    "NO_SETTINGS",
    "ORIGINAL",
    "QUANT_BITS",
    "Artifact",
    "Estimate",
    "InvalidInput",
    "LlamacppSettings",
    "ModelplanError",
    "NodeReport",
    "Option",
    "PoolNode",
    "Repository",
    "Settings",
    "Shape",
    "VllmSettings",
    "check_context",
    "classes",
    "mem_from_class",
    "options",
    "parse_node",
    "parse_pool",
    "parse_settings",
    "plan",
    "pool_nodes",
    "quality",
    "quant_of",
    "rank",
    "rank_key",
    "repository_from_folder",
    "repository_from_listing",
    "shape_from_config",
    "supported_model_types",
]
