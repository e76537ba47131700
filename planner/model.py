"""The planner's values: what a repository offers, the model's shape, the pool, and the options.

Names and JSON keys follow the seed: an ``Option`` serialises with the keys other services read
(``artifact``, ``format``, ``engine``, ``cpu``, ``gpu_class``, ``fabric``, ``gpus_per_node``, ``nodes``,
``need_gb``, ``have_gb``, ``hosts``, ``free_now``, ``bits_per_weight``), leaving out the empty ones as
the seed's ``omitempty`` does; ``estimate``, ``margin``, ``settings`` and an observed option's
``formula_gb``, ``runs`` and ``since`` are modelplan's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Format = Literal["gguf", "safetensors", "pytorch"]
Engine = Literal["llamacpp", "vllm"]

ORIGINAL = "original"
"""The artifact name of a repository's own safetensors weights."""


@dataclass(frozen=True, slots=True)
class Artifact:
    """Something a repository offers to serve: one GGUF file (or one split into parts), or its original
    weights (safetensors; ``pytorch_model*.bin`` where there are none)."""

    name: str
    """The file, or the set's name; ``original`` for the original weights."""
    format: Format
    bytes: int
    shards: int = 0
    """How many files make it, when more than one."""
    quant: str = ""
    """The quantisation read from the name, like ``Q4_K_M``; for original weights what the weights are:
    ``bf16``, ``fp16``, or the method and bits of a quantised original (``fp8``, ``awq-int4``, ``mxfp4``)."""
    load_bytes: int = 0
    """What the weights take once an engine has loaded them, where that differs from the files: an fp32
    original is loaded at 16 bits. 0 is the files' size."""

    @property
    def weights_bytes(self) -> int:
        """The bytes a replica holds for the weights."""
        return self.load_bytes or self.bytes

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "format": self.format, "bytes": self.bytes}
        if self.shards:
            out["shards"] = self.shards
        if self.quant:
            out["quant"] = self.quant
        if self.load_bytes:
            out["load_bytes"] = self.load_bytes
        return out


@dataclass(frozen=True, slots=True)
class Shape:
    """What sizes a model's KV cache, and constrains how it splits."""

    kv_bytes_per_token: int
    """One token of context, the whole model, every layer counted for every token (sliding-window layers
    included: ``windows`` says how much of this stops growing past a window)."""
    kv_heads: int = 0
    """The KV heads: a tensor-parallel width divides them or is a multiple of them; 0 is unknown."""
    params: int = 0
    """The parameter count, for bits per weight; 0 is unknown."""
    max_context: int = 0
    """The longest context the engines accept (``max_position_embeddings``, extended by ``rope_scaling``
    as vLLM derives ``max_model_len``); 0 is unknown."""
    heads: int = 0
    """The attention heads, which a tensor-parallel width must divide; 0 is unknown (then the width must
    divide the KV heads, as the seed had it)."""
    mla: bool = False
    """The KV cache is one latent per layer (DeepSeek's MLA), which every card of a tensor-parallel group
    keeps whole."""
    windows: tuple[tuple[int, int], ...] = ()
    """Sliding-window layers as ``(window tokens, KV bytes per token of those layers)``: their part of
    ``kv_bytes_per_token`` that the engines keep only for the window."""
    max_context_source: str = ""
    """Where ``max_context`` comes from, for the message that refuses a longer context."""
    vision_params: int = 0
    """Of ``params``, the vision tower's and projector's: a GGUF keeps them apart, in its ``mmproj`` file,
    so a GGUF's bits per weight are over the rest."""
    layers: int = 0
    hidden: int = 0
    vocab: int = 0
    experts: int = 0
    """The language model's layers, hidden size, vocabulary and routed experts (0 for a dense model), which
    size the engines' own cost in the measured estimate (``planner.estimate``); 0 is unknown."""
    attention_layers: int = 0
    """Of ``layers``, those that keep a KV cache (a hybrid's others keep a fixed state instead); 0 is
    unknown."""
    vision_hidden: int = 0
    """The vision tower's width, which sizes vLLM's profile of its encoder; 0 without one or unknown."""
    mlp_width: int = 0
    """Each dense MLP matrix's width (``intermediate_size``); 0 unknown."""
    state_bytes_per_sequence: int = 0
    """The fixed state each sequence keeps in the layers that are not attention (Mamba's convolution and
    SSM state, a gated DeltaNet's recurrent state), as vLLM allocates it; 0 for a model of attention only."""


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
    gpu_vendor: str = ""
    gpu_driver: str = ""
    """Who made its cards (``nvidia``, ``amd``) and the driver's version, as its agent read them; ``""``
    unknown. vLLM's graphs take more under some (``planner.platform``)."""


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
    estimate: str = ""
    """How ``need_gb`` was counted: ``measured`` or ``seed`` (``planner.estimate``), or ``observed``: no
    less than the engines of this kind of replica were seen to hold (``planner.observed``)."""
    margin: str = ""
    """Where the data behind the estimate are thin, so that it keeps a margin; empty where they are not."""
    settings: tuple[str, ...] = ()
    """The engine's settings the estimate was made for, as the arguments that start it so (``-c 8192 -fa
    on ...`` for llama-server, ``--max-num-seqs 256 ...`` for ``vllm serve``): those the request gave, and
    the engine's defaults on this card for the rest (``planner.settings``). Empty in options planned
    before settings were part of a plan."""
    formula_gb: float = 0.0
    """For an ``observed`` option, what the formula alone counted; 0 otherwise."""
    runs: int = 0
    """For an ``observed`` option, the runs its need was taken from."""
    since: str = ""
    """For an ``observed`` option, when the first of those runs was seen (ISO 8601 date)."""

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
        if self.estimate:
            out["estimate"] = self.estimate
        if self.margin:
            out["margin"] = self.margin
        if self.settings:
            out["settings"] = list(self.settings)
        if self.runs:
            out.update(formula_gb=self.formula_gb, runs=self.runs, since=self.since)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Option:
        """An option as ``to_json`` wrote it (missing keys take their empty value)."""
        if "settings" in data:
            data = {**data, "settings": tuple(data["settings"])}
        return cls(**data)
