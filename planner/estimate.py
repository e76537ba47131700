"""What one card (or a CPU node's RAM) needs for a replica: the weights, the KV cache, and the engine's own
cost, counted one of two ways.

- ``measured``: each of the engine's costs from what the engines report of themselves. For vLLM, the terms
  of its start-up profile: memory outside PyTorch (NCCL's buffers when tensor parallel), the activation
  peak of the forward pass and sampler it profiles with, and CUDA graphs. For llama.cpp, its buffers: the
  CUDA context on a card, the compute buffer (logits for a micro-batch over the vocabulary, and a little
  per token of context), and the process. The constants and their sources are in ``planner.constants``;
  the rows they were fitted on are in ``tests/planner/engine_profiles/``.
- ``seed``: the original planner's rule: llama.cpp 1 GiB + weights/20, vLLM 2 GiB + weights/5.

Both count the KV cache for ``context`` tokens of one sequence, as the planner always has.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from planner.constants import (
    GIB,
    LLAMACPP_CARD_FIXED,
    LLAMACPP_CONTEXT_BYTES_PER_UBATCH,
    LLAMACPP_CUDA_CONTEXT,
    LLAMACPP_HOST_FIXED,
    LLAMACPP_HOST_HIDDEN_BYTES,
    LLAMACPP_LOGITS_BYTES,
    LLAMACPP_UBATCH,
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
    VLLM_MAX_SEQS,
    VLLM_MOE_FORWARD_BYTES,
    VLLM_NON_TORCH_ONE_CARD,
    VLLM_NON_TORCH_STAGE,
    VLLM_NON_TORCH_TP,
    VLLM_NON_TORCH_TP_PER_CARD,
    VLLM_SAMPLER_BYTES,
    gguf_overhead_bytes,
    vllm_overhead_bytes,
)
from planner.model import Shape
from planner.settings import NO_SETTINGS, LlamacppRun, LlamacppSettings, Settings, VllmRun, llamacpp_run

Estimate = Literal["measured", "seed"]
ESTIMATES: tuple[Estimate, ...] = get_args(Estimate)
DEFAULT_ESTIMATE: Estimate = "measured"
"""What a plan counts with when neither the request nor the deployment names an estimate."""

LLAMACPP_DEFAULTS = llamacpp_run(LlamacppSettings())
"""llama-server as it starts with no settings given."""

LONG_CONTEXT = 32_768
"""Past this many tokens of context the profiles have no row (they were taken at 2k-32k)."""


@dataclass(frozen=True, slots=True)
class EngineShape:
    """What the measured estimate reads of a model beyond its weights and KV cache; 0 is unknown, and an
    unknown size is counted at the largest the profiles saw."""

    layers: int = 0
    hidden: int = 0
    vocab: int = 0
    moe: bool = False
    """A mixture of experts: its activations and graphs are counted with a margin."""
    multimodal: bool = False
    """A vision (or audio) encoder besides the language model, which vLLM profiles too."""
    float32: bool = False
    """The engine computes in float32 (a float32 checkpoint vLLM is asked to keep so)."""


@dataclass(frozen=True, slots=True)
class Need:
    """What one card (or the node's RAM) holds for a replica, in bytes, term by term."""

    weights: int
    kv: int
    engine: int
    """The engine's own cost: the sum of ``parts``."""
    parts: tuple[tuple[str, int], ...]
    """The engine's cost by term, for the reader: ``("activation peak", bytes)`` and so on."""
    thin: tuple[str, ...] = ()
    """Where the data behind the estimate are thin, so that it carries a margin (said in the option)."""

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.engine


def engine_shape(shape: Shape, *, gguf: bool = False) -> EngineShape:
    """What the measured estimate reads of ``shape``. A GGUF's vision tower is in its ``mmproj`` file,
    which llama.cpp loads only when asked, so it is no part of a GGUF replica."""
    return EngineShape(
        layers=shape.layers,
        hidden=shape.hidden,
        vocab=shape.vocab,
        moe=shape.experts > 0,
        multimodal=shape.vision_params > 0 and not gguf,
    )


def _need(weights: int, kv: int, parts: tuple[tuple[str, int], ...], thin: tuple[str, ...] = ()) -> Need:
    return Need(weights=weights, kv=kv, engine=sum(b for _, b in parts), parts=parts, thin=thin)


def thin_data(shape: EngineShape, context: int) -> tuple[str, ...]:
    """What about a model or a context the profiles barely cover: said in every option planned for it."""
    out = []
    if shape.moe:
        out.append("mixture-of-experts activation")
    if shape.multimodal:
        out.append("multimodal encoder")
    if context > LONG_CONTEXT:
        out.append(f"context past {LONG_CONTEXT} tokens")
    if not (shape.layers and shape.hidden and shape.vocab):
        out.append("model shape unknown")
    return tuple(out)


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


VLLM_FIT = VllmFit()


def vllm_activation(
    shape: EngineShape,
    *,
    batched_tokens: int = VLLM_BATCHED_TOKENS,
    max_seqs: int = VLLM_MAX_SEQS,
    fit: VllmFit = VLLM_FIT,
) -> int:
    """vLLM's profiled activation peak on each card: the sampler's logits for ``max_seqs`` sequences over
    the whole vocabulary (gathered on every card, so not divided by tensor parallel, as the profiles show),
    or the forward pass of ``batched_tokens`` tokens where that is larger, and what both hold."""
    vocab = shape.vocab or UNKNOWN_VOCAB
    hidden = shape.hidden or UNKNOWN_HIDDEN
    held = fit.forward_bytes * (2 if shape.float32 else 1) + (fit.moe_forward_bytes if shape.moe else 0)
    peak = max(max_seqs * vocab * fit.sampler_bytes, batched_tokens * hidden * fit.forward_peak_bytes)
    return peak + batched_tokens * hidden * held


def vllm_non_torch(tp: int, pp: int = 1, *, fit: VllmFit = VLLM_FIT) -> int:
    """Memory outside PyTorch on each card of a ``tp``-wide group (of ``pp`` pipeline stages)."""
    if tp > 1:
        return fit.non_torch_tp + tp * fit.non_torch_tp_per_card
    return fit.non_torch_one_card if pp == 1 else fit.non_torch_stage


def vllm_graphs(shape: EngineShape, tp: int = 1, pp: int = 1, *, fit: VllmFit = VLLM_FIT) -> int:
    """CUDA graph memory on each card: per layer the card holds, and per unit of hidden size its share."""
    layers = -(-(shape.layers or UNKNOWN_LAYERS) // pp)
    hidden = shape.hidden or UNKNOWN_HIDDEN
    moe = fit.graphs_moe if shape.moe else 0
    return fit.graphs_fixed + layers * fit.graphs_per_layer + hidden * fit.graphs_per_hidden // tp + moe


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
    fit: VllmFit = VLLM_FIT,
) -> Need:
    """One card of a vLLM replica holding ``weights`` and ``kv`` bytes (its share of each), started with
    ``batched_tokens`` and ``max_seqs`` (the API server's defaults on an H100 unless given), and without
    CUDA graphs where ``enforce_eager``.

    ``measured`` counts what vLLM holds within its ``--gpu-memory-utilization`` share, CUDA graphs
    included (vLLM profiles them into the share since 0.21): the CUDA context and NCCL's set-up, taken
    before vLLM profiles, live in the rest of the card."""
    if estimate == "seed":
        return _need(weights, kv, (("2 GiB + weights/5", vllm_overhead_bytes(weights)),))
    parts = (
        ("non-torch", vllm_non_torch(tp, pp, fit=fit)),
        ("activation peak", vllm_activation(shape, batched_tokens=batched_tokens, max_seqs=max_seqs, fit=fit)),
        ("CUDA graphs", 0 if enforce_eager else vllm_graphs(shape, tp, pp, fit=fit)),
    )
    return _need(weights, kv, parts, thin_data(shape, context))


def llamacpp_compute(shape: EngineShape, context: int, *, ubatch: int = LLAMACPP_UBATCH) -> int:
    """llama.cpp's compute buffer with flash attention: the logits of a micro-batch over the vocabulary,
    and a little per token of context."""
    vocab = shape.vocab or UNKNOWN_VOCAB
    return ubatch * (LLAMACPP_LOGITS_BYTES * vocab + LLAMACPP_CONTEXT_BYTES_PER_UBATCH * context)


def llamacpp_card(
    weights: int,
    kv: int,
    shape: EngineShape,
    *,
    context: int,
    estimate: Estimate = DEFAULT_ESTIMATE,
    run: LlamacppRun = LLAMACPP_DEFAULTS,
) -> Need:
    """One card of a llama.cpp replica holding ``weights`` and ``kv`` bytes (its share by layer), run with
    ``run``'s settings. Each card of a split has its own CUDA context and compute buffer, so each counts
    them whole."""
    if estimate == "seed":
        return _need(weights, kv, (("1 GiB + weights/20", gguf_overhead_bytes(weights)),))
    cells = run.cache_tokens(context)
    parts = (
        ("CUDA context", LLAMACPP_CUDA_CONTEXT),
        ("compute buffer", llamacpp_compute(shape, cells, ubatch=run.ubatch)),
        ("cuBLAS and pools", LLAMACPP_CARD_FIXED),
    )
    return _need(weights, kv, parts, thin_data(shape, context))


def llamacpp_host(
    weights: int,
    kv: int,
    shape: EngineShape,
    *,
    context: int,
    estimate: Estimate = DEFAULT_ESTIMATE,
    run: LlamacppRun = LLAMACPP_DEFAULTS,
) -> Need:
    """A llama.cpp replica in a node's RAM, the whole file mapped in (a CPU build)."""
    if estimate == "seed":
        return _need(weights, kv, (("1 GiB + weights/20", gguf_overhead_bytes(weights)),))
    hidden = shape.hidden or UNKNOWN_HIDDEN
    cells = run.cache_tokens(context)
    compute = llamacpp_compute(shape, cells, ubatch=run.ubatch) + run.ubatch * hidden * LLAMACPP_HOST_HIDDEN_BYTES
    parts = (("compute buffer", compute), ("process", LLAMACPP_HOST_FIXED))
    return _need(weights, kv, parts, thin_data(shape, context))


def describe(need: Need) -> str:
    """A need in a few words: ``15.0 GiB weights + 1.0 GiB KV + 3.1 GiB engine (…)``."""
    parts = ", ".join(f"{name} {b / GIB:.2f}" for name, b in need.parts)
    text = f"{need.weights / GIB:.1f} GiB weights + {need.kv / GIB:.1f} GiB KV + {need.engine / GIB:.2f} GiB engine"
    text += f" ({parts})"
    if need.thin:
        text += "; margin kept: thin data on " + ", ".join(need.thin)
    return text


def llamacpp_split(
    weights: int,
    kv: int,
    width: int,
    shape: EngineShape,
    *,
    context: int,
    estimate: Estimate = DEFAULT_ESTIMATE,
    run: LlamacppRun = LLAMACPP_DEFAULTS,
) -> Need:
    """One of ``width`` cards of a llama.cpp replica split by layer: its share of the weights and KV cache
    (counted as the seed did, ``(weights + kv) // width``), and the engine's cost on a card."""
    share = weights // width
    return llamacpp_card(share, (weights + kv) // width - share, shape, context=context, estimate=estimate, run=run)


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
) -> Need:
    """One of ``tp × pp`` cards of a vLLM replica: its share of the weights and of ``kv`` (the KV cache the
    whole group holds, replicated heads included), counted as the seed did, and vLLM's cost on a card."""
    cards = tp * pp
    share = weights // cards
    kv_share = (weights + kv) // cards - share
    if run is None:
        return vllm_card(share, kv_share, shape, tp=tp, pp=pp, estimate=estimate, context=context)
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
    )


@dataclass(frozen=True, slots=True)
class Sizing:
    """How an option's need is counted: the estimate, the model as it reads it, and the context."""

    estimate: Estimate = DEFAULT_ESTIMATE
    shape: EngineShape = field(default_factory=EngineShape)
    context: int = 0
    settings: Settings = NO_SETTINGS
    """The engines' settings the request (or the deployment) gives; the rest are each engine's defaults
    for the card (``planner.settings``)."""

    @property
    def llamacpp(self) -> LlamacppRun:
        return llamacpp_run(self.settings.llamacpp)

    def margin(self, need: Need) -> str:
        """Where the data behind ``need`` are thin, for the option to say."""
        return ", ".join(need.thin)
