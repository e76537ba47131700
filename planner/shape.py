"""A model's shape from its ``config.json``: the KV cache per token, the heads, the longest context, the
sliding-window layers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planner.caches import PATTERN_TYPES, cached_layers, window
from planner.configs import LanguageConfig, language_config
from planner.constants import INDEXER_QUANT_BLOCK, INDEXER_SCALE_BYTES, KV_BYTES_PER_ELEMENT
from planner.errors import InvalidInput
from planner.layers import EXPERT_KEYS, layer_plan
from planner.mixers import state_bytes_per_sequence
from planner.model import Shape
from planner.params import mlp_width, params_from_config, vision_hidden, vision_params

MAX_CONFIG_DIMENSION = 1 << 24
"""Bounds on a config's layer, head and width counts: far past any model, short of overflowing the
arithmetic."""

FALCON_TYPES = ("falcon", "RefinedWeb", "RefinedWebModel")

ROPE_UNSCALED = ("su", "longrope", "llama3")
"""Rope types whose ``max_position_embeddings`` already is the extended length, so vLLM does not multiply
it (``_get_and_verify_max_len``, vllm/config/model.py, v0.10)."""

WINDOWED_TYPES = PATTERN_TYPES
"""Model types whose configs may say which layers slide by a fixed pattern alone (``planner.caches``)."""


def shape_from_config(config: Any, *, params: int = 0, source: str = "config.json") -> Shape:
    """A model's shape from its ``config.json``.

    Fields are read as transformers reads them (``planner.configs``): the model type's defaults, other
    architectures' names, a multimodal config's ``text_config``. ``num_key_value_heads`` absent means as
    many as the attention heads (Falcon and GPT-BigCode's ``multi_query`` one, ChatGLM's
    ``multi_query_group_num``); ``head_dim`` absent means ``hidden_size / num_attention_heads``. MLA
    models (``kv_lora_rank``, as DeepSeek's) cache one latent of ``kv_lora_rank + qk_rope_head_dim`` per
    layer, and DeepSeek-V3.2's indexer its key (``_indexer_key_bytes``). ``params`` is the parameter
    count where something else tells it; 0 counts it from the shapes.
    """
    if config is None:
        raise InvalidInput(source, "(file)", "missing: a repository needs its config.json")
    if not isinstance(config, Mapping):
        raise InvalidInput(source, "(file)", f"expected a JSON object, got {type(config).__name__}")
    lang = language_config(config, source)
    cfg = lang.fields

    def whole(name: str, *, default: int | None = None) -> int:
        value = cfg.get(name)
        if value is None:
            if default is not None:
                return default
            kind = f"model type {lang.model_type!r}" if lang.model_type else "no model_type"
            raise InvalidInput(lang.source, name, f"missing ({kind}, and no default for it)")
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_CONFIG_DIMENSION:
            allowed = f"must be a whole number from 1 to {MAX_CONFIG_DIMENSION}"
            raise InvalidInput(lang.source, name, f"{allowed} (given {value!r})")
        return value

    layers = whole("num_hidden_layers")
    heads = whole("num_attention_heads")
    plan = layer_plan(lang, layers)
    per_layer_heads = sorted({layer.kv_heads for layer in plan if layer.mixer == "attention" and layer.kv_heads})
    # DeciLM leaves num_key_value_heads null and gives each layer its own: the fewest bound a split
    kv_heads = per_layer_heads[0] if per_layer_heads else _kv_heads(lang, heads, whole)
    mla = uses_mla(cfg)
    key = value = latent = 0
    if mla:
        latent = whole("kv_lora_rank") + whole("qk_rope_head_dim")
    else:
        if cfg.get("head_dim") is not None:
            key = whole("head_dim")
        else:
            hidden = whole("hidden_size")
            if hidden % heads:
                raise InvalidInput(
                    lang.source, "hidden_size", f"{hidden} does not divide by num_attention_heads {heads}"
                )
            key = hidden // heads
        # keys of head_dim, values of v_head_dim where the config sets it apart (MiMo-V2-Flash); a
        # v_head_dim of 0 is an MLA key the model does not use (DeepSeek-OCR's use_mla false)
        value = key if cfg.get("v_head_dim") == 0 else whole("v_head_dim", default=key)
    cached = cached_layers(lang, plan, kv_heads, key, value, latent=latent)
    kv = sum(layer.values for layer in cached) * KV_BYTES_PER_ELEMENT + len(cached) * _indexer_key_bytes(cfg)
    max_context, where = max_model_len(lang)
    sliding = sum(layer.values for layer in cached if layer.sliding) * KV_BYTES_PER_ELEMENT
    windows = ((window(lang), sliding),) if sliding and not mla else ()
    return Shape(
        kv_bytes_per_token=kv,
        kv_heads=kv_heads,
        params=params or params_from_config(lang, kv_heads, plan),
        max_context=max_context,
        heads=heads,
        mla=mla,
        windows=windows,
        max_context_source=where,
        vision_params=vision_params(lang),
        vision_hidden=vision_hidden(lang),
        layers=layers,
        hidden=_size(cfg, "hidden_size"),
        mlp_width=mlp_width(lang),
        vocab=_size(cfg, "vocab_size"),
        experts=max(_size(cfg, name) for name in EXPERT_FIELDS),
        attention_layers=len(cached),
        state_bytes_per_sequence=state_bytes_per_sequence(lang, plan),
    )


def uses_mla(cfg: Mapping[str, Any]) -> bool:
    """Whether the attention is MLA: a ``kv_lora_rank`` that is not null, unless ``use_mla`` is false.
    vLLM's ``is_deepseek_mla`` (vllm/config/model.py) asks ``kv_lora_rank is not None``; DeepSeek-VL2's and
    DeepSeek-OCR's language configs say ``use_mla: false`` with a null ``kv_lora_rank`` and zero MLA head
    widths, and their ``DeepseekV2DecoderLayer`` then builds plain multi-head attention (DeepSeek's
    modeling_deepseekv2.py: ``"mla_" if config.use_mla else "mha_"``)."""
    return cfg.get("kv_lora_rank") is not None and cfg.get("use_mla") is not False


def _indexer_key_bytes(cfg: Mapping[str, Any]) -> int:
    """Bytes per token per layer of a sparse-attention indexer's key cache, 0 without one. vLLM builds the
    indexer where the config has ``index_topk`` (DeepSeek-V3.2, GLM-5) and caches its key, one head of
    ``index_head_dim``, in fp8 with an fp32 scale per ``INDEXER_QUANT_BLOCK`` values
    (``DeepseekV32IndexerCache(head_dim=head_dim + head_dim // quant_block_size * 4, dtype=torch.uint8)``,
    vllm/model_executor/models/deepseek_v2.py), beside the MLA latent."""
    if cfg.get("index_topk") is None:
        return 0
    head_dim = _size(cfg, "index_head_dim")
    return head_dim + head_dim // INDEXER_QUANT_BLOCK * INDEXER_SCALE_BYTES


EXPERT_FIELDS = EXPERT_KEYS
"""Where configs count a mixture's routed experts (``planner.layers.EXPERT_KEYS``)."""


def _size(cfg: Mapping[str, Any], name: str) -> int:
    """A size the measured estimate reads (``planner.estimate``), 0 where the config has none it can use:
    an unknown size is counted at the largest profiled, never refused."""
    value = cfg.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_CONFIG_DIMENSION:
        return 0
    return value


def _kv_heads(lang: LanguageConfig, heads: int, whole: Any) -> int:
    """The KV heads as vLLM's ``get_total_num_kv_heads`` counts them (vllm/config/model.py, v0.10): one for
    ``multi_query`` (GPT-BigCode; Falcon unless ``new_decoder_architecture``), else the first of
    ``n_head_kv``, ``num_kv_heads``, ``num_key_value_heads``, ``multi_query_group_num`` (read here as
    ``num_key_value_heads``), else the attention heads."""
    cfg = lang.fields
    new_falcon = lang.model_type in FALCON_TYPES and bool(cfg.get("new_decoder_architecture"))
    if lang.model_type in FALCON_TYPES[1:] and cfg.get("hidden_size") == 8192:
        # vLLM's RWConfig for Falcon's own configs (vllm/transformers_utils/configs/falcon.py, v0.10): "hack
        # for falcon-40b", whose config has n_head_kv but no new_decoder_architecture
        new_falcon = True
    if not new_falcon and cfg.get("multi_query") is True:
        return 1
    return int(whole("num_key_value_heads", default=heads))


def max_model_len(lang: LanguageConfig) -> tuple[int, str]:
    """The longest context and where it comes from, as vLLM derives ``max_model_len``
    (``_get_and_verify_max_len``, vllm/config/model.py, v0.10): ``max_position_embeddings`` (or the least of
    its other names), times ``rope_scaling.factor`` unless the rope type already counts it (``llama3``,
    ``longrope``) or the model is Gemma 3 (whose 128k is already scaled); YaRN multiplies its
    ``original_max_position_embeddings``. ``(0, "")`` when the config says nothing."""
    cfg = lang.fields
    base = cfg.get("max_position_embeddings")
    if not isinstance(base, int) or isinstance(base, bool) or base <= 0:
        return 0, ""
    where = f"max_position_embeddings {base}"
    rope = cfg.get("rope_scaling")
    if not isinstance(rope, Mapping) or "gemma3" in lang.model_type:
        return base, where
    rope_type = rope.get("rope_type") or rope.get("type")
    factor = rope.get("factor", 1.0)
    if rope_type in ROPE_UNSCALED or rope_type in ("mrope", "default"):
        return base, where
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not 0 < factor <= 1 << 10:
        return base, where
    original = rope.get("original_max_position_embeddings")
    if rope_type == "yarn" and isinstance(original, int) and not isinstance(original, bool) and original > 0:
        base, where = original, f"rope_scaling.original_max_position_embeddings {original}"
    return int(base * factor), f"{where} x rope_scaling.factor {factor:g} ({rope_type})"
