"""vLLM's own cost on a card in the measured estimate: the terms of its start-up profile (memory outside
PyTorch, the activation peak of the forward pass and sampler, the vision encoder's profile) and CUDA
graphs, each sized by the settings the card runs (``planner.settings``). The constants and their sources
are in ``planner.constants``."""

from __future__ import annotations

from dataclasses import dataclass

from planner.constants import (
    UNKNOWN_HIDDEN,
    UNKNOWN_LAYERS,
    UNKNOWN_VOCAB,
    VLLM_BATCHED_TOKENS,
    VLLM_FORWARD_BYTES,
    VLLM_FORWARD_PEAK_BYTES,
    VLLM_GRAPHS_FIXED,
    VLLM_GRAPHS_MOE,
    VLLM_GRAPHS_PER_HIDDEN,
    VLLM_GRAPHS_PER_LAYER,
    VLLM_MAX_CAPTURE,
    VLLM_MAX_SEQS,
    VLLM_MOE_FORWARD_BYTES,
    VLLM_NON_TORCH_ONE_CARD,
    VLLM_NON_TORCH_STAGE,
    VLLM_NON_TORCH_TP,
    VLLM_NON_TORCH_TP8,
    VLLM_NON_TORCH_TP_PCIE,
    VLLM_NON_TORCH_TP_PER_CARD,
    VLLM_SAMPLER_BYTES,
    VLLM_TP8,
    VLLM_VISION_BYTES,
    vllm_overhead_bytes,
)
from planner.estimate import DEFAULT_ESTIMATE, EngineShape, Estimate, Need, need_of, thin_data
from planner.platform import GRAPHS_ERROR
from planner.settings import VllmRun
from planner.vllmrelease import (
    DEFAULT_RELEASE,
    OLD_DRIVER_GRAPHS,
    ROCM_GRAPHS,
    VLLM_SORT_SAMPLER_BYTES,
    Release,
    sorts_sampler,
)


@dataclass(frozen=True, slots=True)
class VllmFit:
    """The constants of vLLM's terms, as one value: ``VLLM_FIT`` is the one fitted on every profile (see
    ``planner.constants`` for each one's source); a check may refit them on part of the profiles."""

    sampler_bytes: int = VLLM_SAMPLER_BYTES
    forward_peak_bytes: int = VLLM_FORWARD_PEAK_BYTES
    forward_bytes: int = VLLM_FORWARD_BYTES
    moe_forward_bytes: int = VLLM_MOE_FORWARD_BYTES
    non_torch_one_card: int = VLLM_NON_TORCH_ONE_CARD
    non_torch_stage: int = VLLM_NON_TORCH_STAGE
    non_torch_tp: int = VLLM_NON_TORCH_TP
    non_torch_tp_per_card: int = VLLM_NON_TORCH_TP_PER_CARD
    graphs_fixed: int = VLLM_GRAPHS_FIXED
    graphs_per_layer: int = VLLM_GRAPHS_PER_LAYER
    graphs_per_hidden: int = VLLM_GRAPHS_PER_HIDDEN
    graphs_moe: int = VLLM_GRAPHS_MOE
    non_torch_tp8: int = VLLM_NON_TORCH_TP8
    non_torch_tp_pcie: int = VLLM_NON_TORCH_TP_PCIE
    vision_bytes: int = VLLM_VISION_BYTES
    sort_sampler_bytes: int = VLLM_SORT_SAMPLER_BYTES


VLLM_FIT = VllmFit()


def vllm_activation(
    shape: EngineShape,
    *,
    batched_tokens: int = VLLM_BATCHED_TOKENS,
    max_seqs: int = VLLM_MAX_SEQS,
    pooling: bool = False,
    release: Release = DEFAULT_RELEASE,
    flashinfer_sampler: bool = False,
    tp: int = 1,
    fit: VllmFit = VLLM_FIT,
) -> int:
    """vLLM's profiled activation peak on each card: the sampler's logits for ``max_seqs`` sequences over
    the whole vocabulary (gathered on every card, so not divided by tensor parallel, as the profiles show),
    sorted in the releases that sort them (``planner.vllmrelease.sorts_sampler``) unless FlashInfer samples,
    or the forward pass of
    ``batched_tokens`` tokens where that is larger, and what both hold. A pooling runner (embeddings) has no
    sampler.

    The forward pass peaks in the MLP, whose intermediate activations (the gate and up projections' output)
    are its bytes; the column-parallel layers that make them hold ``output_size / tp_size`` of them on each
    card of a ``tp``-wide group (``ColumnParallelLinear``, vllm/model_executor/layers/linear.py), so a card
    holds its share of that peak. The residual stream and the hidden states (what both hold) are whole on
    every card. The published V0 run of Qwen2.5-14B at TP 2 profiling 32,768 tokens logs 2.84 GiB of
    activation a card: 2.66 with the share counted, 4.06 without."""
    vocab = shape.vocab or UNKNOWN_VOCAB
    hidden = shape.hidden or UNKNOWN_HIDDEN
    held = fit.forward_bytes * (2 if shape.float32 else 1) + (fit.moe_forward_bytes if shape.moe else 0)
    sorts = sorts_sampler(release) and not flashinfer_sampler
    per_entry = fit.sort_sampler_bytes if sorts else fit.sampler_bytes
    sampler = 0 if pooling else max_seqs * vocab * per_entry
    peak = max(sampler, batched_tokens * hidden * fit.forward_peak_bytes // tp)
    return peak + batched_tokens * hidden * held


def vllm_non_torch(tp: int, pp: int = 1, *, pcie: bool = False, p2p: bool = True, fit: VllmFit = VLLM_FIT) -> int:
    """Memory outside PyTorch on each card of a ``tp``-wide group (of ``pp`` pipeline stages): from 8 cards
    up, the larger figure the published TP 8 logs show; over PCIe only (``pcie``), the smaller one the
    published logs of consumer cards show.

    Most of it is NCCL's buffers for its peer-to-peer transport, on the card, one set a channel and peer.
    Where the cards have no peer access (``p2p`` off), NCCL does not use that transport
    (``p2pCanConnect``, src/transport/p2p.cc: none where ``cudaDeviceCanAccessPeer`` says no) but its
    shared-memory one, whose buffers are in host memory, and vLLM does not set up its custom all-reduce
    (``finalize_p2p``, vllm/distributed/device_communicators/custom_all_reduce.py); a card holds what one
    card does. The custom all-reduce's own buffers are small beside NCCL's: two IPC buffers of 8 MiB
    (``max_size``, with its metadata) and 8 MiB of ``rank_data`` a card, so ``--disable-custom-all-reduce``
    alone, which leaves NCCL's peer transport on, moves no figure here."""
    if tp > 1 and not p2p:
        return fit.non_torch_one_card
    if tp > 1 and pcie:
        return fit.non_torch_tp_pcie
    if tp >= VLLM_TP8:
        return max(fit.non_torch_tp8, fit.non_torch_tp + tp * fit.non_torch_tp_per_card)
    if tp > 1:
        return fit.non_torch_tp + tp * fit.non_torch_tp_per_card
    return fit.non_torch_one_card if pp == 1 else fit.non_torch_stage


def graph_sizes(max_seqs: int) -> int:
    """How many batch sizes vLLM captures CUDA graphs for: 1, 2, 4, then every 8 up to twice the sequences,
    at most 512 (``max_cudagraph_capture_size = min(max_num_seqs * 2, 512)``, vllm/config/vllm.py, 0.11 on;
    the published logs agree: 7 piecewise graphs at 16 sequences, 3 at 1)."""
    return 3 + min(2 * max_seqs, VLLM_MAX_CAPTURE) // 8


def vllm_graphs(
    shape: EngineShape,
    tp: int = 1,
    pp: int = 1,
    *,
    max_seqs: int = VLLM_MAX_SEQS,
    old_driver: bool = False,
    rocm: bool = False,
    fit: VllmFit = VLLM_FIT,
) -> int:
    """CUDA graph memory on each card: per layer the card holds, and per unit of hidden size its share,
    for every batch size captured (the profiles captured all 67); and a fixed part. Under a driver older
    than the 550 branch (``old_driver``), the part per size ``OLD_DRIVER_GRAPHS`` times; HIP graphs on an
    AMD card (``rocm``), ``ROCM_GRAPHS`` times (``planner.vllmrelease``)."""
    layers = -(-(shape.layers or UNKNOWN_LAYERS) // pp)
    hidden = shape.hidden or UNKNOWN_HIDDEN
    moe = fit.graphs_moe if shape.moe else 0
    per_size = layers * fit.graphs_per_layer + hidden * fit.graphs_per_hidden // tp + moe
    sized = per_size * graph_sizes(max_seqs) // graph_sizes(VLLM_MAX_SEQS)
    if old_driver or rocm:
        times, per = ROCM_GRAPHS if rocm else OLD_DRIVER_GRAPHS
        sized = sized * times // per
    return fit.graphs_fixed + sized


def vllm_dequantised(shape: EngineShape, tp: int = 1) -> int:
    """The largest weight shard a bitsandbytes 4-bit model's forward pass holds dequantised, which its CUDA
    graphs keep in their pool. For more than one token bitsandbytes dequantises the weight to the compute
    dtype before the matmul (``matmul_4bit`` → ``MatMul4Bit``: ``dequantize_4bit(B).to(A.dtype)``,
    bitsandbytes/autograd/_functions.py), and vLLM calls it a shard at a time (``_apply_4bit_weight``,
    vllm/model_executor/layers/quantization/bitsandbytes.py): the largest is an MLP matrix, its width by the
    hidden size, split over the tensor-parallel group; two bytes an element. The published 70B in
    bitsandbytes 4-bit took 0.73 GiB of graphs beyond the term; its shard is 0.44 GiB. An unknown width is
    counted at six times the hidden size (Qwen2.5-7B's is 5.3)."""
    hidden = shape.hidden or UNKNOWN_HIDDEN
    width = max(shape.mlp_width or 6 * hidden, hidden)
    return width * hidden * 2 // tp


def vllm_vision(shape: EngineShape, batched_tokens: int, images: int | None, *, fit: VllmFit = VLLM_FIT) -> int:
    """vLLM's profile of a vision encoder: dummy images up to its encoder budget (the batched tokens), each
    token through a tower of ``vision_hidden``; none where images are turned off (``images`` 0)."""
    if not shape.multimodal or images == 0:
        return 0
    return batched_tokens * shape.vision_hidden * fit.vision_bytes


def vllm_card(
    weights: int,
    kv: int,
    shape: EngineShape,
    *,
    tp: int = 1,
    pp: int = 1,
    estimate: Estimate = DEFAULT_ESTIMATE,
    context: int = 0,
    batched_tokens: int = VLLM_BATCHED_TOKENS,
    max_seqs: int = VLLM_MAX_SEQS,
    enforce_eager: bool = False,
    images: int | None = None,
    pooling: bool = False,
    pcie: bool = False,
    p2p: bool = True,
    release: Release = DEFAULT_RELEASE,
    flashinfer_sampler: bool = False,
    old_driver: bool = False,
    rocm: bool = False,
    driver_unreported: bool = False,
    dequantised: bool = False,
    fit: VllmFit = VLLM_FIT,
) -> Need:
    """One card of a vLLM replica holding ``weights`` and ``kv`` bytes (its share of each), started with
    ``batched_tokens`` and ``max_seqs`` (the API server's defaults on an H100 unless given), and without
    CUDA graphs where ``enforce_eager``, profiled as ``release`` profiles (``planner.vllmrelease``).

    ``measured`` counts what vLLM holds within its ``--gpu-memory-utilization`` share, CUDA graphs
    included (vLLM profiles them into the share since 0.21): the CUDA context and NCCL's set-up, taken
    before vLLM profiles, live in the rest of the card."""
    if estimate == "seed":
        return need_of(weights, kv, (("2 GiB + weights/5", vllm_overhead_bytes(weights)),))
    parts: tuple[tuple[str, int], ...] = (
        ("non-torch", vllm_non_torch(tp, pp, pcie=pcie, p2p=p2p, fit=fit)),
        (
            "activation peak",
            vllm_activation(
                shape,
                batched_tokens=batched_tokens,
                max_seqs=max_seqs,
                pooling=pooling,
                release=release,
                flashinfer_sampler=flashinfer_sampler,
                tp=tp,
                fit=fit,
            ),
        ),
        (
            "CUDA graphs",
            0
            if enforce_eager
            else vllm_graphs(shape, tp, pp, max_seqs=max_seqs, old_driver=old_driver, rocm=rocm, fit=fit),
        ),
        ("vision encoder", vllm_vision(shape, batched_tokens, images, fit=fit)),
    )
    if dequantised and not enforce_eager:
        parts += (("bitsandbytes dequantised weight", vllm_dequantised(shape, tp)),)
    thin = thin_data(shape, context)
    if driver_unreported and not enforce_eager:
        thin += (GRAPHS_ERROR,)
    return need_of(weights, kv, parts, thin)


def vllm_split(
    weights: int,
    kv: int,
    shape: EngineShape,
    *,
    tp: int,
    pp: int = 1,
    context: int,
    estimate: Estimate = DEFAULT_ESTIMATE,
    run: VllmRun | None = None,
    dequantised: bool = False,
) -> Need:
    """One of ``tp × pp`` cards of a vLLM replica: its share of the weights and of ``kv`` (the KV cache the
    whole group holds, replicated heads included), counted as the seed did, and vLLM's cost on a card;
    ``dequantised``: bitsandbytes 4-bit weights (``vllm_dequantised``)."""
    cards = tp * pp
    share = weights // cards
    kv_share = (weights + kv) // cards - share
    if run is None:
        return vllm_card(
            share, kv_share, shape, tp=tp, pp=pp, estimate=estimate, context=context, dequantised=dequantised
        )
    return vllm_card(
        share,
        kv_share,
        shape,
        tp=tp,
        pp=pp,
        estimate=estimate,
        context=context,
        batched_tokens=run.batched_tokens,
        max_seqs=run.max_seqs,
        enforce_eager=run.enforce_eager,
        images=run.images_per_prompt,
        pooling=run.pooling,
        pcie=run.pcie,
        p2p=run.p2p,
        release=run.release,
        flashinfer_sampler=run.flashinfer_sampler,
        old_driver=run.old_driver,
        rocm=run.rocm,
        driver_unreported=run.driver_unreported,
        dequantised=dequantised,
    )
