"""How the engines split a model and its KV cache: vLLM's tensor-parallel widths and what each card of a
group caches; the KV cache each engine allocates for a context, sliding-window layers included."""

from __future__ import annotations

from planner.model import Shape

VLLM_BLOCK_TOKENS = 16
"""vLLM's KV cache block size in tokens (``--block-size``, 16 on CUDA: vllm/config/cache.py, v0.10)."""

VLLM_BATCHED_TOKENS = 8192
"""vLLM's default ``max_num_batched_tokens`` for ``vllm serve`` on cards of 70 GiB or more (2048 on
smaller ones): ``EngineArgs.get_batch_defaults`` (vllm/engine/arg_utils.py, v0.10). The larger is
taken so that a plan never counts a window's cache short."""

LLAMACPP_SWA_SEQUENCES = 4
LLAMACPP_UBATCH = 512
LLAMACPP_SWA_PAD = 256
"""llama.cpp's SWA cache holds ``min(ctx, pad(n_swa * n_seq_max + n_ubatch, 256))`` cells
(``llama_kv_cache_iswa``, src/llama-kv-cache-iswa.cpp, with the unified-cache option of mid 2025):
llama-server's default is 4 slots on one unified cache and a micro-batch of 512."""


def vllm_tp_allowed(shape: Shape, tp: int) -> bool:
    """Whether vLLM accepts tensor parallel ``tp`` for this model.

    vLLM requires the attention heads to divide by the width (``ModelConfig.verify_with_parallel_config``)
    and shards the KV heads with ``QKVParallelLinear`` (vllm/model_executor/layers/linear.py, v0.10): the
    width divides them, or is a multiple of them and each card holds one replicated head. MLA models have
    one latent, kept whole on every card. Where the attention heads are unknown the seed's rule holds:
    the width divides the KV heads.
    """
    if tp <= 1:
        return True
    if shape.heads == 0:
        return shape.kv_heads == 0 or (tp <= shape.kv_heads and shape.kv_heads % tp == 0)
    if shape.heads % tp:
        return False
    if shape.mla or shape.kv_heads == 0:
        return True
    return shape.kv_heads % tp == 0 or tp % shape.kv_heads == 0


def vllm_kv_bytes(shape: Shape, context: int, batched_tokens: int | None = None) -> int:
    """The KV cache vLLM allocates for one sequence of ``context`` tokens, the whole model.

    Full-attention layers take every token; a sliding-window layer takes at most ``window - 1`` tokens
    plus a batch of new ones (``batched_tokens``; where not set, the larger of vLLM's defaults), in
    blocks, plus one block (``SlidingWindowSpec.max_memory_usage_bytes``, vllm/v1/kv_cache_interface.py,
    v0.10).
    """
    batch = batched_tokens or VLLM_BATCHED_TOKENS
    total = shape.kv_bytes_per_token * context
    for window, per_token in shape.windows:
        tokens = min(window - 1 + batch, context)
        kept = (-(-tokens // VLLM_BLOCK_TOKENS) + 1) * VLLM_BLOCK_TOKENS
        total -= per_token * max(context - kept, 0)
    return total


def llamacpp_kv_bytes(
    shape: Shape,
    context: int,
    *,
    sequences: int = LLAMACPP_SWA_SEQUENCES,
    ubatch: int = LLAMACPP_UBATCH,
    unified: bool = True,
) -> int:
    """The KV cache llama.cpp allocates for ``--ctx-size context`` in f16, the whole model: full layers for
    every cell, sliding-window layers for the SWA cache's cells (``sequences`` slots, ``ubatch``).

    On one unified cache the slots share one SWA cache of ``n_swa × n_seq_max + n_ubatch`` cells; where
    each slot has its own (``-np N``, ``unified`` off) each of the ``n_seq_max`` streams holds its own
    ``n_swa + n_ubatch`` cells, padded, within its ``context / N`` (``size_swa`` is computed with
    ``n_swa*(unified ? n_seq_max : 1) + n_ubatch`` and allocated once a stream, ``llama_kv_cache``'s
    ``n_stream``, src/llama-kv-cache-iswa.cpp and src/llama-kv-cache.cpp): a micro-batch's room and the
    padding for every slot, not once."""
    total = shape.kv_bytes_per_token * context
    for window, per_token in shape.windows:
        if unified:
            cells = min(context, _swa_pad(window * sequences + ubatch))
        else:
            cells = sequences * min(context // sequences, _swa_pad(window + ubatch))
        total -= per_token * (context - cells)
    return total


def _swa_pad(cells: int) -> int:
    return -(-cells // LLAMACPP_SWA_PAD) * LLAMACPP_SWA_PAD


def vllm_kv_spread(shape: Shape, kv: int, tp: int) -> int:
    """The KV bytes that a tensor-parallel group of ``tp`` cards holds in all, for ``kv`` bytes of the
    model's cache: ``kv`` itself when the KV heads divide among the cards. Cards beyond the KV heads each
    hold a replicated head (``get_num_kv_heads``: ``max(1, total // tp)``), and with MLA every card holds
    the whole latent, so the group holds more than the model's cache."""
    if tp <= 1:
        return kv
    if shape.mla:
        return kv * tp
    if shape.kv_heads and tp > shape.kv_heads:
        return kv * tp // shape.kv_heads
    return kv
