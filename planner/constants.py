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
buffers and the server). The ``seed`` estimate; measured, it over-estimates by 1.1-1.4x on a card and
1.2-3.2x on a CPU, never under (``measured`` counts llama.cpp's buffers instead)."""

VLLM_OVERHEAD_FIXED = 2 * GIB
VLLM_OVERHEAD_DIVISOR = 5
"""vLLM's cost on one card beyond weights and KV cache (the seed's ``overheadBytes``): 2 GiB + weights/5,
which is GPUStack's published estimate (weights x 1.2 + 2 GiB). The ``seed`` estimate: against vLLM
0.19's profiles it is 0.73-1.18x what a card took, under for small models with large vocabularies under
tensor parallel (``measured`` counts vLLM's profiled terms instead)."""

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

INDEXER_QUANT_BLOCK = 128
"""Values per fp32 scale in a sparse-attention indexer's fp8 key cache (vLLM's DeepSeek-V3.2 ``Indexer``:
``quant_block_size = 128``)."""

INDEXER_SCALE_BYTES = 4
"""Bytes of one such scale (fp32)."""

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


# The measured estimate (``planner.estimate``): each term fitted on the engines' own reports, the rows in
# tests/planner/engine_profiles/ (vLLM 0.19.0's start-up profiles on H100s; llama.cpp 0c1e57098 measured
# on a CPU and on an H200).

MIB = 1 << 20
"""Bytes in a MiB: llama.cpp logs its buffers in MiB."""

VLLM_BATCHED_TOKENS = 8192
"""The tokens vLLM profiles one forward pass with (``max_num_batched_tokens``): 8,192 for the API server
in its V1 engine ("Defaulting max_num_batched_tokens to 8192 for OPENAI_API_SERVER usage context", 0.19)."""

VLLM_MAX_SEQS = 1024
"""The sequences vLLM profiles its sampler with (``max_num_seqs``): 1,024 for the API server on cards of
this class ("Defaulting max_num_seqs to 1024", 0.19 on an H100)."""

VLLM_SAMPLER_BYTES = 15
"""Activation bytes per (sequence × vocabulary entry) of vLLM's profile: fp32 logits and the sampler's
copies of them. Fitted: Llama-3.x (128,256 entries) peaks at 1.89-1.97 GiB with 1,024 sequences, Gemma
(256,000) at 3.62-3.66, Qwen2.5 (152,064) at 2.21-2.29; 15 bytes is 1.83 / 3.58 / 2.18 GiB of it."""

VLLM_FORWARD_PEAK_BYTES = 18
"""Activation bytes per (batched token × hidden size) of the forward pass, whose peak replaces the
sampler's where the vocabulary is small: CodeLlama (32,016 entries, hidden 4,096) peaks at 0.77 GiB."""

VLLM_FORWARD_BYTES = 8
"""Activation bytes per (batched token × hidden size) held through both peaks (the residual stream and the
hidden states the logits are taken from); doubled for a model computed in float32 (Llama-3.1-8B in fp32
peaks at 2.21 GiB against 1.89 in bf16)."""

VLLM_MOE_FORWARD_BYTES = 30
"""Extra activation bytes per (batched token × hidden size) for a mixture of experts: routing and the
experts' gathered inputs (Kimi-VL-A3B 2.92 GiB, Qwen3-30B-A3B 2.68 GiB against ~2.3 for a dense model of
their vocabulary). A margin where six MoE models are the data."""

VLLM_NON_TORCH_ONE_CARD = 512 * MIB
"""Memory outside PyTorch that one card's forward pass adds (cuBLAS workspaces and the like): 0.24-0.27
GiB logged for most models, 0.46 GiB for granite 3.x."""

VLLM_NON_TORCH_STAGE = 256 * MIB
"""The same for a pipeline stage of one card each: 0.07 GiB logged (Llama-3.1-8B, PP 2 and 4)."""

VLLM_NON_TORCH_TP = 2 * GIB
VLLM_NON_TORCH_TP_PER_CARD = 64 * MIB
"""Memory outside PyTorch with tensor parallel: NCCL's buffers and the custom all-reduce's, 2.06-2.11
GiB logged at TP 2 and 2.13-2.21 GiB at TP 4; counted as 2 GiB + 64 MiB a card of the group."""

VLLM_GRAPHS_FIXED = 128 * MIB
VLLM_GRAPHS_PER_LAYER = 18 * MIB
VLLM_GRAPHS_PER_HIDDEN = 80 << 10
"""CUDA graph memory ("Graph capturing finished ... took"): 128 MiB, 18 MiB per layer the card holds, and
80 KiB per unit of hidden size shared by the tensor-parallel group. Fitted: 0.91 / 0.76 / 0.67 GiB for
Llama-3.1-8B at TP 1 / 2 / 4, 1.79-1.85 GiB for Llama-3.3-70B at TP 2, 0.71 GiB for Gemma-2-2B."""

VLLM_GRAPHS_MOE = 960 * MIB
"""Extra CUDA graph memory for a mixture of experts: gpt-oss-20b took 1.55 GiB on 24 layers, DeepSeek-V2-
Lite 1.57 GiB on 27, against ~0.7 GiB for a dense model that deep."""

VLLM_TP8 = 8
VLLM_NON_TORCH_TP8 = 2560 * MIB
"""Memory outside PyTorch on each card of a group of 8 or more: fitted on the published TP 8 logs
(tests/planner/engine_logs/vllm_published.json, vLLM 0.10.0 on 8× H100). Qwen3-32B left 9.2 GiB a card
beside its weights and KV cache; with that release's sorted sampler counted (5.5 GiB of activation,
``planner.vllmrelease``) and its logged graphs (1.17), 2.5 GiB is left outside PyTorch, what the TP 2 and
4 rule gives at 8 cards (``tests/planner/published_fit.py``); counted at that. Fitted without the sort,
this was 5.38 GiB: the sampler's bytes, read as NCCL's."""

VLLM_NON_TORCH_TP_PCIE = 1408 * MIB
"""Memory outside PyTorch on each card of a tensor-parallel group of cards with no NVLink
(``planner.settings.pcie_only``): NCCL opens fewer channels over PCIe and so fewer buffers. The published
logs of consumer cards show 0-1.35 GiB (RTX 3090 at TP 4 under 0.18-0.19: 0.2-1.35; RTX 4090 at TP 2 logs
0.25; T4 at TP 2 about 0) against 2.1-2.2 on H100s; counted at 1.375, the fit on every published row (1.35,
``tests/planner/published_fit.py``) rounded up. The most is Qwen3.5-27B's at TP 4, whose encoder vLLM
profiles with one image of 16,384 tokens where the estimate's vision term counts its 2,048 batched tokens:
part of that row's 1.35 GiB is likely the encoder's, read here as NCCL's."""

VLLM_MAX_CAPTURE = 512
"""The largest batch vLLM captures a CUDA graph for (``max_cudagraph_capture_size`` at most 512)."""

VLLM_VISION_BYTES = 28
"""Bytes per (batched token × vision tower width) of vLLM's encoder profile: the dummy images it fills its
encoder budget with, through the tower. Fitted on the published logs (``tests/planner/published_fit.py``):
Qwen3-VL-30B-A3B at TP 2 (vLLM 0.12, 8,192 batched tokens, 64 sequences, width 1,152) needs 21 beyond the
other terms, a Qwen3.5-27B fine-tune at TP 4 (0.19.0, whose encoder vLLM profiles with one image of
16,384 tokens) 28. Small: on these logs the encoder's profile mostly fits in what the other terms keep."""

UNKNOWN_VOCAB = 262_208
"""The vocabulary counted when a model's is not known: Gemma 3's, the largest in the profiles."""

UNKNOWN_HEADS = 128
"""The attention heads counted when a model's are not known: past Llama-3.1-405B's and DeepSeek-V3's."""

UNKNOWN_HIDDEN = 8192
"""The hidden size counted when a model's is not known: a 70B's."""

UNKNOWN_LAYERS = 128
"""The layers counted when a model's are not known: past Llama-3.1-405B's 126."""

LLAMACPP_UBATCH = 512
"""llama.cpp's physical batch (``--ubatch-size``), the default its compute buffers are sized for."""

LLAMACPP_CUDA_CONTEXT = 518 * MIB
"""A bare CUDA context on the card (measured on an H200, CUDA 13): llama.cpp has no share of its own, so
the plan counts it."""

LLAMACPP_CARD_FIXED = 80 * MIB
"""On a card beyond the context and the logits' buffer: cuBLAS and the memory pools (measured: 576-648
MiB in all, whatever the model's size)."""

LLAMACPP_HOST_FIXED = 16 * MIB
"""The process on a CPU beyond its buffers: what the measured peaks left after the other terms."""

LLAMACPP_LOGITS_BYTES = 4
"""Bytes per (micro-batch token × vocabulary entry) of the compute buffer: fp32 logits (66.5 MiB on a
card and 70.5 MiB on a CPU at a 32,000 vocabulary)."""

LLAMACPP_CONTEXT_BYTES_PER_UBATCH = 2
"""Compute-buffer bytes per (micro-batch token × context token) with flash attention: from 8k to 32k tokens
the buffer grew by 0.9 of this for the first model and 2.0 for the second (24 MiB on the card); the
steeper is counted, as contexts past the measured ones extrapolate it."""

LLAMACPP_HOST_HIDDEN_BYTES = 32
"""CPU bytes per (micro-batch token × hidden size) beyond the logits: the second measured model, 1,024
wider, took 16-36 MiB more than the first at the same vocabulary and context."""

LLAMACPP_SCORE_BYTES = 4
"""Bytes per (micro-batch token × cell × head) of llama.cpp's compute buffer without flash attention: the
attention scores in f32 (``ggml_mul_mat`` of K and Q, src/llama-graph.cpp), and once more for the f32
mask. The published logs (tests/planner/engine_logs/llamacpp_published.json) agree to the MiB: Mistral-7B
at 32,768 cells 2,144 MiB = 2,048 of scores (32 heads) + 64 of mask + 32; DeepSeek-R1-Distill-Qwen-32B on
4 slots of 16,384 (65,536 cells, 40 heads) 5,288 MiB = 5,120 + 128 + 40: the scores span every slot's
cells."""

LLAMACPP_NO_FA_HIDDEN_BYTES = 24
"""What the same buffer holds beyond scores and mask, per (micro-batch token × hidden size): 32 MiB for
Mistral-7B (4,096 wide) and 40 MiB for the 32B (5,120), 16 bytes each, and 30 MiB for pythia-2.8b (2,560
wide, GPT-NeoX's parallel attention and MLP), 24; the largest is counted."""

LLAMACPP_FA_HIDDEN_BYTES = 10
"""What a compute buffer holds beyond logits and mask, per (micro-batch token × hidden size): the
activations of a micro-batch. The published logs (tests/planner/engine_logs/llamacpp_published.json):
jina-embeddings-v4 (2,048 wide) at a micro-batch of 4,096 holds 96 MiB past its logits, 12 bytes a unit
less the mask's 4 (9 once its logits are counted at the vocabulary the file gives); pythia's buffers at
512 are 1-3 MiB past (2-3 bytes); counted at 10 (``tests/planner/published_fit.py``)."""

LLAMACPP_STATE_WIDENING = 2
"""llama.cpp keeps a hybrid's recurrent state in f32 (``type_r``/``type_s``, src/llama-model.cpp), twice the
16 bits of ``Shape.state_bytes_per_sequence``. The published logs agree: Qwen3-Coder-Next on 4 slots
holds 397 MiB of context at 4,096 cells, 96 MiB of KV cache and 301 of state, 75 MiB a slot against 37.7
counted at 16 bits (tests/planner/engine_logs/llamacpp_published.json, rows 22-24)."""

LLAMACPP_PIPELINE_COMPUTE = (11, 8)
"""With every layer on two or more cards llama.cpp runs them as a pipeline ("pipeline parallelism enabled
(n_copies=4)": ``pipeline_parallel`` in src/llama-context.cpp, on where the model spans several devices,
every layer is offloaded and the split is by layer), whose scheduler keeps copies of the graph's inputs
and splits: each card's compute buffer × 11/8. Fitted on the one published pipeline run
(tests/planner/engine_logs/llamacpp_published.json, row 5: Qwen2.5-Coder-32B over two RTX 3090 Ti, 233
and 237.5 MiB where one card's buffer is counted at 177): 1.34 of it on the last card, rounded up."""
