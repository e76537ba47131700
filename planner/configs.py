"""A ``config.json`` as transformers reads it: the defaults of its model type's config class for the fields
a config leaves out, the names other architectures give the same fields, and the language model's part of
a multimodal config. The defaults, a table per model type, are in ``planner.defaults``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from planner.defaults import MODEL_DEFAULTS as MODEL_DEFAULTS  # the table, kept here for its readers

TEXT_MODEL_TYPE: dict[str, str] = {
    # the text_config's type when it names none: LlavaConfig and LlavaNextConfig make it "llama";
    # the others are the sub-config class each multimodal config builds its text_config with
    "llava": "llama",
    "llava_next": "llama",
    "mllama": "mllama_text_model",
    "gemma3": "gemma3_text",
    "qwen2_vl": "qwen2_vl_text",
    "qwen2_5_vl": "qwen2_5_vl_text",
    "mistral3": "mistral",
    "gemma3n": "gemma3n_text",
    "gemma4": "gemma4_text",
}
"""A multimodal config's language model type, when its ``text_config`` names none."""

MULTIMODAL_TOP: dict[str, str] = {"qwen2_vl": "qwen2_vl_text", "qwen2_5_vl": "qwen2_5_vl_text"}
"""Multimodal types whose language fields sit at the top level (Qwen2-VL's configs before transformers
v4.53 nested them)."""

ALIASES: dict[str, tuple[str, ...]] = {
    # vLLM reads the same alternatives: get_total_num_kv_heads (n_head_kv, num_kv_heads,
    # num_key_value_heads, multi_query_group_num) and _get_and_verify_max_len's possible keys
    # (vllm/config/model.py, v0.10); the rest are the attribute_maps of GPT2Config, GPTJConfig,
    # FalconConfig and ChatGLMConfig, and Nemotron-H's attention_head_dim (NemotronHConfig)
    "num_hidden_layers": ("n_layer", "num_layers", "n_layers"),
    "num_attention_heads": ("n_head", "n_heads"),
    "hidden_size": ("n_embd", "n_embed", "d_model"),
    "num_key_value_heads": ("n_head_kv", "num_kv_heads"),
    "intermediate_size": ("ffn_hidden_size", "n_inner", "block_ff_dim"),
    "tie_word_embeddings": ("tie_embedding",),  # LFM2's name for it (Lfm2Config)
    "head_dim": ("kv_channels", "attention_head_dim"),
    "vocab_size": ("padded_vocab_size",),
}

MAX_LENGTH_KEYS = (
    # vLLM's _get_and_verify_max_len (vllm/config/model.py, v0.10): the least of these is the model's
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)


@dataclass(frozen=True, slots=True)
class LanguageConfig:
    """The language model's fields, defaults filled, with its model type and where it was read."""

    fields: dict[str, Any]
    model_type: str
    source: str
    top: Mapping[str, Any]
    """The whole config, for what lives at its top level (``quantization_config``, ``vision_config``)."""


def _model_type(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _named(cfg: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(cfg)
    for name, others in ALIASES.items():
        if out.get(name) is None:
            for other in others:
                if out.get(other) is not None:
                    out[name] = out[other]
                    break
    if out.get("max_position_embeddings") is None:
        lengths = [out.get(k) for k in MAX_LENGTH_KEYS[1:]]
        known = [v for v in lengths if isinstance(v, int) and not isinstance(v, bool) and v > 0]
        if known:
            out["max_position_embeddings"] = min(known)
    return out


NESTED_LANGUAGE_KEYS = ("text_config", "llm_config", "language_config")
"""Where a multimodal config nests its language model: most under ``text_config``, InternVL under
``llm_config`` (InternVLChatConfig), DeepSeek-VL2 and Janus under ``language_config``."""


def nested_language(config: Mapping[str, Any]) -> tuple[str, Mapping[str, Any] | None]:
    """The key and the object of a config's nested language model; ``("", None)`` where it has none."""
    for key in NESTED_LANGUAGE_KEYS:
        text = config.get(key)
        if isinstance(text, Mapping):
            return key, text
    return "", None


def language_config(config: Mapping[str, Any], source: str) -> LanguageConfig:
    """The fields of ``config``'s language model as transformers would read them: the top level, then a
    nested language model (``NESTED_LANGUAGE_KEYS``) over it, over the defaults of the language model's
    config class."""
    top_type = _model_type(config.get("model_type"))
    key, text = nested_language(config)
    fields = _named(config)
    model_type = MULTIMODAL_TOP.get(top_type, top_type)
    if text is not None:
        model_type = _model_type(text.get("model_type")) or TEXT_MODEL_TYPE.get(top_type, top_type)
        fields.update(_named(text))
        source = f"{source} ({key})"
    defaults = MODEL_DEFAULTS.get(model_type, {})
    merged = {**defaults, **{k: v for k, v in fields.items() if v is not None}}
    blocks = merged.get("layers_block_type")
    if model_type == "nemotron_h" and "num_hidden_layers" not in merged and isinstance(blocks, list):
        merged["num_hidden_layers"] = len(blocks)  # NemotronHConfig (transformers v5) counts them so
    if model_type == "chatglm" or (model_type == "" and "multi_query_group_num" in fields):
        # ChatGLM keeps its grouped KV heads in multi_query_group_num, used only with
        # multi_query_attention (THUDM's modeling_chatglm.py SelfAttention)
        model_type = "chatglm"
        merged = {**MODEL_DEFAULTS["chatglm"], **merged}
        if merged.get("multi_query_attention"):
            merged["num_key_value_heads"] = merged.get("multi_query_group_num")
        elif "num_key_value_heads" not in fields:
            merged.pop("num_key_value_heads", None)
    return LanguageConfig(merged, model_type, source, config)


def supported_model_types() -> list[str]:
    """The model types with a table of defaults."""
    return sorted(MODEL_DEFAULTS)
