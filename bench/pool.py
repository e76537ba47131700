"""What the benchmark plans with: a pool of a realistic mix of nodes, and a model repository of up to 30
artifacts (GGUF quantisations, split sets among them, and the original safetensors weights)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from planner import PoolNode
from planner.quant import QUANT_BITS
from planner.repository import Repository, repository_from_listing


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind of node in the mix."""

    gpu_class: str
    gpus: int
    share: float
    fabric: str
    """The fabric's stem; nodes join islands of ``FABRIC_NODES`` on it. ``""``: no fabric."""
    host_mem_gb: tuple[int, ...]


MIX = (
    Kind("h200-141g", 8, 0.25, "ib-h200", (2048,)),
    Kind("h100-80g", 8, 0.25, "ib-h100", (1024, 2048)),
    Kind("a100-80g", 8, 0.10, "roce-a100", (1024,)),
    Kind("a100-40g", 4, 0.10, "roce-a100s", (512,)),
    Kind("l40s-48g", 4, 0.10, "", (512,)),
    Kind("rtx4090-24g", 2, 0.05, "", (256,)),
    Kind("", 0, 0.15, "", (256, 512, 1024)),
)
"""A quarter H200s and a quarter H100s of eight cards on InfiniBand, A100s on RoCE, L40S and RTX 4090
boxes with no fabric, and CPU nodes. The H200s are the class the benchmark's jobs want."""

FABRIC_NODES = 128
"""Nodes per fabric island: a pipeline-parallel replica spans one island only."""

BOOT = "bench-boot"


def pool(n: int, *, busy: bool, seed: int = 7) -> list[dict[str, Any]]:
    """``n`` heartbeats (node records with ``seq`` and ``boot_id``) of the mix. ``busy``: cards and RAM in
    use at random, as in a working cluster; else everything free."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    counts = [int(n * k.share) for k in MIX]
    counts[-1] += n - sum(counts)
    for kind, count in zip(MIX, counts, strict=True):
        stem = kind.gpu_class or "cpu"
        for i in range(count):
            host = rng.choice(kind.host_mem_gb)
            free_gpus = rng.randint(0, kind.gpus) if busy else kind.gpus
            host_free = int(host * rng.uniform(0.1, 0.95)) if busy else host - 32
            out.append(
                {
                    "node_id": f"{stem}-{i:06d}",
                    "gpu_class": kind.gpu_class,
                    "fabric": f"{kind.fabric}-{i // FABRIC_NODES}" if kind.fabric else "",
                    "gpus": kind.gpus,
                    "free_gpus": free_gpus,
                    "host_mem_gb": host,
                    "host_free_gb": host_free,
                    "seq": 1,
                    "boot_id": BOOT,
                }
            )
    return out


def pool_nodes(beats: list[dict[str, Any]]) -> list[PoolNode]:
    from planner.quant import mem_from_class

    return [
        PoolNode(
            id=b["node_id"],
            gpu_class=b["gpu_class"],
            fabric=b["fabric"],
            gpu_mem_gb=mem_from_class(b["gpu_class"]),
            gpus=b["gpus"],
            free_gpus=b["free_gpus"],
            host_mem_gb=b["host_mem_gb"],
            host_free_gb=b["host_free_gb"],
        )
        for b in beats
    ]


CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "max_position_embeddings": 131072,
    "model_type": "llama",
    "num_attention_heads": 64,
    "num_hidden_layers": 80,
    "num_key_value_heads": 8,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}
"""Llama-3.1-70B-Instruct's config."""

PARAMS = 70_553_706_496
TOTAL_SIZE = 141_107_412_992
"""Its parameters, and its safetensors' ``total_size`` (bf16)."""

QUANTS = (
    "Q4_K_M", "Q8_0", "Q6_K", "Q5_K_M", "Q5_K_S", "Q5_0", "Q5_1", "Q4_K_S", "Q4_0", "Q4_1", "IQ4_XS",
    "IQ4_NL", "Q3_K_L", "Q3_K_M", "Q3_K_S", "IQ3_M", "IQ3_XS", "IQ3_XXS", "Q2_K", "IQ2_M", "IQ2_XS",
    "IQ2_XXS", "IQ1_M", "IQ1_S", "F16", "BF16", "F32", "IQ2_S", "IQ3_S",
)  # fmt: skip
"""29 GGUF quantisations, the usual ones first; with the original weights, 30 artifacts."""

EXTRA_BITS = {"IQ2_S": 2.5, "IQ3_S": 3.44}
SPLIT_BYTES = 48 * 10**9
"""The Hub takes files up to 50 GB: larger GGUFs come as split sets."""


def listing(artifacts: int) -> list[dict[str, Any]]:
    """A file listing with ``artifacts`` artifacts: the original weights, then the quants in order."""
    files: list[dict[str, Any]] = [
        {"path": "config.json", "size": 1000},
        {"path": "tokenizer.json", "size": 9_085_657},
        {"path": "model.safetensors.index.json", "size": 59_571},
    ]
    shard = TOTAL_SIZE // 30
    files += [{"path": f"model-{i:05d}-of-00030.safetensors", "size": shard} for i in range(1, 31)]
    for quant in QUANTS[: artifacts - 1]:
        size = int(PARAMS * QUANT_BITS.get(quant, EXTRA_BITS.get(quant, 4.0)) / 8)
        stem = f"Meta-Llama-3.1-70B-Instruct-{quant}"
        parts = math.ceil(size / SPLIT_BYTES)
        if parts == 1:
            files.append({"path": f"{stem}.gguf", "size": size})
        else:
            files += [
                {"path": f"{stem}/{stem}-{p:05d}-of-{parts:05d}.gguf", "size": size // parts}
                for p in range(1, parts + 1)
            ]
    return files


def repository(artifacts: int = 30) -> Repository:
    index = {"metadata": {"total_size": TOTAL_SIZE}, "weight_map": {}}
    return repository_from_listing(listing(artifacts), CONFIG, index)
