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

from tests.planner.corpus_cases import CASES

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
    **{name: Entry(arch, CASES[name].params, CASES[name].kv) for name, arch in CASE_ARCHITECTURES.items()},
    "AdelaCorbeanu--Llama-3.2-3B-Romanian-QA-LoRA": Entry(
        "", params=0, kv=0, status="refused", line="an adapter, not a model",
        note="an adapter's files only: its base model is meta-llama--Llama-3.2-3B",
    ),
}
# fmt: on
