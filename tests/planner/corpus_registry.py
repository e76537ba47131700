"""The corpus against vLLM's list of text-generation architectures: for every repository of the corpus, the
architecture its ``config.json`` names, the hand arithmetic for its parameters and KV cache per token, and
what the planner does with it today (``status``). ``test_corpus_registry.py`` holds the planner to each
status; ``coverage_table.py`` writes ``docs/COVERAGE.md`` from this table.

KV bytes per token are counted as vLLM caches them: attention layers only (a Mamba or linear-attention
layer keeps a state of fixed size per sequence, not per token), every layer whole (sliding windows are
noted, not subtracted), MLA as ``kv_lora_rank + qk_rope_head_dim`` per layer, two bytes an element. The
derivation of each count is in ``corpus/FACTS.md``, where a config came from in ``corpus/SOURCES.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tests.planner.corpus_cases import CASES, DEEPSEEK_V3

Status = Literal["read", "refused", "pending"]
"""``read``: the planner's parameters and KV bytes per token are within 2% of the hand count.
``refused``: the planner refuses the config with one line (``Entry.line`` holds its key words).
``pending``: the planner reads the config but is more than 2% off on one of the two; when it is taught
the model, the entry must become ``read`` (the test fails until it does)."""

REGISTRY = "vllm-project/vllm tests/models/registry.py @ 0008d3565e9e73f132383fc09ce4b98e396eaed4"
"""Where the list of architectures comes from: ``_TEXT_GENERATION_EXAMPLE_MODELS``."""

# fmt: off
ARCHITECTURES: dict[str, str] = {
    "AfmoeForCausalLM": "arcee-ai/Trinity-Nano-Preview",
    "ApertusForCausalLM": "swiss-ai/Apertus-8B-Instruct-2509",
    "AquilaModel": "BAAI/AquilaChat-7B",
    "AquilaForCausalLM": "BAAI/AquilaChat2-7B",
    "ArceeForCausalLM": "arcee-ai/AFM-4.5B-Base",
    "ArcticForCausalLM": "Snowflake/snowflake-arctic-instruct",
    "AXK1ForCausalLM": "skt/A.X-K1",
    "BaiChuanForCausalLM": "baichuan-inc/Baichuan-7B",
    "BaichuanForCausalLM": "baichuan-inc/Baichuan2-7B-chat",
    "BailingMoeForCausalLM": "inclusionAI/Ling-lite-1.5",
    "BailingMoeV2ForCausalLM": "inclusionAI/Ling-mini-2.0",
    "BailingMoeV2_5ForCausalLM": "inclusionAI/Ring-2.5-1T",
    "BambaForCausalLM": "ibm-ai-platform/Bamba-9B-v1",
    "BloomForCausalLM": "bigscience/bloom-560m",
    "ChatGLMModel": "zai-org/chatglm3-6b",
    "ChatGLMForConditionalGeneration": "thu-coai/ShieldLM-6B-chatglm3",
    "CohereForCausalLM": "CohereLabs/c4ai-command-r-v01",
    "Cohere2ForCausalLM": "CohereLabs/c4ai-command-r7b-12-2024",
    "CwmForCausalLM": "facebook/cwm",
    "DbrxForCausalLM": "databricks/dbrx-instruct",
    "DeciLMForCausalLM": "nvidia/Llama-3_3-Nemotron-Super-49B-v1",
    "DeepseekForCausalLM": "deepseek-ai/deepseek-moe-16b-base",
    "DeepseekV2ForCausalLM": "deepseek-ai/DeepSeek-V2-Lite-Chat",
    "DeepseekV3ForCausalLM": "deepseek-ai/DeepSeek-V3",
    "DeepseekV32ForCausalLM": "deepseek-ai/DeepSeek-V3.2-Exp",
    "Ernie4_5ForCausalLM": "baidu/ERNIE-4.5-0.3B-PT",
    "Ernie4_5_MoeForCausalLM": "baidu/ERNIE-4.5-21B-A3B-PT",
    "ExaoneForCausalLM": "LGAI-EXAONE/EXAONE-3.0-7.8B-Instruct",
    "Exaone4ForCausalLM": "LGAI-EXAONE/EXAONE-4.0-32B",
    "ExaoneMoEForCausalLM": "LGAI-EXAONE/K-EXAONE-236B-A23B",
    "Fairseq2LlamaForCausalLM": "mgleize/fairseq2-dummy-Llama-3.2-1B",
    "FalconForCausalLM": "tiiuae/falcon-7b",
    "FalconH1ForCausalLM": "tiiuae/Falcon-H1-0.5B-Base",
    "FlexOlmoForCausalLM": "allenai/Flex-reddit-2x7B-1T",
    "GemmaForCausalLM": "google/gemma-1.1-2b-it",
    "Gemma2ForCausalLM": "google/gemma-2-9b",
    "Gemma3ForCausalLM": "google/gemma-3-1b-it",
    "Gemma3nForCausalLM": "google/gemma-3n-E2B-it",
    "GlmForCausalLM": "zai-org/glm-4-9b-chat-hf",
    "Glm4ForCausalLM": "zai-org/GLM-4-9B-0414",
    "Glm4MoeForCausalLM": "zai-org/GLM-4.5",
    "Glm4MoeLiteForCausalLM": "zai-org/GLM-4.7-Flash",
    "GlmMoeDsaForCausalLM": "zai-org/GLM-5",
    "GPT2LMHeadModel": "openai-community/gpt2",
    "GPTBigCodeForCausalLM": "bigcode/starcoder",
    "GPTJForCausalLM": "Milos/slovak-gpt-j-405M",
    "GPTNeoXForCausalLM": "EleutherAI/pythia-70m",
    "GptOssForCausalLM": "lmsys/gpt-oss-20b-bf16",
    "GraniteForCausalLM": "ibm/PowerLM-3b",
    "GraniteMoeForCausalLM": "ibm/PowerMoE-3b",
    "GraniteMoeHybridForCausalLM": "ibm-granite/granite-4.0-tiny-preview",
    "GraniteMoeSharedForCausalLM": "ibm-research/moe-7b-1b-active-shared-experts",
    "Grok1ModelForCausalLM": "hpcai-tech/grok-1",
    "Grok1ForCausalLM": "xai-org/grok-2",
    "HunYuanDenseV1ForCausalLM": "tencent/Hunyuan-7B-Instruct",
    "HunYuanMoEV1ForCausalLM": "tencent/Hunyuan-A13B-Instruct",
    "HyperCLOVAXForCausalLM": "naver-hyperclovax/HyperCLOVAX-SEED-Think-14B",
    "InternLMForCausalLM": "internlm/internlm-chat-7b",
    "InternLM2ForCausalLM": "internlm/internlm2-chat-7b",
    "InternLM2VEForCausalLM": "OpenGVLab/Mono-InternVL-2B",
    "InternLM3ForCausalLM": "internlm/internlm3-8b-instruct",
    "IQuestCoderForCausalLM": "IQuestLab/IQuest-Coder-V1-40B-Instruct",
    "IQuestLoopCoderForCausalLM": "IQuestLab/IQuest-Coder-V1-40B-Loop-Instruct",
    "JAISLMHeadModel": "inceptionai/jais-13b-chat",
    "Jais2ForCausalLM": "inceptionai/Jais-2-8B-Chat",
    "JambaForCausalLM": "ai21labs/AI21-Jamba-1.5-Mini",
    "KimiLinearForCausalLM": "moonshotai/Kimi-Linear-48B-A3B-Instruct",
    "Lfm2ForCausalLM": "LiquidAI/LFM2-1.2B",
    "Lfm2MoeForCausalLM": "LiquidAI/LFM2-8B-A1B",
    "LlamaForCausalLM": "meta-llama/Llama-3.2-1B-Instruct",
    "LLaMAForCausalLM": "decapoda-research/llama-7b-hf",
    "Llama4ForCausalLM": "meta-llama/Llama-4-Scout-17B-16E-Instruct",
    "LongcatFlashForCausalLM": "meituan-longcat/LongCat-Flash-Chat",
    "MambaForCausalLM": "state-spaces/mamba-130m-hf",
    "Mamba2ForCausalLM": "mistralai/Mamba-Codestral-7B-v0.1",
    "FalconMambaForCausalLM": "tiiuae/falcon-mamba-7b-instruct",
    "MiniCPMForCausalLM": "openbmb/MiniCPM-2B-sft-bf16",
    "MiniCPM3ForCausalLM": "openbmb/MiniCPM3-4B",
    "MiniCPM4ForCausalLM": "openbmb/MiniCPM4.1-8B",
    "MiniMaxForCausalLM": "MiniMaxAI/MiniMax-Text-01-hf",
    "MiniMaxText01ForCausalLM": "MiniMaxAI/MiniMax-Text-01",
    "MiniMaxM1ForCausalLM": "MiniMaxAI/MiniMax-M1-40k",
    "MiniMaxM2ForCausalLM": "MiniMaxAI/MiniMax-M2",
    "MistralForCausalLM": "mistralai/Mistral-7B-Instruct-v0.1",
    "MistralLarge3ForCausalLM": "mistralai/Mistral-Large-3-675B-Instruct-2512-NVFP4",
    "MixtralForCausalLM": "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "MptForCausalLM": "mpt",
    "MPTForCausalLM": "mosaicml/mpt-7b",
    "NemotronForCausalLM": "nvidia/Minitron-8B-Base",
    "NemotronHForCausalLM": "nvidia/Nemotron-H-8B-Base-8K",
    "NemotronHPuzzleForCausalLM": "",
    "OlmoForCausalLM": "allenai/OLMo-1B-hf",
    "Olmo2ForCausalLM": "allenai/OLMo-2-0425-1B",
    "Olmo3ForCausalLM": "allenai/Olmo-3-7B-Instruct",
    "OlmoHybridForCausalLM": "allenai/Olmo-Hybrid-7B",
    "OlmoeForCausalLM": "allenai/OLMoE-1B-7B-0924-Instruct",
    "OPTForCausalLM": "facebook/opt-125m",
    "OrionForCausalLM": "OrionStarAI/Orion-14B-Chat",
    "OuroForCausalLM": "ByteDance/Ouro-1.4B",
    "PanguEmbeddedForCausalLM": "FreedomIntelligence/openPangu-Embedded-7B-V1.1",
    "PanguProMoEV2ForCausalLM": "",
    "PanguUltraMoEForCausalLM": "FreedomIntelligence/openPangu-Ultra-MoE-718B-V1.1",
    "PersimmonForCausalLM": "adept/persimmon-8b-chat",
    "PhiForCausalLM": "microsoft/phi-2",
    "Phi3ForCausalLM": "microsoft/Phi-3-mini-4k-instruct",
    "PhiMoEForCausalLM": "microsoft/Phi-3.5-MoE-instruct",
    "Plamo2ForCausalLM": "pfnet/plamo-2-1b",
    "Plamo3ForCausalLM": "pfnet/plamo-3-nict-2b-base",
    "QWenLMHeadModel": "Qwen/Qwen-7B-Chat",
    "Qwen2ForCausalLM": "Qwen/Qwen2-0.5B-Instruct",
    "Qwen2MoeForCausalLM": "Qwen/Qwen1.5-MoE-A2.7B-Chat",
    "Qwen3ForCausalLM": "Qwen/Qwen3-8B",
    "Qwen3MoeForCausalLM": "Qwen/Qwen3-30B-A3B",
    "Qwen3NextForCausalLM": "Qwen/Qwen3-Next-80B-A3B-Instruct",
    "RWForCausalLM": "tiiuae/falcon-40b",
    "SarvamMoEForCausalLM": "sarvamai/sarvam-30b",
    "SarvamMLAForCausalLM": "sarvamai/sarvam-105b",
    "SeedOssForCausalLM": "ByteDance-Seed/Seed-OSS-36B-Instruct",
    "SmolLM3ForCausalLM": "HuggingFaceTB/SmolLM3-3B",
    "StableLMEpochForCausalLM": "stabilityai/stablelm-zephyr-3b",
    "StableLmForCausalLM": "stabilityai/stablelm-3b-4e1t",
    "Starcoder2ForCausalLM": "bigcode/starcoder2-3b",
    "Step1ForCausalLM": "stepfun-ai/Step-Audio-EditX",
    "Step3p5ForCausalLM": "stepfun-ai/Step-3.5-Flash",
    "Step3TextForCausalLM": "stepfun-ai/step3",
    "SolarForCausalLM": "upstage/solar-pro-preview-instruct",
    "TeleChatForCausalLM": "chuhac/TeleChat2-35B",
    "TeleChat2ForCausalLM": "Tele-AI/TeleChat2-3B",
    "TeleFLMForCausalLM": "CofeAI/FLM-2-52B-Instruct-2407",
    "XverseForCausalLM": "xverse/XVERSE-7B-Chat",
    "Zamba2ForCausalLM": "Zyphra/Zamba2-7B-instruct",
    "MiMoForCausalLM": "XiaomiMiMo/MiMo-7B-RL",
    "MiMoV2FlashForCausalLM": "XiaomiMiMo/MiMo-V2-Flash",
    "Dots1ForCausalLM": "rednote-hilab/dots.llm1.inst",
}
"""Every text-generation architecture vLLM serves, and the example repository its tests name for it
("" where the registry names none)."""
# fmt: on

HYBRID = frozenset(
    {
        "BambaForCausalLM",
        "FalconH1ForCausalLM",
        "GraniteMoeHybridForCausalLM",
        "JambaForCausalLM",
        "KimiLinearForCausalLM",
        "Lfm2ForCausalLM",
        "Lfm2MoeForCausalLM",
        "MiniMaxForCausalLM",
        "MiniMaxText01ForCausalLM",
        "MiniMaxM1ForCausalLM",
        "NemotronHForCausalLM",
        "NemotronHPuzzleForCausalLM",
        "OlmoHybridForCausalLM",
        "Plamo2ForCausalLM",
        "Qwen3NextForCausalLM",
        "Zamba2ForCausalLM",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
    }
)
"""Architectures that mix attention layers with Mamba or linear-attention layers: only the attention
layers grow a KV cache."""

NAS = frozenset({"DeciLMForCausalLM"})
"""Architectures whose layers differ one by one (``block_configs``): searched, not repeated."""


@dataclass(frozen=True)
class Entry:
    architecture: str
    """The first of the config's ``architectures`` ("" for a repository without a config)."""
    params: int
    kv: int
    """KV bytes per token, whole model, as vLLM caches it."""
    status: Status = "read"
    line: str = ""
    """``refused``: key words of the planner's line. ``pending``: what the planner gets wrong."""
    note: str = ""
    listed_as: str = ""
    """The text-generation architecture vLLM's list names this repository under where its config names
    another (Llama 4's multimodal wrapper, whose language model vLLM also serves alone)."""


# fmt: off
QWEN3_8B = 151936 * 4096 * 2 + 36 * (4096 * 32 * 128 * 2 + 4096 * 8 * 128 * 2 + 3 * 4096 * 12288)
KIMI_K2 = (
    163840 * 7168 * 2
    + 61 * (7168 * 1536 + 1536 * 64 * 192 + 7168 * 576 + 512 * 64 * 256 + 64 * 128 * 7168)  # MLA
    + 1 * 3 * 7168 * 18432  # one dense layer
    + 60 * (384 * 3 * 7168 * 2048 + 7168 * 384 + 3 * 7168 * 2048)  # 384 experts, router, a shared expert
)
DSA_INDEXER = 1536 * 64 * 128 + 7168 * 128 + 7168 * 64
"""DeepSeek-V3.2's lightning indexer a layer: queries from the q latent (64 heads of 128), one key of 128,
a weight per head."""
NEMOTRON_SUPER_49B = (
    128256 * 8192 * 2
    + 49 * (8192 * 64 * 128 * 2 + 8192 * 8 * 128 * 2)  # 49 attention blocks of 8 KV heads; 31 are no_op
    + 3 * 8192 * (48 * 28672 + 1 * 14336 + 10 * 7168 + 8 * 5632 + 6 * 2816 + 5 * 14336 + 1 * 17920 + 1 * 28672)
)
MAMBA2_56B = 8192 * (2 * 16384 + 2 * 8 * 256 + 256) + (16384 + 2 * 8 * 256) * 4 + 16384 * 8192
"""A Mamba-2 layer of Nemotron-H-56B: in_proj to z, x, B, C and dt; the conv1d; out_proj (A, D, dt_bias and
the norm are under 0.01%)."""
MAMBA2_NANO = 2688 * (2 * 4096 + 2 * 8 * 128 + 64) + (4096 + 2 * 8 * 128) * 4 + 4096 * 2688
QWEN35_VISION = 27 * (4 * 1152 * 1152 + 2 * 1152 * 4304) + (1152 * 4) ** 2
"""Qwen3.5's vision tower (27 blocks of 1152) and its merger's first layer; the merger's last is 1152 x 4 by
the language model's width."""
GATED_DELTANET_27B = 5120 * (2 * 2048 + 2 * 6144) + 5120 * 2 * 48 + (2 * 2048 + 6144) * 4 + 6144 * 5120
"""A Gated DeltaNet layer of Qwen3.5-27B: in_proj to q, k (16 heads of 128), v and z (48 of 128); b and a
(one per value head); the conv1d over q, k, v; out_proj."""
GATED_DELTANET_35B = 2048 * (2 * 2048 + 2 * 4096) + 2048 * 2 * 32 + (2 * 2048 + 4096) * 4 + 4096 * 2048
MIMO_V2_FLASH = (
    152576 * 4096 * 2
    + 9 * (4096 * 64 * 192 + 4096 * 4 * 192 + 4096 * 4 * 128 + 64 * 128 * 4096)  # full: 4 KV heads
    + 39 * (4096 * 64 * 192 + 4096 * 8 * 192 + 4096 * 8 * 128 + 64 * 128 * 4096)  # sliding: 8 KV heads
    + 3 * 4096 * 16384  # layer 0 dense
    + 47 * (256 * 3 * 4096 * 2048 + 4096 * 256)
)
GLM5 = (
    154880 * 6144 * 2
    + 78 * (6144 * 2048 + 2048 * 64 * 256 + 6144 * 576 + 512 * 64 * (192 + 256) + 64 * 256 * 6144)  # MLA
    + 78 * (2048 * 32 * 128 + 6144 * 128 + 6144 * 32)  # the indexer: 32 heads of 128
    + 3 * 3 * 6144 * 12288
    + 75 * (256 * 3 * 6144 * 2048 + 6144 * 256 + 3 * 6144 * 2048)
)
LLAMA4_SCOUT_TEXT = 202048 * 5120 * 2 + 48 * (
    5120 * 40 * 128 * 2 + 5120 * 8 * 128 * 2 + 16 * 3 * 5120 * 8192 + 3 * 5120 * 8192 + 5120 * 16
)
MAMBA1_4096 = 4096 * 2 * 8192 + 8192 * 4 + 8192 * (256 + 2 * 16) + 256 * 8192 + 8192 * 16 + 8192 * 4096
"""A Mamba (v1) layer of 4096 wide, inner 8192, state 16, dt_rank 256: in_proj to x and z, the conv1d,
x_proj to dt, B and C, dt_proj, A, out_proj (Jamba and Falcon-Mamba-7B alike)."""
NEMOTRON_ULTRA_253B = (
    128256 * 16384 * 2
    + 64 * (16384 * 128 * 128 * 2 + 16384 * 8 * 128 * 2)  # 64 attention blocks of 8 KV heads; 98 are no_op
    + 3 * 16384 * (
        34 * 53248 + 19 * 26624 + 10 * 21504 + 6 * 16128 + 4 * 37376 + 2 * 32000 + 5376 + 10752
        + 301056 + 343040 + 399360 + 425984  # four wide MLPs standing in for attention
    )
)
MAMBA2_SUPER = 4096 * (2 * 8192 + 2 * 8 * 128 + 128) + (8192 + 2 * 8 * 128) * 4 + 8192 * 4096
LATENT_MOE_SUPER = 4096 * 512 + 2 * 4096 * 1024 + 512 * 2 * 1024 * 2688 + 2 * 4096 * 5376
"""A LatentMoE layer of Nemotron 3 Super: a router, projections to and from the latent of 1024, 512
squared-ReLU experts of 2688 over the latent, a shared expert of 5376 over the hidden."""
MAMBA2_ULTRA = 8192 * (2 * 16384 + 2 * 8 * 128 + 256) + (16384 + 2 * 8 * 128) * 4 + 16384 * 8192
LATENT_MOE_ULTRA = 8192 * 512 + 2 * 8192 * 2048 + 512 * 2 * 2048 * 5120 + 2 * 8192 * 10240
GATED_DELTANET_397B = 4096 * (2 * 2048 + 2 * 8192) + 4096 * 2 * 64 + (2 * 2048 + 8192) * 4 + 8192 * 4096
# fmt: on

# fmt: off
CASE_ARCHITECTURES: dict[str, str] = {
    "CohereForAI--aya-23-8B": "CohereForCausalLM",
    "CohereForAI--c4ai-command-r-v01": "CohereForCausalLM",
    "Qwen--Qwen2-VL-7B-Instruct": "Qwen2VLForConditionalGeneration",
    "Qwen--Qwen2.5-72B": "Qwen2ForCausalLM",
    "Qwen--Qwen2.5-7B": "Qwen2ForCausalLM",
    "Qwen--Qwen2.5-VL-7B-Instruct": "Qwen2_5_VLForConditionalGeneration",
    "Qwen--Qwen3-235B-A22B": "Qwen3MoeForCausalLM",
    "Qwen--Qwen3-30B-A3B": "Qwen3MoeForCausalLM",
    "Qwen--Qwen3-30B-A3B-FP8": "Qwen3MoeForCausalLM",
    "Qwen--Qwen3-32B": "Qwen3ForCausalLM",
    "Qwen--Qwen3-8B-FP8": "Qwen3ForCausalLM",
    "THUDM--chatglm3-6b": "ChatGLMModel",
    "THUDM--glm-4-9b": "ChatGLMModel",
    "TheBloke--Genz-70b-GPTQ": "LlamaForCausalLM",
    "bartowski--Qwen2-VL-7B-Instruct-GGUF": "Qwen2VLForConditionalGeneration",
    "deepseek-ai--DeepSeek-V2-Lite": "DeepseekV2ForCausalLM",
    "deepseek-ai--DeepSeek-V3": "DeepseekV3ForCausalLM",
    "google--gemma-2-9b": "Gemma2ForCausalLM",
    "google--gemma-3-1b-it": "Gemma3ForCausalLM",
    "google--gemma-3-27b-it": "Gemma3ForConditionalGeneration",
    "google--medgemma-27b-it": "Gemma3ForConditionalGeneration",
    "internlm--internlm2-7b": "InternLM2ForCausalLM",
    "llava-hf--llava-1.5-7b-hf": "LlavaForConditionalGeneration",
    "meta-llama--Llama-3.2-11B-Vision-Instruct": "MllamaForConditionalGeneration",
    "meta-llama--Llama-3.2-1B-Instruct": "LlamaForCausalLM",
    "meta-llama--Llama-3.2-3B": "LlamaForCausalLM",
    "meta-llama--Meta-Llama-3.1-70B": "LlamaForCausalLM",
    "meta-llama--Meta-Llama-3.1-8B": "LlamaForCausalLM",
    "microsoft--Phi-3-mini-128k-instruct": "Phi3ForCausalLM",
    "microsoft--Phi-4-mini-instruct": "Phi3ForCausalLM",
    "mistralai--Mistral-7B-v0.1": "MistralForCausalLM",
    "mistralai--Mixtral-8x7B-v0.1": "MixtralForCausalLM",
    "moonshotai--Kimi-K2.5": "KimiK25ForConditionalGeneration",
    "nvidia--Llama-3.1-70B-Instruct-FP8": "LlamaForCausalLM",
    "nvidia--Qwen3-235B-A22B-NVFP4": "Qwen3MoeForCausalLM",
    "openai--gpt-oss-120b": "GptOssForCausalLM",
    "openai--gpt-oss-20b": "GptOssForCausalLM",
    "openai-community--gpt2": "GPT2LMHeadModel",
    "tiiuae--falcon-40b": "RWForCausalLM",
    "togethercomputer--RedPajama-INCITE-7B-Base": "GPTNeoXForCausalLM",
}
"""The repositories ``corpus_cases.py`` checks in full (artifacts, bits, context too), and their
architectures: their counts are those cases'."""

ENTRIES: dict[str, Entry] = {
    "deepseek-ai--Janus-1.3B": Entry(
        # multi_modality, with no architectures key: its language_config is a Llama, counted alone
        "", CASES["deepseek-ai--Janus-1.3B"].params, CASES["deepseek-ai--Janus-1.3B"].kv,
    ),
    "meta-llama--Llama-4-Maverick-17B-128E-Instruct": Entry(
        "Llama4ForConditionalGeneration", CASES["meta-llama--Llama-4-Maverick-17B-128E-Instruct"].params,
        CASES["meta-llama--Llama-4-Maverick-17B-128E-Instruct"].kv, listed_as="Llama4ForCausalLM",
    ),
    **{name: Entry(arch, CASES[name].params, CASES[name].kv) for name, arch in CASE_ARCHITECTURES.items()},
    # vLLM's registry's examples and their kin, added against vLLM's list
    "LGAI-EXAONE--EXAONE-3.5-7.8B-Instruct": Entry(
        "ExaoneForCausalLM", kv=2 * 32 * 8 * 128 * 2,
        params=102400 * 4096 * 2 + 32 * (4096 * 32 * 128 * 2 + 4096 * 8 * 128 * 2 + 3 * 4096 * 14336),
    ),
    "MiniMaxAI--MiniMax-M2.5": Entry(
        "MiniMaxM2ForCausalLM", kv=2 * 62 * 8 * 128 * 2,
        params=200064 * 3072 * 2 + 62 * (3072 * 48 * 128 * 2 + 3072 * 8 * 128 * 2 + 256 * 3 * 3072 * 1536 + 3072 * 256),
    ),
    "Qwen--Qwen-7B": Entry(
        # QWen's MLP is two halves of intermediate_size: w1 and w2 of 11008, c_proj back
        "QWenLMHeadModel",
        kv=2 * 32 * 32 * 128 * 2,
        params=151936 * 4096 * 2 + 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008),
    ),
    "Qwen--Qwen2.5-0.5B": Entry(
        "Qwen2ForCausalLM", kv=2 * 24 * 2 * 64 * 2,
        params=151936 * 896 + 24 * (896 * 14 * 64 * 2 + 896 * 2 * 64 * 2 + 3 * 896 * 4864),
    ),
    "Qwen--Qwen3-0.6B": Entry(
        "Qwen3ForCausalLM", kv=2 * 28 * 8 * 128 * 2,
        params=151936 * 1024 + 28 * (1024 * 16 * 128 * 2 + 1024 * 8 * 128 * 2 + 3 * 1024 * 3072),
    ),
    "Qwen--Qwen3-4B": Entry(
        "Qwen3ForCausalLM", kv=2 * 36 * 8 * 128 * 2,
        params=151936 * 2560 + 36 * (2560 * 32 * 128 * 2 + 2560 * 8 * 128 * 2 + 3 * 2560 * 9728),
    ),
    "Qwen--Qwen3-8B": Entry("Qwen3ForCausalLM", kv=2 * 36 * 8 * 128 * 2, params=QWEN3_8B),
    "Qwen--Qwen3-Coder-480B-A35B-Instruct": Entry(
        "Qwen3MoeForCausalLM", kv=2 * 62 * 8 * 128 * 2,
        params=151936 * 6144 * 2 + 62 * (6144 * 96 * 128 * 2 + 6144 * 8 * 128 * 2 + 160 * 3 * 6144 * 2560 + 6144 * 160),
    ),
    "Qwen--Qwen3.5-27B": Entry(
        # 16 of 64 layers attend (every 4th), their q_proj twice wide for the output gate
        "Qwen3_5ForConditionalGeneration",
        kv=16 * 2 * 4 * 256 * 2,
        params=248320 * 5120 * 2 + 64 * 3 * 5120 * 17408
        + 16 * (5120 * 24 * 256 * 2 + 5120 * 4 * 256 * 2 + 24 * 256 * 5120) + 48 * GATED_DELTANET_27B
        + QWEN35_VISION + 1152 * 4 * 5120,
    ),
    "Qwen--Qwen3.5-35B-A3B": Entry(
        "Qwen3_5MoeForConditionalGeneration",
        kv=10 * 2 * 2 * 256 * 2,
        params=248320 * 2048 * 2 + 40 * (256 * 3 * 2048 * 512 + 3 * 2048 * 512 + 2048 * 257)
        + 10 * (2048 * 16 * 256 * 2 + 2048 * 2 * 256 * 2 + 16 * 256 * 2048) + 30 * GATED_DELTANET_35B
        + QWEN35_VISION + 1152 * 4 * 2048,
    ),
    "XiaomiMiMo--MiMo-7B-Base": Entry(
        # the multi-token-prediction layer is not loaded for serving
        "MiMoForCausalLM", kv=2 * 36 * 8 * 128 * 2,
        params=151680 * 4096 * 2 + 36 * (4096 * 32 * 128 * 2 + 4096 * 8 * 128 * 2 + 3 * 4096 * 11008),
    ),
    "XiaomiMiMo--MiMo-V2-Flash": Entry(
        # 39 of 48 layers slide over 128 tokens; keys of 192, values of 128
        "MiMoV2FlashForCausalLM",
        kv=9 * 4 * (192 + 128) * 2 + 39 * 8 * (192 + 128) * 2, params=MIMO_V2_FLASH,
    ),
    "baichuan-inc--Baichuan2-7B-Chat": Entry(
        "BaichuanForCausalLM", kv=2 * 32 * 32 * 128 * 2,
        params=125696 * 4096 * 2 + 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008),
    ),
    "deepseek-ai--DeepSeek-V3.2": Entry(
        # the MLA latent and the indexer's key (128 fp8 bytes and a 4-byte scale) a layer
        "DeepseekV32ForCausalLM",
        kv=61 * ((512 + 64) * 2 + 128 + 4), params=DEEPSEEK_V3 + 61 * DSA_INDEXER,
    ),
    "google--gemma-2-2b-it": Entry(
        # 13 of 26 layers slide over 4096 tokens
        "Gemma2ForCausalLM", kv=2 * 26 * 4 * 256 * 2,
        params=256000 * 2304 + 26 * (2304 * 8 * 256 * 2 + 2304 * 4 * 256 * 2 + 3 * 2304 * 9216),
    ),
    "google--gemma-7b": Entry(
        "GemmaForCausalLM", kv=2 * 28 * 16 * 256 * 2,
        params=256000 * 3072 + 28 * (3072 * 16 * 256 * 2 + 3072 * 16 * 256 * 2 + 3 * 3072 * 24576),
    ),
    "meta-llama--Llama-4-Scout-17B-16E-Instruct": Entry(
        # 36 of 48 layers attend within chunks of 8192; this config has no vision_config, counted without
        "Llama4ForConditionalGeneration",
        kv=2 * 48 * 8 * 128 * 2, params=LLAMA4_SCOUT_TEXT, listed_as="Llama4ForCausalLM",
    ),
    "meta-llama--Meta-Llama-3.1-405B": Entry(
        "LlamaForCausalLM", kv=2 * 126 * 8 * 128 * 2,
        params=128256 * 16384 * 2 + 126 * (16384 * 128 * 128 * 2 + 16384 * 8 * 128 * 2 + 3 * 16384 * 53248),
    ),
    "microsoft--Phi-3.5-MoE-instruct": Entry(
        "PhiMoEForCausalLM", kv=2 * 32 * 8 * 128 * 2,
        params=32064 * 4096 * 2 + 32 * (4096 * 32 * 128 * 2 + 4096 * 8 * 128 * 2 + 16 * 3 * 4096 * 6400 + 4096 * 16),
    ),
    "mistralai--Mixtral-8x22B-v0.1": Entry(
        "MixtralForCausalLM", kv=2 * 56 * 8 * 128 * 2,
        params=32000 * 6144 * 2 + 56 * (6144 * 48 * 128 * 2 + 6144 * 8 * 128 * 2 + 8 * 3 * 6144 * 16384 + 6144 * 8),
    ),
    "moonshotai--Kimi-K2-Instruct": Entry("DeepseekV3ForCausalLM", kv=61 * (512 + 64) * 2, params=KIMI_K2),
    "nvidia--Llama-3_3-Nemotron-Super-49B-v1": Entry(
        # 49 of 80 blocks attend (n_heads_in_group 8: 8 KV heads); each block its own MLP width
        "DeciLMForCausalLM",
        kv=2 * 49 * 8 * 128 * 2, params=NEMOTRON_SUPER_49B,
    ),
    "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": Entry(
        # 23 Mamba-2, 23 MoE (128 experts and a shared one, squared-ReLU: up and down only), 6 attention
        "NemotronHForCausalLM",
        kv=6 * 2 * 2 * 128 * 2,
        params=131072 * 2688 * 2 + 23 * MAMBA2_NANO
        + 23 * (128 * 2 * 2688 * 1856 + 2 * 2688 * 3712 + 2688 * 128)
        + 6 * (2688 * 32 * 128 * 2 + 2688 * 2 * 128 * 2),
    ),
    "nvidia--Nemotron-H-56B-Base-8K": Entry(
        # 54 Mamba-2, 54 squared-ReLU MLP (up and down), 10 attention layers
        "NemotronHForCausalLM",
        kv=10 * 2 * 8 * 128 * 2,
        params=131072 * 8192 * 2 + 54 * MAMBA2_56B + 54 * 2 * 8192 * 32768
        + 10 * (8192 * 64 * 128 * 2 + 8192 * 8 * 128 * 2),
    ),
    "openbmb--MiniCPM3-4B": Entry(
        # MLA with q_lora_rank 768, kv_lora_rank 256; values of qk_nope_head_dim (64); embeddings tied
        "MiniCPM3ForCausalLM",
        kv=62 * (256 + 32) * 2,
        params=73448 * 2560 + 62 * (
            2560 * 768 + 768 * 40 * 96 + 2560 * 288 + 256 * 40 * 128 + 40 * 64 * 2560 + 3 * 2560 * 6400
        ),
    ),
    "stabilityai--stablelm-3b-4e1t": Entry(
        "StableLmForCausalLM", kv=2 * 32 * 32 * 80 * 2,
        params=50304 * 2560 * 2 + 32 * (4 * 2560 * 2560 + 3 * 2560 * 6912),
    ),
    "xverse--XVERSE-7B-Chat": Entry(
        "XverseForCausalLM", kv=2 * 32 * 32 * 128 * 2,
        params=100534 * 4096 * 2 + 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008),
    ),
    "zai-org--GLM-5": Entry(
        # MLA latent and the indexer's key (as DeepSeek-V3.2) a layer; the MTP layer is not loaded
        "GlmMoeDsaForCausalLM",
        kv=78 * ((512 + 64) * 2 + 128 + 4), params=GLM5,
    ),
    "microsoft--phi-2": Entry(
        # MHA of 32 heads of 80; an ungated MLP (fc1, fc2) of 10240
        "PhiForCausalLM", kv=2 * 32 * 32 * 80 * 2,
        params=51200 * 2560 * 2 + 32 * (4 * 2560 * 2560 + 2 * 2560 * 10240),
    ),
    "microsoft--phi-4": Entry(
        "Phi3ForCausalLM", kv=2 * 40 * 10 * 128 * 2,
        params=100352 * 5120 * 2 + 40 * (5120 * 40 * 128 * 2 + 5120 * 10 * 128 * 2 + 3 * 5120 * 17920),
    ),
    "ai21labs--AI21-Jamba-1.5-Mini": Entry(
        # 4 of 32 layers attend (every 8th from 4); 16 of 32 MLPs are 16 experts (every 2nd from 1)
        "JambaForCausalLM", kv=4 * 2 * 8 * 128 * 2,
        params=65536 * 4096 * 2 + 28 * MAMBA1_4096 + 4 * (4096 * 32 * 128 * 2 + 4096 * 8 * 128 * 2)
        + 16 * (16 * 3 * 4096 * 14336 + 4096 * 16) + 16 * 3 * 4096 * 14336,
    ),
    "tiiuae--falcon-mamba-7b": Entry(
        # no attention layer: nothing grows with the context
        "FalconMambaForCausalLM", kv=0, params=65024 * 4096 * 2 + 64 * MAMBA1_4096,
        status="refused", line="num_attention_heads: missing",
    ),
    "bigcode--gpt_bigcode-santacoder": Entry(
        # multi_query: one KV head of 128; wte tied to the head; learned positions of 2048
        "GPTBigCodeForCausalLM",
        kv=2 * 24 * 1 * 128 * 2,
        params=49280 * 2048 + 2048 * 2048 + 24 * (2048 * (2048 + 2 * 128) + 2048 * 2048 + 2 * 2048 * 8192),
    ),
    "Qwen--Qwen1.5-MoE-A2.7B": Entry(
        # 60 experts of 1408, a shared expert of 5632 with its gate, a router
        "Qwen2MoeForCausalLM", kv=2 * 24 * 16 * 128 * 2,
        params=151936 * 2048 * 2
        + 24 * (4 * 2048 * 2048 + 60 * 3 * 2048 * 1408 + 3 * 2048 * 5632 + 2048 * 61),
    ),
    "internlm--internlm-chat-7b": Entry(
        "InternLMForCausalLM", kv=2 * 32 * 32 * 128 * 2,
        params=103168 * 4096 * 2 + 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008),
    ),
    "OrionStarAI--Orion-14B-Chat": Entry(
        "OrionForCausalLM", kv=2 * 40 * 40 * 128 * 2,
        params=84608 * 5120 * 2 + 40 * (4 * 5120 * 5120 + 3 * 5120 * 15360),
    ),
    "bigcode--starcoder2-7b": Entry(
        # an ungated MLP (c_fc, c_proj); embeddings tied (Starcoder2Config's default); a window of 4096
        "Starcoder2ForCausalLM",
        kv=2 * 32 * 4 * 128 * 2,
        params=49152 * 4608 + 32 * (4608 * 36 * 128 * 2 + 4608 * 4 * 128 * 2 + 2 * 4608 * 18432),
    ),
    "openbmb--MiniCPM-2B-sft-bf16": Entry(
        "MiniCPMForCausalLM", kv=2 * 40 * 36 * 64 * 2,
        params=122753 * 2304 + 40 * (4 * 2304 * 2304 + 3 * 2304 * 5760),
    ),
    "deepseek-ai--deepseek-moe-16b-base": Entry(
        # layer 0 dense; 27 layers of 64 experts of 1408, 2 shared, a router
        "DeepseekForCausalLM", kv=2 * 28 * 16 * 128 * 2,
        params=102400 * 2048 * 2 + 28 * 4 * 2048 * 2048 + 3 * 2048 * 10944
        + 27 * (64 * 3 * 2048 * 1408 + 2 * 3 * 2048 * 1408 + 2048 * 64),
    ),
    "EleutherAI--gpt-j-6b": Entry(
        # n_inner absent: 4 x n_embd, ungated
        "GPTJForCausalLM", kv=2 * 28 * 16 * 256 * 2,
        params=50400 * 4096 * 2 + 28 * (4 * 4096 * 4096 + 2 * 4096 * 16384),
    ),
    "allenai--OLMo-2-1124-7B": Entry(
        "Olmo2ForCausalLM", kv=2 * 32 * 32 * 128 * 2,
        params=100352 * 4096 * 2 + 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008),
    ),
    "google--gemma-2b": Entry(
        "GemmaForCausalLM", kv=2 * 18 * 1 * 256 * 2,
        params=256000 * 2048 + 18 * (2048 * 8 * 256 * 2 + 2048 * 1 * 256 * 2 + 3 * 2048 * 16384),
    ),
    "Qwen--Qwen2-0.5B": Entry(
        "Qwen2ForCausalLM", kv=2 * 24 * 2 * 64 * 2,
        params=151936 * 896 + 24 * (896 * 14 * 64 * 2 + 896 * 2 * 64 * 2 + 3 * 896 * 4864),
    ),
    "stabilityai--stablelm-2-zephyr-1_6b": Entry(
        "StableLmForCausalLM", kv=2 * 24 * 32 * 64 * 2,
        params=100352 * 2048 * 2 + 24 * (4 * 2048 * 2048 + 3 * 2048 * 5632),
    ),
    "mistralai--Mistral-7B-v0.3": Entry(
        "MistralForCausalLM", kv=2 * 32 * 8 * 128 * 2,
        params=32768 * 4096 * 2 + 32 * (4096 * 32 * 128 * 2 + 4096 * 8 * 128 * 2 + 3 * 4096 * 14336),
    ),
    "nvidia--Llama-3_1-Nemotron-Ultra-253B-v1": Entry(
        # 64 of 162 blocks attend (n_heads_in_group 16: 8 KV heads); 81 MLPs are no_op
        "DeciLMForCausalLM", kv=2 * 64 * 8 * 128 * 2, params=NEMOTRON_ULTRA_253B,
    ),
    "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8": Entry(
        # 40 Mamba-2, 40 LatentMoE, 8 attention layers (hybrid_override_pattern); the MTP layers not loaded
        "NemotronHForCausalLM", kv=8 * 2 * 2 * 128 * 2,
        params=131072 * 4096 * 2 + 40 * MAMBA2_SUPER + 40 * LATENT_MOE_SUPER
        + 8 * (4096 * 32 * 128 * 2 + 4096 * 2 * 128 * 2),
    ),
    "nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16": Entry(
        # layers_block_type: 48 mamba, 48 moe, 12 attention; no num_hidden_layers in the file
        "NemotronHForCausalLM", kv=12 * 2 * 2 * 128 * 2,
        params=131072 * 8192 * 2 + 48 * MAMBA2_ULTRA + 48 * LATENT_MOE_ULTRA
        + 12 * (8192 * 64 * 128 * 2 + 8192 * 2 * 128 * 2),
    ),
    "Qwen--Qwen3.5-397B-A17B": Entry(
        # 15 of 60 layers attend; 512 experts of 1024, a shared expert of 1024 and its gate
        "Qwen3_5MoeForConditionalGeneration", kv=15 * 2 * 2 * 256 * 2,
        params=248320 * 4096 * 2 + 60 * (512 * 3 * 4096 * 1024 + 3 * 4096 * 1024 + 4096 * 513)
        + 15 * (4096 * 32 * 256 * 2 + 4096 * 2 * 256 * 2 + 32 * 256 * 4096) + 45 * GATED_DELTANET_397B
        + QWEN35_VISION + 1152 * 4 * 4096,
    ),
    "zai-org--GLM-4.5": Entry(
        # 96 heads of 128, 8 KV heads; 3 dense layers, 89 of 160 experts of 1536, a shared one, a router
        "Glm4MoeForCausalLM", kv=2 * 92 * 8 * 128 * 2,
        params=151552 * 5120 * 2 + 92 * (5120 * 96 * 128 * 2 + 5120 * 8 * 128 * 2) + 3 * 3 * 5120 * 12288
        + 89 * (160 * 3 * 5120 * 1536 + 3 * 5120 * 1536 + 5120 * 160),
    ),
    "allenai--OLMoE-1B-7B-0125-Instruct": Entry(
        # 64 experts of 1024 on every layer (8 routed a token), a router; q_norm and k_norm; untied
        "OlmoeForCausalLM", kv=2 * 16 * 16 * 128 * 2,
        params=50304 * 2048 * 2 + 16 * (4 * 2048 * 2048 + 64 * 3 * 2048 * 1024 + 2048 * 64),
    ),
    "nvidia--Minitron-4B-Base": Entry(
        # an ungated MLP (up, down) of squared ReLU; partial rotary 0.5; untied
        "NemotronForCausalLM", kv=2 * 32 * 8 * 128 * 2,
        params=256000 * 3072 * 2 + 32 * (3072 * 24 * 128 * 2 + 3072 * 8 * 128 * 2 + 2 * 3072 * 9216),
    ),
    "Qwen--Qwen3-Next-80B-A3B-Thinking": Entry(
        # 12 of 48 layers attend (every 4th); 512 experts of 512, a shared expert of 512 and its gate
        "Qwen3NextForCausalLM", kv=12 * 2 * 2 * 256 * 2,
        params=151936 * 2048 * 2 + 48 * (512 * 3 * 2048 * 512 + 3 * 2048 * 512 + 2048 * 513)
        + 12 * (2048 * 16 * 256 * 2 + 2048 * 2 * 256 * 2 + 16 * 256 * 2048) + 36 * GATED_DELTANET_35B,
    ),
    "zai-org--GLM-4.7-Flash": Entry(
        # MLA of 20 heads (q latent 768, kv latent 512, rope 64); 1 dense layer, 46 of 64 experts and a shared one
        "Glm4MoeLiteForCausalLM", kv=47 * (512 + 64) * 2,
        params=154880 * 2048 * 2
        + 47 * (2048 * 768 + 768 * 20 * 256 + 2048 * 576 + 512 * 20 * (192 + 256) + 20 * 256 * 2048)
        + 3 * 2048 * 10240 + 46 * (64 * 3 * 2048 * 1536 + 3 * 2048 * 1536 + 2048 * 64),
    ),
    "deepseek-ai--DeepSeek-OCR": Entry(
        # DeepSeek-V2's layers with use_mla false: multi-head attention of 10 heads of 128 (the null
        # kv_lora_rank and zero MLA head widths unused); 1 dense layer, 11 of 64 experts of 896 and 2 shared;
        # the SAM and CLIP towers (0.4B by the weights' listing) are not counted
        "DeepseekOCRForCausalLM", kv=12 * 2 * 10 * 128 * 2,
        params=129280 * 1280 * 2 + 12 * 4 * 1280 * 1280 + 3 * 1280 * 6848
        + 11 * (64 * 3 * 1280 * 896 + 1280 * 64 + 2 * 3 * 1280 * 896),
    ),
    "tiiuae--Falcon-H1-0.5B-Base": Entry(
        # attention (8 heads, 2 KV heads of 64) and a Mamba-2 mixer (24 heads of 64, state 128, 1 group)
        # side by side on each of 36 layers, then a gated MLP of 2048; untied
        "FalconH1ForCausalLM", kv=36 * 2 * 2 * 64 * 2,
        params=32784 * 1024 * 2 + 36 * (
            2 * 1024 * 8 * 64 + 2 * 1024 * 2 * 64
            + 1024 * (2 * 1536 + 2 * 128 + 24) + 1792 * 4 + 1536 * 1024
            + 3 * 1024 * 2048
        ),
    ),
    "moonshotai--Kimi-Linear-48B-A3B-Instruct": Entry(
        # Kimi Delta Attention on 20 of 27 layers (32 heads of 128: q, k, v, o, the f and g gates through
        # 128, b, three short convolutions of 4), MLA on layers 4, 8, ..., 24 and 27 (no q latent, kv latent
        # 512, rope 64); a dense layer, then 256 experts of 1024, a router and a shared expert; untied
        "KimiLinearForCausalLM", kv=7 * (512 + 64) * 2,
        params=163840 * 2304 * 2
        + 7 * (2304 * 32 * 192 + 2304 * 576 + 512 * 32 * 256 + 32 * 128 * 2304)
        + 20 * (4 * 2304 * 4096 + 2 * (2304 * 128 + 128 * 4096) + 2304 * 32 + 3 * 4096 * 4)
        + 3 * 2304 * 9216 + 26 * (256 * 3 * 2304 * 1024 + 2304 * 256 + 3 * 2304 * 1024),
    ),
    "LiquidAI--LFM2-1.2B": Entry(
        # attention on layers 2, 5, 8, 10, 12, 14 (32 heads of 64, 8 KV heads), short convolutions (in_proj to
        # B, C, x; a depthwise conv of 3; out_proj) on the other 10; a gated MLP of 2/3 x 12288 = 8192; tied
        "Lfm2ForCausalLM", kv=6 * 2 * 8 * 64 * 2,
        params=65536 * 2048 + 6 * (2 * 2048 * 2048 + 2 * 2048 * 512)
        + 10 * (2048 * 3 * 2048 + 2048 * 3 + 2048 * 2048) + 16 * 3 * 2048 * 8192,
    ),
    "AdelaCorbeanu--Llama-3.2-3B-Romanian-QA-LoRA": Entry(
        "", params=0, kv=0, status="refused", line="an adapter, not a model",
        note="an adapter's files only: its base model is meta-llama--Llama-3.2-3B",
    ),
}
# fmt: on
