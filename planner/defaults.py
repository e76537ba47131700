"""What each model type's transformers config class gives a field a ``config.json`` leaves out.

Each table entry names the transformers config class it comes from; the defaults are those of
transformers v4.51-v4.57 (``src/transformers/models/<type>/configuration_<type>.py``), which agree on
every field read here.
"""

from __future__ import annotations

from typing import Any

_LLAMA: dict[str, Any] = {
    # LlamaConfig (configuration_llama.py)
    "vocab_size": 32000,
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
}
_QWEN: dict[str, Any] = {
    # Qwen2Config / Qwen3Config (configuration_qwen2.py, configuration_qwen3.py): sliding_window is set,
    # but only used when use_sliding_window is true
    "vocab_size": 151936,
    "hidden_size": 4096,
    "intermediate_size": 22016,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": False,
    "use_sliding_window": False,
}

MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": _LLAMA,
    "mistral": {
        # MistralConfig (configuration_mistral.py)
        **_LLAMA,
        "intermediate_size": 14336,
        "num_key_value_heads": 8,
        "max_position_embeddings": 4096 * 32,
        "sliding_window": 4096,
    },
    "mixtral": {
        # MixtralConfig (configuration_mixtral.py)
        **_LLAMA,
        "intermediate_size": 14336,
        "num_key_value_heads": 8,
        "max_position_embeddings": 4096 * 32,
        "num_local_experts": 8,
    },
    "qwen2": _QWEN,
    "qwen3": {**_QWEN, "head_dim": 128},
    "qwen2_moe": {
        # Qwen2MoeConfig (configuration_qwen2_moe.py)
        **_QWEN,
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632,
        "num_experts": 60,
        "decoder_sparse_step": 1,
    },
    "qwen3_moe": {
        # Qwen3MoeConfig (configuration_qwen3_moe.py)
        **_QWEN,
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "num_hidden_layers": 24,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "moe_intermediate_size": 768,
        "num_experts": 128,
        "decoder_sparse_step": 1,
    },
    "qwen2_vl_text": {
        # Qwen2VLTextConfig (configuration_qwen2_vl.py); Qwen2_5_VLTextConfig has the same defaults
        **_QWEN,
        "vocab_size": 152064,
        "hidden_size": 8192,
        "intermediate_size": 29568,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
    },
    "gemma": {
        # GemmaConfig (configuration_gemma.py)
        "vocab_size": 256000,
        "hidden_size": 3072,
        "intermediate_size": 24576,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "head_dim": 256,
        "max_position_embeddings": 8192,
        "tie_word_embeddings": True,
    },
    "gemma2": {
        # Gemma2Config (configuration_gemma2.py): layer_types alternate sliding and full, sliding first
        "vocab_size": 256000,
        "hidden_size": 2304,
        "intermediate_size": 9216,
        "num_hidden_layers": 26,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "max_position_embeddings": 8192,
        "sliding_window": 4096,
        "sliding_window_pattern": 2,
        "tie_word_embeddings": True,
    },
    "gemma3_text": {
        # Gemma3TextConfig (configuration_gemma3.py): every sixth layer full, the rest sliding
        "vocab_size": 262208,
        "hidden_size": 2304,
        "intermediate_size": 9216,
        "num_hidden_layers": 26,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "max_position_embeddings": 131072,
        "sliding_window": 4096,
        "sliding_window_pattern": 6,
        "tie_word_embeddings": True,
    },
    "mllama_text_model": {
        # MllamaTextConfig (configuration_mllama.py): cross_attention_layers [3, 8, ..., 38] of the 40
        **_LLAMA,
        "vocab_size": 128256,
        "intermediate_size": 14336,
        "num_hidden_layers": 40,
        "num_key_value_heads": 8,
        "max_position_embeddings": 131072,
    },
    "phi3": {
        # Phi3Config (configuration_phi3.py)
        **_LLAMA,
        "vocab_size": 32064,
        "hidden_size": 3072,
        "intermediate_size": 8192,
        "max_position_embeddings": 4096,
    },
    "deepseek_v3": {
        # DeepseekV3Config (configuration_deepseek_v3.py)
        "vocab_size": 129280,
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "num_hidden_layers": 61,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "n_shared_experts": 1,
        "n_routed_experts": 256,
        "kv_lora_rank": 512,
        "q_lora_rank": 1536,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "first_k_dense_replace": 3,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
    },
    "falcon": {
        # FalconConfig (configuration_falcon.py): falcon-7b's shape, multi-query unless
        # new_decoder_architecture
        "vocab_size": 65024,
        "hidden_size": 4544,
        "num_hidden_layers": 32,
        "num_attention_heads": 71,
        "new_decoder_architecture": False,
        "multi_query": True,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": True,
    },
    "gpt2": {
        # GPT2Config (configuration_gpt2.py)
        "vocab_size": 50257,
        "max_position_embeddings": 1024,
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "tie_word_embeddings": True,
    },
    "gptj": {
        # GPTJConfig (configuration_gptj.py)
        "vocab_size": 50400,
        "max_position_embeddings": 2048,
        "hidden_size": 4096,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "tie_word_embeddings": False,
    },
    "gpt_neox": {
        # GPTNeoXConfig (configuration_gpt_neox.py)
        "vocab_size": 50432,
        "hidden_size": 6144,
        "num_hidden_layers": 44,
        "num_attention_heads": 64,
        "intermediate_size": 24576,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": False,
    },
    "chatglm": {
        # ChatGLMConfig (THUDM's configuration_chatglm.py, shipped with chatglm3-6b and glm-4-9b)
        "num_hidden_layers": 28,
        "vocab_size": 65024,
        "hidden_size": 4096,
        "intermediate_size": 13696,
        "head_dim": 128,
        "num_attention_heads": 32,
        "max_position_embeddings": 2048,
        "multi_query_attention": False,
        "multi_query_group_num": 1,
        "tie_word_embeddings": False,
    },
    "cohere": {
        # CohereConfig (configuration_cohere.py)
        "vocab_size": 256000,
        "hidden_size": 8192,
        "intermediate_size": 22528,
        "num_hidden_layers": 40,
        "num_attention_heads": 64,
        "max_position_embeddings": 8192,
        "tie_word_embeddings": True,
    },
    "internlm2": {
        # InternLM2Config (internlm's configuration_internlm2.py)
        **_LLAMA,
        "vocab_size": 103168,
    },
    "gpt_oss": {
        # GptOssConfig (configuration_gpt_oss.py): layer_types alternate sliding and full
        "vocab_size": 201088,
        "hidden_size": 2880,
        "intermediate_size": 2880,
        "num_hidden_layers": 36,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "num_local_experts": 128,
        "sliding_window": 128,
        "sliding_window_pattern": 2,
        "max_position_embeddings": 131072,
        "tie_word_embeddings": False,
    },
    "gemma3n_text": {
        # Gemma3nTextConfig (configuration_gemma3n.py): E2B's language model; every fifth layer full, the
        # last 10 sharing the KV cache of earlier ones; the output head tied to the embeddings
        "vocab_size": 262400,
        "vocab_size_per_layer_input": 262144,
        "hidden_size": 2048,
        "hidden_size_per_layer_input": 256,
        "intermediate_size": 16384,
        "num_hidden_layers": 35,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "sliding_window": 512,
        "num_kv_shared_layers": 15,
        "laurel_rank": 64,
        "altup_num_inputs": 4,
        "max_position_embeddings": 32768,
        "tie_word_embeddings": True,
    },
    "gemma4_text": {"tie_word_embeddings": True},
    "lfm2": {
        # Lfm2Config (configuration_lfm2.py): the output head tied, the MLP width adjusted
        "vocab_size": 65536,
        "hidden_size": 2560,
        "intermediate_size": 12288,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 128000,
        "conv_L_cache": 3,
        "block_multiple_of": 256,
        "block_ffn_dim_multiplier": 1.0,
        "block_auto_adjust_ff_dim": True,
        "tie_word_embeddings": True,
    },  # Gemma 4's text configs tie the output head as Gemma's
    # the output head tied to the embeddings unless the config says otherwise: GPTBigCodeConfig and
    # Starcoder2Config pass PretrainedConfig's tie_word_embeddings=True through, MiniCPM3Config sets it
    # True (configuration_minicpm3.py); GPTBigCodeForCausalLM, Starcoder2ForCausalLM and
    # MiniCPM3ForCausalLM then share the embedding matrix with lm_head (_tied_weights_keys)
    "gpt_bigcode": {"tie_word_embeddings": True},
    "starcoder2": {"tie_word_embeddings": True},
    "minicpm3": {"tie_word_embeddings": True},
}
"""What each config class gives a field the config leaves out."""

MODEL_DEFAULTS["qwen2_5_vl_text"] = MODEL_DEFAULTS["qwen2_vl_text"]
MODEL_DEFAULTS["gemma3"] = MODEL_DEFAULTS["gemma3_text"]
MODEL_DEFAULTS["cohere2"] = MODEL_DEFAULTS["cohere"]
MODEL_DEFAULTS["mistral3"] = MODEL_DEFAULTS["mistral"]
for _falcon in ("RefinedWeb", "RefinedWebModel"):  # Falcon's model types before transformers took it in
    MODEL_DEFAULTS[_falcon] = MODEL_DEFAULTS["falcon"]
