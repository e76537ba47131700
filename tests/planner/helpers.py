"""Small builders for planner tests."""

from __future__ import annotations

from planner import Artifact, PoolNode
from planner.constants import GIB


def gpu_node(
    node_id: str,
    gpu_class: str = "h100-80g",
    gpus: int = 1,
    free: int | None = None,
    *,
    fabric: str = "",
    mem: int | None = None,
    host: int = 0,
    host_free: int | None = None,
) -> PoolNode:
    from planner import mem_from_class

    return PoolNode(
        id=node_id,
        gpu_class=gpu_class,
        fabric=fabric,
        gpu_mem_gb=mem if mem is not None else mem_from_class(gpu_class),
        gpus=gpus,
        free_gpus=gpus if free is None else free,
        host_mem_gb=host,
        host_free_gb=host if host_free is None else host_free,
    )


def cpu_node(node_id: str, host: int, host_free: int | None = None) -> PoolNode:
    return PoolNode(id=node_id, host_mem_gb=host, host_free_gb=host if host_free is None else host_free)


def gguf(name: str, gib: float) -> Artifact:
    from planner import quant_of

    return Artifact(name=name, format="gguf", bytes=int(gib * GIB), quant=quant_of(name))


def original(gib: float) -> Artifact:
    return Artifact(name="original", format="safetensors", bytes=int(gib * GIB), quant="bf16")
