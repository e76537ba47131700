"""Every fraction and size the planner counts with, each with where it comes from.

The seed (the original Go planner) used four names it never defined: ``usableFraction``,
``overheadBytes``, ``GB`` and ``Fits``. They are defined here, once.
"""

from __future__ import annotations

GIB = 1 << 30
"""Bytes in a GiB. Card labels such as ``h100-80g`` carry nominal GiB, so every ``*_gb`` figure in a
plan is GiB too (the seed's ``GB``)."""

USABLE_FRACTION = 0.90
"""The share of a card a plan may count on (the seed's ``usableFraction``): vLLM's
``--gpu-memory-utilization``, 0.9 in its long-standing releases (0.92 in current ones, so a plan made
at 0.9 also fits under 0.92). llama.cpp on a card is held to the same share, which leaves the driver
and the CUDA context (about 0.6 GiB measured on an H200) their room."""

HOST_SHARE = 0.85
"""How much of a node's RAM one CPU replica may be planned to use: the system and the agent keep the
rest (the seed's ``hostShare``)."""

GGUF_OVERHEAD_FIXED = GIB
GGUF_OVERHEAD_DIVISOR = 20
"""llama.cpp's own cost beyond weights and KV cache, as the seed counts it: 1 GiB + weights/20 (compute
buffers and the server). Measured, this over-estimates by 1.1-1.4x on a card and 1.2-3.2x on a CPU,
never under, so it is kept as the seed has it."""

VLLM_OVERHEAD_FIXED = 2 * GIB
VLLM_OVERHEAD_DIVISOR = 5
"""vLLM's cost on one card beyond weights and KV cache (the seed's ``overheadBytes``): 2 GiB + weights/5,
which is GPUStack's published estimate (weights x 1.2 + 2 GiB). It covers vLLM's profile of an 8B
model: activation peak 1.7-2.6 GiB, non-torch memory 0.25-0.35 GiB and CUDA graphs 0.3-1.6 GiB, at
most 4.55 GiB against 2 + 14.96/5 = 4.99 GiB estimated."""

QUALITY_CAP = 8.6
"""Bits per weight past which a bigger file is not a better model worth its memory on a card: eight bits
keep what sixteen do, near enough."""

CPU_QUALITY_CAP = 5.8
"""The same cap on a CPU, lower: every bit is read from memory for every token, so a file twice the size
answers at half the speed, and a Q4_K_M or Q5 is the usual balance."""

PAST_CAP_PENALTY = 0.25
"""How fast quality falls per bit past the cap."""

KV_BYTES_PER_ELEMENT = 2
"""Bytes per KV cache element: llama.cpp caches in f16 by default, and vLLM in the model's dtype, which is
16-bit for the models it serves. Float32 checkpoints are still counted at 16 bits: both engines serve
them in 16 bits by default."""

DEFAULT_CONTEXT = 4096
"""The context (tokens) planned for when a request names none: llama.cpp server's ``--ctx-size`` default
in long-standing releases. Pass the context you serve."""


def gib(n_bytes: int | float) -> float:
    """Bytes as GiB (the seed's ``GB``)."""
    return n_bytes / GIB


def card_budget_gb(card_gb: float) -> float:
    """What a plan may count on of a card of ``card_gb`` GiB."""
    return card_gb * USABLE_FRACTION


def fits(need_gb: float, card_gb: float) -> bool:
    """Whether a card of ``card_gb`` GiB holds ``need_gb`` GiB within its usable share (the seed's
    ``Fits``)."""
    return need_gb <= card_budget_gb(card_gb)


def gguf_overhead_bytes(weights: int) -> int:
    """llama.cpp's cost beyond weights and cache, for ``weights`` bytes on one card or in RAM."""
    return GGUF_OVERHEAD_FIXED + weights // GGUF_OVERHEAD_DIVISOR


def vllm_overhead_bytes(weights: int) -> int:
    """vLLM's cost beyond weights and KV cache on one card holding ``weights`` bytes."""
    return VLLM_OVERHEAD_FIXED + weights // VLLM_OVERHEAD_DIVISOR
