"""Serve requests made from a repository: its artifacts and shape, with what a caller asks of them."""

from __future__ import annotations

from typing import Any

from planner import DEFAULT_CONTEXT, Estimate, Settings, repository_from_folder, repository_from_listing
from planner.repository import Repository
from producer.limits import check_index, check_listing
from worker.records import ServeRequest, parse_request


def request_from_repository(
    repo: Repository,
    *,
    model: str,
    context: int = DEFAULT_CONTEXT,
    artifact: str | None = None,
    priority: int = 0,
    replicas: int = 1,
    fallback: bool = False,
    estimate: Estimate | None = None,
    settings: Settings | None = None,
    model_path: str | None = None,
) -> ServeRequest:
    return parse_request(
        {
            "model": model,
            "artifacts": [a.to_json() for a in repo.artifacts],
            "shape": {
                "kv_bytes_per_token": repo.shape.kv_bytes_per_token,
                "kv_heads": repo.shape.kv_heads,
                "params": repo.shape.params,
                "max_context": repo.shape.max_context,
                "heads": repo.shape.heads,
                "mla": repo.shape.mla,
                "windows": [list(w) for w in repo.shape.windows],
                "max_context_source": repo.shape.max_context_source,
                "vision_params": repo.shape.vision_params,
                "layers": repo.shape.layers,
                "hidden": repo.shape.hidden,
                "vocab": repo.shape.vocab,
                "experts": repo.shape.experts,
                "attention_layers": repo.shape.attention_layers,
                "state_bytes_per_sequence": repo.shape.state_bytes_per_sequence,
                "vision_hidden": repo.shape.vision_hidden,
            },
            "context": context,
            "artifact": artifact,
            "priority": priority,
            "replicas": replicas,
            "fallback": fallback,
            "estimate": estimate,
            "settings": settings.model_dump(exclude_none=True) if settings is not None else None,
            "model_path": model_path,
        }
    )


def request_from_listing(
    files: Any, config: Any, index: Any = None, *, model: str, headers: Any = None, **kw: Any
) -> ServeRequest:
    """A serve request for a repository given as its file listing and ``config.json`` data, and where they
    are at hand its safetensors ``headers`` (``planner.weights``): the request carries the shape they
    correct, not the headers."""
    check_listing(files)
    check_index(index)
    return request_from_repository(repository_from_listing(files, config, index, headers=headers), model=model, **kw)


def request_from_folder(folder: str, *, model: str | None = None, **kw: Any) -> ServeRequest:
    """A serve request for a repository in a local folder."""
    return request_from_repository(repository_from_folder(folder), model=model or folder, **kw)
