"""The engines' settings on the ``modelplan plan`` and ``modelplan submit`` command lines: each flag is the
engine's own (``vllm serve --max-num-seqs``, ``llama-server --parallel``), and each one left out is the
deployment's (``MODELPLAN_SETTINGS``), else the engine's default on the card (``planner.settings``)."""

from __future__ import annotations

import argparse
from typing import Any, get_args

from planner.settings import LlamacppCacheType, Settings, VllmKvDtype, parse_settings

_VLLM = (
    ("--max-num-batched-tokens", "max_num_batched_tokens", int, "tokens vLLM schedules in one step"),
    ("--max-num-seqs", "max_num_seqs", int, "sequences vLLM runs at once"),
    ("--gpu-memory-utilization", "gpu_memory_utilization", float, "the share of a card vLLM takes (0-1]"),
    ("--images-per-prompt", "images_per_prompt", int, "images a prompt may hold (--limit-mm-per-prompt image=N)"),
)
_LLAMACPP = (
    ("--parallel", "parallel", int, "llama-server's slots, each of --context tokens (-np)"),
    ("--batch", "batch", int, "llama-server's logical batch (-b)"),
    ("--ubatch", "ubatch", int, "llama-server's micro-batch (-ub)"),
    (
        "--cache-ram",
        "cache_ram_mib",
        int,
        "llama-server's prompt cache in RAM, MiB (default 0: none; -1: flag left out)",
    ),
)


def add_settings_args(p: argparse.ArgumentParser) -> None:
    """The settings that move memory, as flags; default: the deployment's, else the engine's own for the
    card."""
    g = p.add_argument_group("vLLM settings (default: the deployment's, else vLLM's for the card)")
    for flag, dest, kind, text in _VLLM:
        g.add_argument(flag, dest=f"vllm_{dest}", type=kind, metavar="N", help=text)
    g.add_argument(
        "--kv-cache-dtype", dest="vllm_kv_cache_dtype", choices=get_args(VllmKvDtype), help="the KV cache's data type"
    )
    g.add_argument("--vllm-version", dest="vllm_vllm_version", metavar="X.Y", help="the vLLM release (e.g. 0.10)")
    g.add_argument(
        "--nvidia-driver",
        dest="vllm_nvidia_driver",
        metavar="VERSION",
        help="the cards' NVIDIA driver (e.g. 535.230.02): before 550, CUDA graphs take about 3x the memory",
    )
    g.add_argument(
        "--flashinfer-sampler",
        dest="vllm_flashinfer_sampler",
        action="store_true",
        default=None,
        help="FlashInfer samples top-k/top-p (installed; no sort of the logits in 0.8-0.16)",
    )
    g.add_argument(
        "--no-gpu-p2p",
        dest="vllm_gpu_p2p",
        action="store_false",
        default=None,
        help="the cards have no peer access to each other (NCCL through the host)",
    )
    g.add_argument(
        "--enforce-eager", dest="vllm_enforce_eager", action="store_true", default=None, help="no CUDA graphs"
    )
    g = p.add_argument_group("llama.cpp settings (default: the deployment's, else llama-server's)")
    g.add_argument("--flash-attn", dest="llamacpp_flash_attn", choices=("on", "off"), help="flash attention (-fa)")
    for flag, dest, kind, text in _LLAMACPP:
        g.add_argument(flag, dest=f"llamacpp_{dest}", type=kind, metavar="N", help=text)
    types = get_args(LlamacppCacheType)
    g.add_argument("--cache-type-k", dest="llamacpp_cache_type_k", choices=types, help="K cache type (-ctk)")
    g.add_argument("--cache-type-v", dest="llamacpp_cache_type_v", choices=types, help="V cache type (-ctv)")


def settings_from_args(args: argparse.Namespace) -> Settings | None:
    """The settings the flags give, or None where no flag was given."""
    by: dict[str, dict[str, Any]] = {"vllm": {}, "llamacpp": {}}
    for name, value in vars(args).items():
        engine, _, field = name.partition("_")
        if engine in by and value is not None:
            by[engine][field] = {"on": True, "off": False}.get(value, value) if field == "flash_attn" else value
    if not by["vllm"] and not by["llamacpp"]:
        return None
    return parse_settings(by, "arguments")
