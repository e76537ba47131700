"""The planner's values: what a repository offers, the model's shape, the pool, and the options.

Names and JSON keys follow the seed: an ``Option`` serialises with the keys other services read
(``artifact``, ``format``, ``engine``, ``cpu``, ``gpu_class``, ``fabric``, ``gpus_per_node``, ``nodes``,
``need_gb``, ``have_gb``, ``hosts``, ``free_now``, ``bits_per_weight``), leaving out the empty ones as
the seed's ``omitempty`` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Format = Literal["gguf", "safetensors"]
Engine = Literal["llamacpp", "vllm"]

ORIGINAL = "original"
"""The artifact name of a repository's own safetensors weights."""


@dataclass(frozen=True, slots=True)
class Artifact:
    """Something a repository offers to serve: one GGUF file (or one split into parts), or its original
    safetensors weights."""

    name: str
    """The file, or the set's name; ``original`` for the original weights."""
    format: Format
    bytes: int
    shards: int = 0
    """How many files make it, when more than one."""
    quant: str = ""
    """The quantisation read from the name, like ``Q4_K_M``; ``bf16`` for original weights."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "format": self.format, "bytes": self.bytes}
        if self.shards:
            out["shards"] = self.shards
        if self.quant:
            out["quant"] = self.quant
        return out


@dataclass(frozen=True, slots=True)
class Shape:
    """What sizes a model's KV cache, and constrains how it splits."""

    kv_bytes_per_token: int
    """One token of context, the whole model."""
    kv_heads: int = 0
    """Must divide by a tensor-parallel width; 0 is unknown."""
    params: int = 0
    """The parameter count, for bits per weight; 0 is unknown."""
    max_context: int = 0
    """The longest context the model was trained for (``max_position_embeddings``); 0 is unknown."""


@dataclass(frozen=True, slots=True)
class PoolNode:
    """One ready node, as a plan sees it."""

    id: str
    gpu_class: str = ""
    """The card class label, ``""`` for a node with no GPU."""
    fabric: str = ""
    gpu_mem_gb: int = 0
    gpus: int = 0
    free_gpus: int = 0
    host_mem_gb: int = 0
    """Its RAM; ``host_free_gb`` is what is unused now."""
    host_free_gb: int = 0


@dataclass(frozen=True, slots=True)
class Option:
    """One way to run one artifact."""

    artifact: str
    format: Format
    engine: Engine
    cpu: bool = False
    gpu_class: str = ""
    fabric: str = ""
    gpus_per_node: int = 0
    """Cards on each of ``nodes`` nodes."""
    nodes: int = 0
    need_gb: float = 0.0
    """What one card holds, or for the CPU the whole replica in RAM."""
    have_gb: float = 0.0
    """What a card, or the node, offers for it."""
    hosts: int = 0
    """How many nodes could run it at all."""
    free_now: bool = False
    """Whether one node (or enough, together) could run it right now."""
    bits_per_weight: float = 0.0
    """The artifact's precision, 0 when unknown."""

    @property
    def gpus(self) -> int:
        """Every card one replica takes."""
        return self.gpus_per_node * max(self.nodes, 1)

    @property
    def label(self) -> str:
        """Where it runs, in a few words."""
        if self.cpu:
            return "CPU"
        if self.nodes > 1:
            return f"{self.nodes} nodes × {self.gpus_per_node} {self.gpu_class} on {self.fabric}"
        return f"{self.gpus_per_node} × {self.gpu_class}"

    def to_json(self) -> dict[str, Any]:
        """The seed's JSON, empty fields left out as its ``omitempty`` does."""
        out: dict[str, Any] = {"artifact": self.artifact, "format": self.format, "engine": self.engine}
        if self.cpu:
            out["cpu"] = True
        if self.gpu_class:
            out["gpu_class"] = self.gpu_class
        if self.fabric:
            out["fabric"] = self.fabric
        if self.gpus_per_node:
            out["gpus_per_node"] = self.gpus_per_node
        if self.nodes:
            out["nodes"] = self.nodes
        out["need_gb"] = self.need_gb
        out["have_gb"] = self.have_gb
        out["hosts"] = self.hosts
        out["free_now"] = self.free_now
        if self.bits_per_weight:
            out["bits_per_weight"] = self.bits_per_weight
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Option:
        """An option as ``to_json`` wrote it (missing keys take their empty value)."""
        return cls(**data)
