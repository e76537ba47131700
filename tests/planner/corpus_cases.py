"""The hand arithmetic for each repository of the corpus: what ``test_corpus.py`` checks the planner
against.

Notation in the expressions: vocab x hidden for embeddings (twice when the output head is not tied); per
layer q and o (hidden x heads x head_dim, twice), k and v (hidden x KV heads x head_dim, twice), the MLP
(3 x hidden x intermediate when gated, 2 x when not; experts times that, plus a router of hidden x experts).
Norms and biases are left out of the hand counts: they are under 0.1%.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    kv: int
    """KV bytes per token, every layer."""
    params: int
    bits: float
    """The original's bits per weight as loaded (a GGUF repository: its artifact's)."""
    context: int
    """The longest context, as vLLM derives it."""
    quant: str = "bf16"
    artifacts: tuple[str, ...] = ("original",)
    weights: int = 0
    """Bytes of the weights where the corpus has no listing: a single ``model.safetensors`` of this size."""
    config_from: str = ""
    """A GGUF repository has no config.json: the user passes the original model's, as named here."""


# fmt: off
LLAMA_31_8B = 128256 * 4096 * 2 + 32 * (4096 * 32 * 128 * 2 + 4096 * 8 * 128 * 2 + 3 * 4096 * 14336)
LLAMA_31_70B = 128256 * 8192 * 2 + 80 * (8192 * 64 * 128 * 2 + 8192 * 8 * 128 * 2 + 3 * 8192 * 28672)
QWEN25_7B = 152064 * 3584 * 2 + 28 * (3584 * 28 * 128 * 2 + 3584 * 4 * 128 * 2 + 3 * 3584 * 18944)
QWEN2_VL_VISION = 32 * (4 * 1280 * 1280 + 2 * 1280 * 5120) + (1280 * 4) ** 2 + 1280 * 4 * 3584
QWEN25_VL_VISION = 32 * (4 * 1280 * 1280 + 3 * 1280 * 3420) + (1280 * 4) ** 2 + 1280 * 4 * 3584
QWEN3_235B = 151936 * 4096 * 2 + 94 * (
    4096 * 64 * 128 * 2 + 4096 * 4 * 128 * 2 + 128 * 3 * 4096 * 1536 + 4096 * 128
)
QWEN3_30B = 151936 * 2048 * 2 + 48 * (
    2048 * 32 * 128 * 2 + 2048 * 4 * 128 * 2 + 128 * 3 * 2048 * 768 + 2048 * 128
)
QWEN3_8B = 151936 * 4096 * 2 + 36 * (4096 * 32 * 128 * 2 + 4096 * 8 * 128 * 2 + 3 * 4096 * 12288)
DEEPSEEK_V3 = (
    129280 * 7168 * 2
    + 61 * (7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168)  # MLA
    + 3 * 3 * 7168 * 18432  # three dense layers
    + 58 * (256 * 3 * 7168 * 2048 + 7168 * 256 + 3 * 7168 * 2048)  # 256 experts, router, a shared expert
)
KIMI_K25_EXPERTS = 60 * 384 * 3 * 7168 * 2048
KIMI_K25 = (
    163840 * 7168 * 2
    + 61 * (7168 * 1536 + 1536 * 64 * 192 + 7168 * 576 + 512 * 64 * 256 + 64 * 128 * 7168)
    + 1 * 3 * 7168 * 18432
    + 60 * (7168 * 384 + 3 * 7168 * 2048)
    + KIMI_K25_EXPERTS
)
GEMMA3_27B = 262208 * 5376 + 62 * (5376 * 32 * 128 * 2 + 5376 * 16 * 128 * 2 + 3 * 5376 * 21504) + (
    27 * (4 * 1152 * 1152 + 2 * 1152 * 4304) + 1152 * 5376  # SigLIP and its projection
)
GPT_OSS_120B_EXPERTS = 36 * 128 * 3 * 2880 * 2880
GPT_OSS_120B = 201088 * 2880 * 2 + 36 * (2880 * 64 * 64 * 2 + 2880 * 8 * 64 * 2 + 2880 * 128) + GPT_OSS_120B_EXPERTS
GPT_OSS_20B_EXPERTS = 24 * 32 * 3 * 2880 * 2880
GPT_OSS_20B = 201088 * 2880 * 2 + 24 * (2880 * 64 * 64 * 2 + 2880 * 8 * 64 * 2 + 2880 * 32) + GPT_OSS_20B_EXPERTS
GENZ_70B = 32000 * 8192 * 2 + 80 * (8192 * 64 * 128 * 2 + 8192 * 8 * 128 * 2 + 3 * 8192 * 28672)
# Hybrids: a Mamba-2 layer is in_proj (hidden x (inner + conv + heads)), conv1d (conv x kernel) and out_proj
# (inner x hidden), conv = inner + 2 x groups x state; a gated DeltaNet is in_proj_qkvz and in_proj_ba
# (hidden x (2 key + 2 value + 2 value heads)), conv1d ((2 key + value) x kernel) and out_proj
NEMOTRON_H_56B = (
    131072 * 8192 * 2
    + 54 * (8192 * (16384 + 20480 + 256) + 20480 * 4 + 16384 * 8192)  # 54 Mamba-2: 256 heads of 64, 8 x 256
    + 10 * (8192 * 64 * 128 * 2 + 8192 * 8 * 128 * 2)  # 10 attention layers
    + 54 * 2 * 8192 * 32768  # 54 squared-ReLU MLPs, not gated
)
NEMOTRON_3_NANO = (
    131072 * 2688 * 2
    + 23 * (2688 * (4096 + 6144 + 64) + 6144 * 4 + 4096 * 2688)  # 23 Mamba-2: 64 heads of 64, 8 x 128
    + 6 * (2688 * 32 * 128 * 2 + 2688 * 2 * 128 * 2)  # 6 attention layers
    + 23 * (128 * 2 * 2688 * 1856 + 2688 * 128 + 2 * 2688 * 3712)  # 23 MoE: 128 ungated experts, a shared one
)
NEMOTRON_3_SUPER = (
    131072 * 4096 * 2
    + 40 * (4096 * (8192 + 10240 + 128) + 10240 * 4 + 8192 * 4096)  # 40 Mamba-2: 128 heads of 64, 8 x 128
    + 8 * (4096 * 32 * 128 * 2 + 4096 * 2 * 128 * 2)  # 8 attention layers
    # 40 latent MoE: 512 ungated experts of 2688 in a 1024 latent, its two projections, a shared expert
    + 40 * (512 * 2 * 1024 * 2688 + 4096 * 512 + 2 * 4096 * 1024 + 2 * 4096 * 5376)
)
NEMOTRON_SUPER_49B = (
    128256 * 8192 * 2
    + 49 * (8192 * 64 * 128 * 2 + 8192 * 8 * 128 * 2)  # 49 attention layers of 8 KV heads; 31 skip it
    # ffn_mult 2.625, 5.25, 0.5, 1.0, 1.3125, 3.28125: 2 x mult x 8192 / 3 up to a multiple of 256
    + 3 * 8192 * (6 * 14336 + 49 * 28672 + 6 * 2816 + 8 * 5632 + 10 * 7168 + 17920)
)
LLAMA4_MAVERICK = (
    202048 * 5120 * 2
    + 48 * (5120 * 40 * 128 * 2 + 5120 * 8 * 128 * 2)
    + 24 * 3 * 5120 * 16384  # the dense layers: intermediate_size_mlp
    + 24 * (128 * 3 * 5120 * 8192 + 5120 * 128 + 3 * 5120 * 8192)  # every second: 128 experts and a shared one
)
QWEN35_27B = (
    248320 * 5120 * 2
    + 16 * (5120 * 24 * 256 * 3 + 5120 * 4 * 256 * 2)  # every fourth layer gated attention: q, its gate, o
    + 48 * (5120 * (2 * 2048 + 2 * 6144 + 2 * 48) + 10240 * 4 + 6144 * 5120)  # gated DeltaNet 16 x 128, 48 x 128
    + 64 * 3 * 5120 * 17408
    + 27 * (4 * 1152 * 1152 + 2 * 1152 * 4304) + 3 * 2 * 16 * 16 * 1152 + 4608 * 4608 + 4608 * 5120  # vision
)
QWEN35_397B = (
    248320 * 4096 * 2
    + 15 * (4096 * 32 * 256 * 3 + 4096 * 2 * 256 * 2)
    + 45 * (4096 * (2 * 2048 + 2 * 8192 + 2 * 64) + 12288 * 4 + 8192 * 4096)  # DeltaNet 16 x 128, 64 x 128
    + 60 * (512 * 3 * 4096 * 1024 + 4096 * 512 + 3 * 4096 * 1024 + 4096)  # 512 experts, a shared one and its gate
    + 27 * (4 * 1152 * 1152 + 2 * 1152 * 4304) + 3 * 2 * 16 * 16 * 1152 + 4608 * 4608 + 4608 * 4096  # vision
)
JANUS_LANGUAGE = 102400 * 2048 * 2 + 24 * (4 * 2048 * 2048 + 3 * 2048 * 5632)

CASES: dict[str, Case] = {
    "meta-llama--Meta-Llama-3.1-8B": Case(
        kv=2 * 32 * 8 * 128 * 2, params=LLAMA_31_8B, bits=16, context=131072,
    ),
    "meta-llama--Meta-Llama-3.1-70B": Case(
        kv=2 * 80 * 8 * 128 * 2, params=LLAMA_31_70B, bits=16, context=131072, weights=LLAMA_31_70B * 2,
    ),
    "meta-llama--Llama-3.2-1B-Instruct": Case(
        kv=2 * 16 * 8 * 64 * 2, context=131072, bits=16,
        params=128256 * 2048 + 16 * (2048 * 32 * 64 * 2 + 2048 * 8 * 64 * 2 + 3 * 2048 * 8192),
        weights=2 * (128256 * 2048 + 16 * (2048 * 32 * 64 * 2 + 2048 * 8 * 64 * 2 + 3 * 2048 * 8192)),
    ),
    "meta-llama--Llama-3.2-3B": Case(
        kv=2 * 28 * 8 * 128 * 2, context=131072, bits=16,
        params=128256 * 3072 + 28 * (3072 * 24 * 128 * 2 + 3072 * 8 * 128 * 2 + 3 * 3072 * 8192),
        weights=2 * (128256 * 3072 + 28 * (3072 * 24 * 128 * 2 + 3072 * 8 * 128 * 2 + 3 * 3072 * 8192)),
    ),
    "nvidia--Llama-3.1-70B-Instruct-FP8": Case(
        # ModelOpt FP8: every Linear one byte but lm_head; embeddings and lm_head stay bf16
        kv=2 * 80 * 8 * 128 * 2, params=LLAMA_31_70B, context=131072, quant="fp8",
        weights=LLAMA_31_70B + 2 * 128256 * 8192, bits=8 * (LLAMA_31_70B + 2 * 128256 * 8192) / LLAMA_31_70B,
    ),
    "TheBloke--Genz-70b-GPTQ": Case(
        # 4 bits a weight and a 16-bit scale and 4-bit zero per group of 128; embeddings and head 16-bit
        kv=2 * 80 * 8 * 128 * 2, params=GENZ_70B, context=4096, quant="gptq-int4",
        bits=((4 + 20 / 128) * (GENZ_70B - 2 * 32000 * 8192) + 16 * 2 * 32000 * 8192) / GENZ_70B,
    ),
    "Qwen--Qwen2.5-7B": Case(
        kv=2 * 28 * 4 * 128 * 2, params=QWEN25_7B, bits=16, context=131072, weights=QWEN25_7B * 2,
    ),
    "Qwen--Qwen2.5-72B": Case(
        kv=2 * 80 * 8 * 128 * 2, context=131072, bits=16,
        params=152064 * 8192 * 2 + 80 * (8192 * 64 * 128 * 2 + 8192 * 8 * 128 * 2 + 3 * 8192 * 29568),
        weights=2 * (152064 * 8192 * 2 + 80 * (8192 * 64 * 128 * 2 + 8192 * 8 * 128 * 2 + 3 * 8192 * 29568)),
    ),
    "Qwen--Qwen2-VL-7B-Instruct": Case(
        kv=2 * 28 * 4 * 128 * 2, params=QWEN25_7B + QWEN2_VL_VISION, bits=16, context=32768,
        weights=2 * (QWEN25_7B + QWEN2_VL_VISION),
    ),
    "Qwen--Qwen2.5-VL-7B-Instruct": Case(
        kv=2 * 28 * 4 * 128 * 2, params=QWEN25_7B + QWEN25_VL_VISION, bits=16, context=128000,
        weights=2 * (QWEN25_7B + QWEN25_VL_VISION),
    ),
    "Qwen--Qwen3-235B-A22B": Case(
        kv=2 * 94 * 4 * 128 * 2, params=QWEN3_235B, bits=16, context=40960, weights=QWEN3_235B * 2,
    ),
    "nvidia--Qwen3-235B-A22B-NVFP4": Case(
        # NVFP4: 4 bits and an FP8 scale per 16 on every Linear but lm_head and the routers
        kv=2 * 94 * 4 * 128 * 2, params=QWEN3_235B, context=40960, quant="nvfp4",
        weights=(QWEN3_235B - 2 * 151936 * 4096) * 9 // 16 + 2 * 151936 * 4096 * 2,
        bits=(4.5 * (QWEN3_235B - 2 * 151936 * 4096) + 16 * 2 * 151936 * 4096) / QWEN3_235B,
    ),
    "Qwen--Qwen3-30B-A3B": Case(
        kv=2 * 48 * 4 * 128 * 2, params=QWEN3_30B, bits=16, context=40960, weights=QWEN3_30B * 2,
    ),
    "Qwen--Qwen3-30B-A3B-FP8": Case(
        # FP8 blocks of 128 x 128; embeddings and lm_head bf16
        kv=2 * 48 * 4 * 128 * 2, params=QWEN3_30B, context=40960, quant="fp8",
        weights=QWEN3_30B + 2 * 151936 * 2048, bits=8 * (QWEN3_30B + 2 * 151936 * 2048) / QWEN3_30B,
    ),
    "Qwen--Qwen3-32B": Case(
        kv=2 * 64 * 8 * 128 * 2, context=40960, bits=16,
        params=151936 * 5120 * 2 + 64 * (5120 * 64 * 128 * 2 + 5120 * 8 * 128 * 2 + 3 * 5120 * 25600),
        weights=2 * (151936 * 5120 * 2 + 64 * (5120 * 64 * 128 * 2 + 5120 * 8 * 128 * 2 + 3 * 5120 * 25600)),
    ),
    "Qwen--Qwen3-8B-FP8": Case(
        kv=2 * 36 * 8 * 128 * 2, params=QWEN3_8B, context=40960, quant="fp8",
        weights=QWEN3_8B + 2 * 151936 * 4096, bits=8 * (QWEN3_8B + 2 * 151936 * 4096) / QWEN3_8B,
    ),
    "THUDM--chatglm3-6b": Case(
        # multi_query_group_num 2 KV groups of kv_channels 128
        kv=2 * 28 * 2 * 128 * 2, context=8192, bits=16, quant="fp16",
        params=65024 * 4096 * 2 + 28 * (4096 * 32 * 128 * 2 + 4096 * 2 * 128 * 2 + 3 * 4096 * 13696),
        weights=2 * (65024 * 4096 * 2 + 28 * (4096 * 32 * 128 * 2 + 4096 * 2 * 128 * 2 + 3 * 4096 * 13696)),
    ),
    "THUDM--glm-4-9b": Case(
        kv=2 * 40 * 2 * 128 * 2, context=8192, bits=16,
        params=151552 * 4096 * 2 + 40 * (4096 * 32 * 128 * 2 + 4096 * 2 * 128 * 2 + 3 * 4096 * 13696),
        weights=2 * (151552 * 4096 * 2 + 40 * (4096 * 32 * 128 * 2 + 4096 * 2 * 128 * 2 + 3 * 4096 * 13696)),
    ),
    "deepseek-ai--DeepSeek-V2-Lite": Case(
        # MLA: one latent of kv_lora_rank + qk_rope_head_dim a layer; no q_lora_rank
        kv=27 * (512 + 64) * 2, context=163840, bits=16,
        params=102400 * 2048 * 2 + 27 * (2048 * 16 * 192 + 2048 * 576 + 512 * 16 * 256 + 16 * 128 * 2048)
        + 3 * 2048 * 10944 + 26 * (64 * 3 * 2048 * 1408 + 2048 * 64 + 2 * 3 * 2048 * 1408),
        weights=2 * (102400 * 2048 * 2 + 27 * (2048 * 16 * 192 + 2048 * 576 + 512 * 16 * 256 + 16 * 128 * 2048)
                     + 3 * 2048 * 10944 + 26 * (64 * 3 * 2048 * 1408 + 2048 * 64 + 2 * 3 * 2048 * 1408)),
    ),
    "deepseek-ai--DeepSeek-V3": Case(
        # FP8 blocks; embeddings and lm_head bf16. YaRN: 4096 x 40
        kv=61 * (512 + 64) * 2, params=DEEPSEEK_V3, context=4096 * 40, quant="fp8",
        weights=DEEPSEEK_V3 + 2 * 129280 * 7168, bits=8 * (DEEPSEEK_V3 + 2 * 129280 * 7168) / DEEPSEEK_V3,
    ),
    "moonshotai--Kimi-K2.5": Case(
        # compressed-tensors int4 in groups of 32 (a bf16 scale each) on the routed experts; the rest bf16
        kv=61 * (512 + 64) * 2, params=KIMI_K25, context=262144, quant="int4",
        weights=KIMI_K25_EXPERTS * 9 // 16 + (KIMI_K25 - KIMI_K25_EXPERTS) * 2,
        bits=(4.5 * KIMI_K25_EXPERTS + 16 * (KIMI_K25 - KIMI_K25_EXPERTS)) / KIMI_K25,
    ),
    "google--gemma-2-9b": Case(
        # fp32 files, loaded at 16 bits
        kv=2 * 42 * 8 * 256 * 2, context=8192, bits=16, quant="fp32",
        params=256000 * 3584 + 42 * (3584 * 16 * 256 * 2 + 3584 * 8 * 256 * 2 + 3 * 3584 * 14336),
        weights=4 * (256000 * 3584 + 42 * (3584 * 16 * 256 * 2 + 3584 * 8 * 256 * 2 + 3 * 3584 * 14336)),
    ),
    "google--gemma-3-1b-it": Case(
        kv=2 * 26 * 1 * 256 * 2, context=32768, bits=16,
        params=262144 * 1152 + 26 * (1152 * 4 * 256 * 2 + 1152 * 1 * 256 * 2 + 3 * 1152 * 6912),
        weights=2 * (262144 * 1152 + 26 * (1152 * 4 * 256 * 2 + 1152 * 1 * 256 * 2 + 3 * 1152 * 6912)),
    ),
    "google--gemma-3-27b-it": Case(
        # text_config leaves vocab_size and max_position_embeddings to Gemma3TextConfig (262208, 131072)
        kv=2 * 62 * 16 * 128 * 2, params=GEMMA3_27B, bits=16, context=131072, weights=GEMMA3_27B * 2,
    ),
    "google--medgemma-27b-it": Case(
        kv=2 * 62 * 16 * 128 * 2, params=GEMMA3_27B, bits=16, context=131072,
    ),
    "internlm--internlm2-7b": Case(
        kv=2 * 32 * 8 * 128 * 2, context=32768, bits=16,
        params=92544 * 4096 * 2 + 32 * (4096 * 32 * 128 * 2 + 4096 * 8 * 128 * 2 + 3 * 4096 * 14336),
        weights=2 * (92544 * 4096 * 2 + 32 * (4096 * 32 * 128 * 2 + 4096 * 8 * 128 * 2 + 3 * 4096 * 14336)),
    ),
    "llava-hf--llava-1.5-7b-hf": Case(
        # text_config leaves the shape to LlamaConfig: 32 layers, 32 heads, 4096 wide, 11008 MLP
        kv=2 * 32 * 32 * 128 * 2, context=4096, bits=16, quant="fp16",
        params=32064 * 4096 * 2 + 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)
        + 24 * (4 * 1024 * 1024 + 2 * 1024 * 4096) + 1024 * 4096 + 4096 * 4096,
        weights=2 * (32064 * 4096 * 2 + 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)
                     + 24 * (4 * 1024 * 1024 + 2 * 1024 * 4096) + 1024 * 4096 + 4096 * 4096),
    ),
    "meta-llama--Llama-3.2-11B-Vision-Instruct": Case(
        # 40 layers, 8 of them cross-attention, all counted as caching every token (never under)
        kv=2 * 40 * 8 * 128 * 2, context=131072, bits=16,
        params=128256 * 4096 * 2 + 40 * (4096 * 32 * 128 * 2 + 4096 * 8 * 128 * 2 + 3 * 4096 * 14336)
        + 40 * (4 * 1280 * 1280 + 2 * 1280 * 5120) + 7680 * 4096,
        weights=2 * (128256 * 4096 * 2 + 40 * (4096 * 32 * 128 * 2 + 4096 * 8 * 128 * 2 + 3 * 4096 * 14336)
                     + 40 * (4 * 1280 * 1280 + 2 * 1280 * 5120) + 7680 * 4096),
    ),
    "microsoft--Phi-3-mini-128k-instruct": Case(
        # longrope: max_position_embeddings is already the extended length
        kv=2 * 32 * 32 * 96 * 2, context=131072, bits=16,
        params=32064 * 3072 * 2 + 32 * (4 * 3072 * 3072 + 3 * 3072 * 8192),
        weights=2 * (32064 * 3072 * 2 + 32 * (4 * 3072 * 3072 + 3 * 3072 * 8192)),
    ),
    "microsoft--Phi-4-mini-instruct": Case(
        kv=2 * 32 * 8 * 128 * 2, context=131072, bits=16,
        params=200064 * 3072 + 32 * (3072 * 24 * 128 * 2 + 3072 * 8 * 128 * 2 + 3 * 3072 * 8192),
        weights=2 * (200064 * 3072 + 32 * (3072 * 24 * 128 * 2 + 3072 * 8 * 128 * 2 + 3 * 3072 * 8192)),
    ),
    "mistralai--Mistral-7B-v0.1": Case(
        kv=2 * 32 * 8 * 128 * 2, context=32768, bits=16,
        params=32000 * 4096 * 2 + 32 * (4096 * 32 * 128 * 2 + 4096 * 8 * 128 * 2 + 3 * 4096 * 14336),
        weights=2 * (32000 * 4096 * 2 + 32 * (4096 * 32 * 128 * 2 + 4096 * 8 * 128 * 2 + 3 * 4096 * 14336)),
    ),
    "mistralai--Mixtral-8x7B-v0.1": Case(
        kv=2 * 32 * 8 * 128 * 2, context=32768, bits=16,
        params=32000 * 4096 * 2 + 32 * (4096 * 32 * 128 * 2 + 4096 * 8 * 128 * 2 + 8 * 3 * 4096 * 14336 + 4096 * 8),
        weights=2 * (32000 * 4096 * 2
                     + 32 * (4096 * 32 * 128 * 2 + 4096 * 8 * 128 * 2 + 8 * 3 * 4096 * 14336 + 4096 * 8)),
    ),
    "openai--gpt-oss-120b": Case(
        # MXFP4 experts (4 bits and an 8-bit scale per 32); attention, router, embeddings and head bf16.
        # YaRN: 4096 x 32
        kv=2 * 36 * 8 * 64 * 2, params=GPT_OSS_120B, context=4096 * 32, quant="mxfp4",
        weights=GPT_OSS_120B_EXPERTS * 17 // 32 + (GPT_OSS_120B - GPT_OSS_120B_EXPERTS) * 2,
        bits=(4.25 * GPT_OSS_120B_EXPERTS + 16 * (GPT_OSS_120B - GPT_OSS_120B_EXPERTS)) / GPT_OSS_120B,
    ),
    "openai--gpt-oss-20b": Case(
        kv=2 * 24 * 8 * 64 * 2, params=GPT_OSS_20B, context=4096 * 32, quant="mxfp4",
        weights=GPT_OSS_20B_EXPERTS * 17 // 32 + (GPT_OSS_20B - GPT_OSS_20B_EXPERTS) * 2,
        bits=(4.25 * GPT_OSS_20B_EXPERTS + 16 * (GPT_OSS_20B - GPT_OSS_20B_EXPERTS)) / GPT_OSS_20B,
    ),
    "openai-community--gpt2": Case(
        # n_layer, n_head, n_embd; an ungated MLP of 4 x n_embd; fp32 files with no dtype named
        kv=2 * 12 * 12 * 64 * 2, context=1024, bits=16, quant="fp32",
        params=50257 * 768 + 12 * (4 * 768 * 768 + 2 * 768 * 3072),
        weights=4 * (50257 * 768 + 12 * (4 * 768 * 768 + 2 * 768 * 3072)),
    ),
    "tiiuae--falcon-40b": Case(
        # n_head_kv 8 (vLLM's RWConfig: hidden 8192 is the new decoder architecture); ungated 4x MLP;
        # the index counts lm_head apart from the tied embeddings (41.8B), 1.3% over this count
        kv=2 * 60 * 8 * 64 * 2, context=2048, bits=16, artifacts=("original",),
        params=65024 * 8192 + 60 * (8192 * (128 + 2 * 8) * 64 + 8192 * 8192 + 2 * 8192 * 32768),
    ),
    "togethercomputer--RedPajama-INCITE-7B-Base": Case(
        kv=2 * 32 * 32 * 128 * 2, context=2048, bits=16, quant="fp16",
        params=50432 * 4096 * 2 + 32 * (4 * 4096 * 4096 + 2 * 4096 * 16384),
    ),
    "CohereForAI--aya-23-8B": Case(
        # CohereConfig ties the embeddings by default
        kv=2 * 32 * 8 * 128 * 2, context=8192, bits=16, quant="fp16",
        params=256000 * 4096 + 32 * (4096 * 32 * 128 * 2 + 4096 * 8 * 128 * 2 + 3 * 4096 * 14336),
        weights=2 * (256000 * 4096 + 32 * (4096 * 32 * 128 * 2 + 4096 * 8 * 128 * 2 + 3 * 4096 * 14336)),
    ),
    "CohereForAI--c4ai-command-r-v01": Case(
        # the least of max_position_embeddings (8192) and model_max_length (131072), as vLLM takes it
        kv=2 * 40 * 64 * 128 * 2, context=8192, bits=16, quant="fp16",
        params=256000 * 8192 + 40 * (4 * 8192 * 8192 + 3 * 8192 * 22528),
        weights=2 * (256000 * 8192 + 40 * (4 * 8192 * 8192 + 3 * 8192 * 22528)),
    ),
    "bartowski--Qwen2-VL-7B-Instruct-GGUF": Case(
        # the projector (mmproj) is no artifact; the shape is the original's; the file's bits are over the
        # language model alone, the vision tower being in the projector's file
        kv=2 * 28 * 4 * 128 * 2, params=QWEN25_7B + QWEN2_VL_VISION, bits=4683072672 * 8 / QWEN25_7B, context=32768,
        quant="Q4_K_M", artifacts=("Qwen2-VL-7B-Instruct-Q4_K_M.gguf",), config_from="Qwen--Qwen2-VL-7B-Instruct",
    ),
    "nvidia--Nemotron-H-56B-Base-8K": Case(
        # 10 of 118 layers attention (hybrid_override_pattern); published: 56B
        kv=10 * 2 * 8 * 128 * 2, params=NEMOTRON_H_56B, bits=16, context=8192, weights=2 * NEMOTRON_H_56B,
    ),
    "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": Case(
        # 6 of 52 layers attention; published: 31.6B total
        kv=6 * 2 * 2 * 128 * 2, params=NEMOTRON_3_NANO, bits=16, context=262144, weights=2 * NEMOTRON_3_NANO,
    ),
    "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8": Case(
        # moe_latent_size; ModelOpt FP8 (hf_quant_config.json); no listing: weights a placeholder of a byte
        # a parameter. Published: 120B total
        kv=8 * 2 * 2 * 128 * 2, params=NEMOTRON_3_SUPER, bits=8, context=262144, quant="fp8",
        weights=NEMOTRON_3_SUPER,
    ),
    "nvidia--Llama-3_3-Nemotron-Super-49B-v1": Case(
        # block_configs; num_key_value_heads null at the top; published: 49.9B
        kv=49 * 2 * 8 * 128 * 2, params=NEMOTRON_SUPER_49B, bits=16, context=131072,
        weights=2 * NEMOTRON_SUPER_49B,
    ),
    "meta-llama--Llama-4-Maverick-17B-128E-Instruct": Case(
        # interleave_moe_layer_step 2; published: 400B total (this config has no vision_config)
        kv=48 * 2 * 8 * 128 * 2, params=LLAMA4_MAVERICK, bits=16, context=1048576, weights=2 * LLAMA4_MAVERICK,
    ),
    "Qwen--Qwen3.5-27B": Case(
        # text_config: 16 of 64 layers full attention, the rest gated DeltaNet; named 27B
        kv=16 * 2 * 4 * 256 * 2, params=QWEN35_27B, bits=16, context=262144, weights=2 * QWEN35_27B,
    ),
    "Qwen--Qwen3.5-397B-A17B": Case(
        # 15 of 60 layers full attention; experts on every layer; named 397B
        kv=15 * 2 * 2 * 256 * 2, params=QWEN35_397B, bits=16, context=262144, weights=2 * QWEN35_397B,
    ),
    "deepseek-ai--Janus-1.3B": Case(
        # the language model under language_config; the vision tower's config ("cls", "params") is not
        # read, so its ~0.3B are not counted
        kv=2 * 24 * 16 * 128 * 2, params=JANUS_LANGUAGE, bits=16, context=16384, weights=2 * JANUS_LANGUAGE,
    ),
}
# fmt: on

REFUSED = {
    "AdelaCorbeanu--Llama-3.2-3B-Romanian-QA-LoRA": (
        "an adapter, not a model: serve its base model 'meta-llama/Llama-3.2-3B'"
    ),
}
"""Repositories that cannot be served as they are, and the line that says so."""
