"""Which attention layers keep a KV cache of their own, what one token costs in each, and which of them
keep it for a sliding window only.

A layer's cache is its KV heads times its key and value widths. Most models give every attention layer the
same; the keys below say otherwise, each read as vLLM builds the layers:

- ``num_kv_shared_layers`` (Gemma 3n, Gemma 4): the last N layers reuse the cache of an earlier layer of
  their kind and keep none of their own (vLLM's gemma3n.py: ``kv_sharing_target_layer_name`` for layers
  from ``num_hidden_layers - num_kv_shared_layers``; llama.cpp's ``n_layer_kv_from_start``).
- ``num_global_key_value_heads`` and ``global_head_dim`` (Gemma 4): the full-attention layers' own KV heads
  and head width, the sliding layers keeping ``num_key_value_heads`` of ``head_dim``.
- ``layer_types`` that mix ``sliding_attention`` and ``full_attention`` (transformers v4.53+, any model
  type), ``hybrid_layer_pattern`` (MiMo-V2-Flash, 1 a sliding layer), or a model type's fixed pattern
  (``sliding_window_pattern``: every N-th layer full): the sliding layers hold ``sliding_window`` tokens.
  vLLM's hybrid KV cache manager (v1 engine) and llama.cpp's SWA cache (``llama_kv_cache_iswa``, for the
  architectures with a ``swa_type``) keep them for the window only. A window on every layer alike (Mistral
  7B v0.1's, Phi-3's) is not one: llama.cpp caches such layers whole, and a plan never counts less than an
  engine takes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from planner.configs import LanguageConfig
from planner.layers import Layer

PATTERN_TYPES = frozenset(
    {"gemma2", "gemma3", "gemma3_text", "gemma3n", "gemma3n_text", "gemma4", "gemma4_text", "gpt_oss", "cohere2"}
)
"""Model types whose configs may say which layers slide by ``sliding_window_pattern`` alone (every N-th
layer full): Gemma2Config, Gemma3TextConfig, Gemma3nTextConfig (5), GptOssConfig, Cohere2Config; where
they list ``layer_types``, those win."""


@dataclass(frozen=True, slots=True)
class CachedLayer:
    """One attention layer with a cache of its own."""

    index: int
    values: int
    """Values one token caches here: KV heads x (key width + value width), or MLA's latent."""
    sliding: bool = False


def _int(cfg: Mapping[str, Any], name: str, default: int = 0) -> int:
    value = cfg.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def window(lang: LanguageConfig) -> int:
    """The sliding window in tokens; 0 without one."""
    return _int(lang.fields, "sliding_window")


def sliding_flags(lang: LanguageConfig, layers: int) -> list[bool]:
    """Which layers slide (all ``False`` where none do, or where every layer would: see the module)."""
    cfg = lang.fields
    none = [False] * layers
    if not window(lang):
        return none
    kinds = cfg.get("layer_types")
    if isinstance(kinds, Sequence) and not isinstance(kinds, str) and len(kinds) == layers:
        flags = [kind == "sliding_attention" for kind in kinds]
        return flags if any(flags) and "full_attention" in kinds else none
    pattern = cfg.get("hybrid_layer_pattern")
    if isinstance(pattern, Sequence) and not isinstance(pattern, str) and len(pattern) == layers:
        flags = [kind == 1 for kind in pattern]
        return flags if any(flags) and not all(flags) else none
    letters = cfg.get("sliding_window_pattern")
    if isinstance(letters, str) and letters and set(letters) <= {"L", "G"}:
        # EXAONE 4.0's "LLLG" (Exaone4Config): local (sliding) layers and a global one, repeated
        flags = [letters[i % len(letters)] == "L" for i in range(layers)]
        return flags if any(flags) and not all(flags) else none
    every = _int(cfg, "sliding_window_pattern")
    if lang.model_type == "gemma3n_text" or lang.model_type == "gemma3n":
        every = every or 5  # Gemma3nTextConfig: four sliding layers, then a full one
    if lang.model_type not in PATTERN_TYPES or every < 2:
        return none
    return [(i + 1) % every != 0 for i in range(layers)]


def full_flags(lang: LanguageConfig, layers: int) -> list[bool]:
    """Which layers attend in full, whatever the window: ``layer_types``' ``full_attention`` where the
    config lists them, else those off the sliding pattern."""
    kinds = lang.fields.get("layer_types")
    if isinstance(kinds, Sequence) and not isinstance(kinds, str) and len(kinds) == layers:
        return [kind == "full_attention" for kind in kinds]
    return [not s for s in sliding_flags(lang, layers)]


def first_shared(lang: LanguageConfig, layers: int) -> int:
    """The first layer that keeps no cache of its own (``num_kv_shared_layers``); ``layers`` where none."""
    shared = _int(lang.fields, "num_kv_shared_layers")
    return layers - shared if 0 < shared < layers else layers


def cached_layers(
    lang: LanguageConfig, plan: tuple[Layer, ...], kv_heads: int, key: int, value: int, *, latent: int = 0
) -> tuple[CachedLayer, ...]:
    """The attention layers of ``plan`` that keep a cache of their own, with what a token costs in each:
    ``kv_heads`` of ``key`` + ``value`` widths (a layer's own KV heads where ``plan`` gives them; a full
    layer's ``num_global_key_value_heads`` of ``global_head_dim`` where the config sets them), or MLA's
    ``latent`` on every layer."""
    cfg = lang.fields
    sliding = sliding_flags(lang, len(plan))
    last = first_shared(lang, len(plan))
    global_heads = _int(cfg, "num_global_key_value_heads")
    global_dim = _int(cfg, "global_head_dim")
    full = full_flags(lang, len(plan)) if global_heads or global_dim else []
    out = []
    for i, layer in enumerate(plan):
        if layer.mixer != "attention" or i >= last:
            continue
        if latent:
            out.append(CachedLayer(i, latent))
            continue
        heads, k, v = layer.kv_heads or kv_heads, key, value
        if full and full[i]:
            heads = global_heads or heads
            k = v = global_dim or key
        out.append(CachedLayer(i, heads * (k + v), sliding[i]))
    return tuple(out)
