"""What one card (or a CPU node's RAM) needs for a replica: the weights, the KV cache, and the engine's own
cost, counted one of two ways.

- ``measured``: each of the engine's costs from what the engines report of themselves, at the settings the
  engine runs with on the card (``planner.settings``). For vLLM, the terms of its start-up profile
  (``planner.vllmcost``). For llama.cpp (here), its buffers: the CUDA context on a card, the compute
  buffer (logits for a micro-batch over the vocabulary and a little per cell of cache with flash
  attention; without it, every head's scores against every cell), and the process. The constants and
  their sources are in ``planner.constants``; the rows they were fitted on are in
  ``tests/planner/engine_profiles/`` and ``tests/planner/engine_logs/``.
- ``seed``: the original planner's rule: llama.cpp 1 GiB + weights/20, vLLM 2 GiB + weights/5.

Both count the KV cache a request's context takes: one sequence for vLLM; for llama.cpp every slot's
cells where the server keeps slots of their own (``planner.settings``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from planner.constants import (
    GIB,
    LLAMACPP_CARD_FIXED,
    LLAMACPP_CONTEXT_BYTES_PER_UBATCH,
    LLAMACPP_CUDA_CONTEXT,
    LLAMACPP_FA_HIDDEN_BYTES,
    LLAMACPP_HOST_FIXED,
    LLAMACPP_HOST_HIDDEN_BYTES,
    LLAMACPP_LOGITS_BYTES,
    LLAMACPP_NO_FA_HIDDEN_BYTES,
    LLAMACPP_PIPELINE_COMPUTE,
    LLAMACPP_SCORE_BYTES,
    LLAMACPP_UBATCH,
    UNKNOWN_HEADS,
    UNKNOWN_HIDDEN,
    UNKNOWN_LAYERS,
    UNKNOWN_VOCAB,
    gguf_overhead_bytes,
)
from planner.model import Shape
from planner.settings import NO_SETTINGS, LlamacppRun, LlamacppSettings, Settings, llamacpp_run

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
    vision_hidden: int = 0
    """The vision tower's width, which sizes vLLM's encoder profile; 0: none counted."""
    mlp_width: int = 0
    """Each dense MLP matrix's width: a bitsandbytes weight's largest shard is it by the hidden size."""
    heads: int = 0
    """Attention heads: llama.cpp without flash attention holds every head's scores; 0 is unknown."""


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
        vision_hidden=0 if gguf else shape.vision_hidden,
        mlp_width=shape.mlp_width,
        heads=shape.heads,
    )


def need_of(weights: int, kv: int, parts: tuple[tuple[str, int], ...], thin: tuple[str, ...] = ()) -> Need:
    """A need of its parts."""
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


def llamacpp_compute(
    shape: EngineShape,
    cells: int,
    *,
    ubatch: int = LLAMACPP_UBATCH,
    flash_attn: bool = True,
    fa_hidden_bytes: int = LLAMACPP_FA_HIDDEN_BYTES,
    no_fa_hidden_bytes: int = LLAMACPP_NO_FA_HIDDEN_BYTES,
) -> int:
    """llama.cpp's compute buffer for a cache of ``cells`` tokens (every slot's): with flash attention the
    logits of a micro-batch over the vocabulary, a little per cell and per unit of width; without, the
    attention scores of a micro-batch against every cell for every head (f32), the f32 mask, and a little
    per unit of width, where that is larger. The graph is reserved for ``min(ubatch, cells)`` tokens (a
    micro-batch never outgrows the cache: bge-small at ``-ub 2048`` with 512 cells reserves a 512-token
    graph, tests/planner/engine_logs/README-llamacpp.md)."""
    if cells > 0:
        ubatch = min(ubatch, cells)
    vocab = shape.vocab or UNKNOWN_VOCAB
    hidden = shape.hidden or UNKNOWN_HIDDEN
    per_token = LLAMACPP_LOGITS_BYTES * vocab + LLAMACPP_CONTEXT_BYTES_PER_UBATCH * cells + fa_hidden_bytes * hidden
    fused = ubatch * per_token
    if flash_attn:
        return fused
    heads = shape.heads or UNKNOWN_HEADS
    scores = ubatch * cells * (heads + 1) * LLAMACPP_SCORE_BYTES + ubatch * hidden * no_fa_hidden_bytes
    return max(fused, scores)


def llamacpp_card(
    weights: int,
    kv: int,
    shape: EngineShape,
    *,
    context: int,
    estimate: Estimate = DEFAULT_ESTIMATE,
    run: LlamacppRun = LLAMACPP_DEFAULTS,
    pipeline: bool = False,
) -> Need:
    """One card of a llama.cpp replica holding ``weights`` and ``kv`` bytes (its share by layer), run with
    ``run``'s settings. Each card of a split has its own CUDA context and compute buffer, so each counts
    them whole; ``pipeline``: one of several cards holding every layer between them, whose compute
    buffers are larger (``LLAMACPP_PIPELINE_COMPUTE``)."""
    if estimate == "seed":
        return need_of(weights, kv, (("1 GiB + weights/20", gguf_overhead_bytes(weights)),))
    cells = run.cache_tokens(context)
    compute = llamacpp_compute(shape, cells, ubatch=run.ubatch, flash_attn=run.flash_attn)
    if pipeline:
        times, per = LLAMACPP_PIPELINE_COMPUTE
        compute = compute * times // per
    parts = (
        ("CUDA context", LLAMACPP_CUDA_CONTEXT),
        ("compute buffer", compute),
        ("cuBLAS and pools", LLAMACPP_CARD_FIXED),
    )
    return need_of(weights, kv, parts, thin_data(shape, context))


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
        return need_of(weights, kv, (("1 GiB + weights/20", gguf_overhead_bytes(weights)),))
    hidden = shape.hidden or UNKNOWN_HIDDEN
    cells = run.cache_tokens(context)
    # on a CPU the width's share is the host's own figure, fitted on the CPU profiles
    compute = llamacpp_compute(shape, cells, ubatch=run.ubatch, flash_attn=run.flash_attn, fa_hidden_bytes=0)
    compute += run.ubatch * hidden * LLAMACPP_HOST_HIDDEN_BYTES
    parts: tuple[tuple[str, int], ...] = (("compute buffer", compute), ("process", LLAMACPP_HOST_FIXED))
    if run.prompt_cache_bytes:
        parts += (("prompt cache", run.prompt_cache_bytes),)
    return need_of(weights, kv, parts, thin_data(shape, context))


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
    """One of ``width`` cards of a llama.cpp replica split by layer: its share of the weights and KV cache,
    and the engine's cost on a card. The seed counts ``(weights + kv) // width``. Measured, the fullest
    card's: llama.cpp gives each card whole layers, splitting ``n_layer + 1`` of them (the output counted
    as one, on the last card) in proportion, so the first card takes ``ceil((n_layer + 1) / width)`` of the
    repeating layers (``llama_model::load_tensors``, src/llama-model.cpp: a layer goes to the device
    whose cumulative split passes ``il / (n_layer + 1)``); counted as that many of ``n_layer``, at most
    the whole. With two cards or more every layer is on a card, and llama.cpp runs them as a pipeline."""
    share = weights // width
    if estimate == "seed" or width == 1:
        kv_share = (weights + kv) // width - share
        return llamacpp_card(share, kv_share, shape, context=context, estimate=estimate, run=run)
    layers = shape.layers or UNKNOWN_LAYERS
    most = min(layers, -(-(layers + 1) // width))
    return llamacpp_card(
        weights * most // layers,
        kv * most // layers,
        shape,
        context=context,
        estimate=estimate,
        run=run,
        pipeline=True,
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
