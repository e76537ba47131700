"""What each layer of a model is, from its ``config.json``: attention (which keeps a KV cache) or another
mixer (Mamba, gated DeltaNet, which keep a fixed state per sequence) or none, and a dense MLP, a mixture of
experts or none.

A plain decoder is attention and an MLP on every layer; the keys below say otherwise, each read as
transformers and vLLM read it. A config whose layer structure is not understood is refused, naming its
model type and the key (``InvalidInput``), never planned as a plain decoder: a hybrid counted as all
attention has a KV cache many times too large and a wrong parameter count.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from planner.configs import LanguageConfig
from planner.errors import InvalidInput

Mixer = Literal["attention", "mamba", "mamba2", "gated_deltanet", "kda", "short_conv", "linear", "none"]
Mlp = Literal["dense", "moe", "linear", "none"]


@dataclass(frozen=True, slots=True)
class Layer:
    """One layer's parts."""

    mixer: Mixer = "attention"
    mlp: Mlp = "dense"
    kv_heads: int = 0
    """This layer's KV heads where they differ by layer (DeciLM's ``block_configs``); 0 is the model's."""
    intermediate: int = 0
    """This layer's dense MLP width where it differs by layer; 0 is the model's."""
    beside: Mixer = "none"
    """A second mixer run side by side with ``mixer`` on the same input (Falcon-H1's Mamba-2 beside its
    attention)."""


PATTERN_KEYS = (
    "layer_types",
    "full_attention_interval",
    "hybrid_override_pattern",
    "block_configs",
    "attn_layer_period",
    "attn_layer_offset",
    "attn_layer_indices",
    "expert_layer_period",
    "attn_type_list",
    "layers_block_type",
    "full_attn_idxs",
    "linear_attn_config",
)
"""Keys by which configs say their layers differ."""

ATTENTION_KINDS = frozenset({"full_attention", "sliding_attention", "attention"})
"""``layer_types`` values of attention layers (Gemma 2/3, gpt-oss, Cohere 2; Granite 4.0-H's
``attention``, beside its ``mamba``)."""

GATED_DELTANET_TYPES = frozenset({"qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"})
"""Qwen3-Next and Qwen3.5: ``layer_types`` of ``full_attention`` and ``linear_attention`` (a gated
DeltaNet), else every ``full_attention_interval``-th layer attention (Qwen3NextConfig, default 4)."""

HYBRID_TYPES: dict[str, str] = {
    # model types whose layers are not all attention, and the key that says which are; those not read
    # here are refused (their mixers' parameters and state are not counted yet)
    "nemotron_h": "hybrid_override_pattern",
    "qwen3_next": "layer_types",
    "qwen3_5_text": "layer_types",
    "qwen3_5_moe_text": "layer_types",
    "nemotron-nas": "block_configs",
    "deci": "block_configs",
    "granitemoehybrid": "layer_types",
    "falcon_h1": "model_type",  # attention and Mamba side by side on every layer
    "minimax": "attn_type_list",
    "minimax_text_01": "attn_type_list",
    "kimi_linear": "linear_attn_config",
    "lfm2": "layer_types",
    "zamba": "layers_block_type",
    "zamba2": "layers_block_type",
    "mamba": "model_type",  # every layer Mamba, no attention
    "mamba2": "model_type",
    "falcon_mamba": "model_type",
    "recurrent_gemma": "block_types",
    "plamo2": "mamba_step",
}
"""Hybrid and recurrent model types, with the key that says which layers are which."""

READ_TYPES = frozenset(
    {"nemotron_h", "nemotron-nas", "deci", "jamba", "granitemoehybrid", "bamba", *GATED_DELTANET_TYPES}
    | {"falcon_h1", "lfm2", "kimi_linear"}
)
"""The hybrid and per-layer model types whose layers this module reads."""

NEMOTRON_H_BLOCKS: dict[str, Layer] = {
    # NemotronHConfig.layers_block_type: M mamba, * attention, - MLP, E mixture of experts; each block has
    # one of them (configuration_nemotron_h.py, shipped with the checkpoints)
    "M": Layer("mamba2", "none"),
    "*": Layer("attention", "none"),
    "-": Layer("none", "dense"),
    "E": Layer("none", "moe"),
}
NEMOTRON_H_NAMES = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}
"""``layers_block_type``'s names for the same blocks."""


def _int(cfg: Mapping[str, Any], name: str, default: int = 0) -> int:
    value = cfg.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def _refuse(lang: LanguageConfig, key: str, problem: str) -> InvalidInput:
    kind = lang.model_type or "(no model_type)"
    return InvalidInput(lang.source, key, f"model type {kind!r}: {problem}")


def layer_plan(lang: LanguageConfig, layers: int) -> tuple[Layer, ...]:
    """Every layer's parts, as the model's modeling code builds them; refused where the config's layer
    structure is not understood."""
    cfg = lang.fields
    model_type = lang.model_type
    if model_type in HYBRID_TYPES and model_type not in READ_TYPES:
        raise _refuse(lang, HYBRID_TYPES[model_type], "a hybrid whose layers the planner does not read yet")
    if model_type == "nemotron_h":
        return _nemotron_h(lang, layers)
    if "block_configs" in cfg or model_type in ("nemotron-nas", "deci"):
        return _block_configs(lang, layers)
    if model_type == "jamba":
        return _jamba(lang, layers)
    if model_type == "bamba":
        return _bamba(lang, layers)
    if "hybrid_layer_pattern" in cfg:
        return _hybrid_layer_pattern(lang, layers)
    if model_type == "falcon_h1":
        # FalconH1ParallelHybrid (vLLM's falcon_h1.py): attention and a Mamba-2 mixer on every layer, side
        # by side, then the MLP
        return tuple(Layer("attention", "dense", beside="mamba2") for _ in range(layers))
    if model_type == "kimi_linear" or isinstance(cfg.get("linear_attn_config"), Mapping):
        return _kimi_linear(lang, layers)
    idxs = cfg.get("full_attn_idxs")
    if model_type == "lfm2" and cfg.get("layer_types") is None and isinstance(idxs, Sequence):
        # Lfm2Config: layer_types from full_attn_idxs where a config gives only those
        if not all(type(i) is int and 0 <= i < layers for i in idxs):
            raise _refuse(lang, "full_attn_idxs", f"must list layers from 0 to {layers - 1}")
        return tuple(Layer("attention" if i in idxs else "short_conv", "dense") for i in range(layers))
    if model_type == "lfm2":
        cfg = {k: v for k, v in cfg.items() if k != "full_attn_idxs"}  # layer_types say the same
    kinds = cfg.get("attn_type_list")
    if isinstance(kinds, list) and len(kinds) == layers and all(type(k) is int and k == 1 for k in kinds):
        # MiniMax's 1 is softmax attention (0 its lightning attention): MiniMax-M2 has it on every layer
        cfg = {k: v for k, v in cfg.items() if k != "attn_type_list"}
    for key in PATTERN_KEYS[2:]:
        if cfg.get(key) is not None:
            raise _refuse(lang, key, "a layer pattern the planner does not read")
    mixers = _mixers(lang, layers)
    widths = mlp_widths(lang, layers)
    return tuple(Layer(mixer, _mlp(cfg, i), intermediate=widths[i]) for i, mixer in enumerate(mixers))


def mlp_widths(lang: LanguageConfig, layers: int) -> list[int]:
    """Each layer's dense MLP width where the config sets it by layer, else 0 (the model's): an
    ``intermediate_size`` listed a layer each (Gemma 3n's MatFormer widths, Gemma3nTextConfig), refused
    unless it lists one whole number for each layer; and Gemma 4's ``use_double_wide_mlp``, twice the width
    on the layers that share their KV cache (``num_kv_shared_layers``)."""
    cfg = lang.fields
    listed = cfg.get("intermediate_size")
    widths = [0] * layers
    if isinstance(listed, Sequence) and not isinstance(listed, str):
        if len(listed) != layers or not all(type(w) is int and w > 0 for w in listed):
            raise _refuse(
                lang, "intermediate_size", f"a list must give one whole width for each of the {layers} layers"
            )
        widths = list(listed)
    shared = _int(cfg, "num_kv_shared_layers")
    if cfg.get("use_double_wide_mlp") is True and 0 < shared < layers:
        base = _int(cfg, "intermediate_size")
        widths = [(w or base) * 2 if i >= layers - shared else w for i, w in enumerate(widths)]
    return widths


def _mixers(lang: LanguageConfig, layers: int) -> list[Mixer]:
    cfg = lang.fields
    kinds = cfg.get("layer_types")
    deltanet = lang.model_type in GATED_DELTANET_TYPES
    granite = lang.model_type == "granitemoehybrid"
    if granite and kinds is None:
        # GraniteMoeHybridConfig leaves layer_types None when not given; the model then has no attention
        raise _refuse(lang, "layer_types", "missing: it says which layers are Mamba and which attention")
    if kinds is not None:
        if not isinstance(kinds, Sequence) or isinstance(kinds, str):
            raise _refuse(lang, "layer_types", "must be a list of layer kinds")
        if all(isinstance(kind, str) and kind in ATTENTION_KINDS for kind in kinds):
            return ["attention"] * layers  # which of them slide is read apart (planner.shape)
        if len(kinds) != layers:
            raise _refuse(lang, "layer_types", f"must list one kind for each of the {layers} layers")
        out: list[Mixer] = []
        for kind in kinds:
            if not isinstance(kind, str):
                raise _refuse(lang, "layer_types", f"a layer kind must be a name (given {kind!r})")
            if kind in ATTENTION_KINDS:
                out.append("attention")
            elif kind == "linear_attention" and deltanet:
                out.append("gated_deltanet")
            elif kind == "mamba" and granite:
                out.append("mamba2")
            elif kind == "conv" and lang.model_type == "lfm2":
                out.append("short_conv")  # Lfm2ShortConvDecoderLayer (vLLM's lfm2.py)
            else:
                raise _refuse(lang, "layer_types", f"a layer kind the planner does not read ({kind!r})")
        return out
    if deltanet:
        interval = cfg.get("full_attention_interval", 4)
        if isinstance(interval, bool) or not isinstance(interval, int) or interval <= 0:
            raise _refuse(lang, "full_attention_interval", f"must be a whole number above 0 (given {interval!r})")
        # Qwen3NextConfig: layer_types[i] = "full_attention" if (i + 1) % interval == 0
        return ["attention" if (i + 1) % interval == 0 else "gated_deltanet" for i in range(layers)]
    if cfg.get("full_attention_interval") is not None:
        raise _refuse(lang, "full_attention_interval", "a layer pattern the planner does not read")
    return ["attention"] * layers


EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
"""Where configs count a layer's routed experts: Mixtral and gpt-oss, Qwen-MoE, DeepSeek, ERNIE 4.5."""


def _mlp(cfg: Mapping[str, Any], i: int) -> Mlp:
    """Whether layer ``i`` of a mixture-of-experts model holds experts: DeepSeek's first
    ``first_k_dense_replace`` are dense, then every ``moe_layer_freq``-th (DeepseekV2DecoderLayer); Qwen-MoE's
    ``mlp_only_layers`` and those off its ``decoder_sparse_step`` are dense (Qwen2MoeDecoderLayer); Llama 4
    has experts on every ``interleave_moe_layer_step``-th (vLLM's Llama4DecoderLayer: ``(i + 1) % step ==
    0``); ERNIE 4.5 on the layers from ``moe_layer_start_index`` to ``moe_layer_end_index`` where ``(i + 1)
    % moe_layer_interval == 0`` (vLLM's Ernie4_5_MoeDecoderLayer)."""
    if not any(_int(cfg, name) for name in EXPERT_KEYS):
        return "dense"
    if _int(cfg, "moe_num_experts"):
        start = cfg.get("moe_layer_start_index", 0)
        end = cfg.get("moe_layer_end_index", i)
        inside = isinstance(start, int) and isinstance(end, int) and start <= i <= end
        return "moe" if inside and (i + 1) % _int(cfg, "moe_layer_interval", 1) == 0 else "dense"
    freq = cfg.get("moe_layer_freq")
    if isinstance(freq, Sequence) and not isinstance(freq, str):
        # MiMo-V2-Flash lists it a layer each: experts where it is 1 (vLLM's mimo_v2_flash.py)
        return "moe" if i < len(freq) and freq[i] else "dense"
    first = _int(cfg, "first_k_dense_replace")
    if first or "moe_layer_freq" in cfg:
        return "moe" if i >= first and i % _int(cfg, "moe_layer_freq", 1) == 0 else "dense"
    if "interleave_moe_layer_step" in cfg:
        step = _int(cfg, "interleave_moe_layer_step")
        return "moe" if step and (i + 1) % step == 0 else "dense"
    only = cfg.get("mlp_only_layers")
    if isinstance(only, Sequence) and not isinstance(only, str) and i in only:
        return "dense"
    return "moe" if (i + 1) % _int(cfg, "decoder_sparse_step", 1) == 0 else "dense"


SWA_SAME_AS_FULL = (
    ("swa_num_attention_heads", "num_attention_heads"),
    ("swa_head_dim", "head_dim"),
    ("swa_v_head_dim", "v_head_dim"),
)
"""MiMo-V2-Flash's sliding-layer sizes that the planner counts as the full layers' (a layer's heads and
head widths are the model's; only its KV heads may differ)."""


def _hybrid_layer_pattern(lang: LanguageConfig, layers: int) -> tuple[Layer, ...]:
    """MiMo-V2-Flash: ``hybrid_layer_pattern`` a layer each, 1 a sliding-window layer of
    ``swa_num_key_value_heads`` KV heads, 0 a full one of ``num_key_value_heads`` (vLLM's
    mimo_v2_flash.py and transformers' MiMoV2FlashAttention build them so). Refused where the sliding
    layers' query heads or head widths (``swa_*``) differ from the full layers'."""
    cfg = lang.fields
    pattern = cfg.get("hybrid_layer_pattern")
    if not isinstance(pattern, Sequence) or isinstance(pattern, str) or len(pattern) != layers:
        raise _refuse(lang, "hybrid_layer_pattern", f"must list one layer kind for each of the {layers} layers")
    for swa, full in SWA_SAME_AS_FULL:
        if cfg.get(swa) is not None and cfg.get(swa) != cfg.get(full):
            raise _refuse(lang, swa, f"{cfg.get(swa)!r} differs from {full} {cfg.get(full)!r}")
    full_heads = _int(cfg, "num_key_value_heads") or _int(cfg, "num_attention_heads")
    sliding_heads = _int(cfg, "swa_num_key_value_heads", full_heads)
    return tuple(
        Layer("attention", _mlp(cfg, i), kv_heads=sliding_heads if kind else full_heads)
        for i, kind in enumerate(pattern)
    )


def _nemotron_h(lang: LanguageConfig, layers: int) -> tuple[Layer, ...]:
    """Nemotron-H's blocks: ``hybrid_override_pattern`` a character each, or (NemotronHConfig of
    transformers v5) ``layers_block_type`` a name each: ``mamba``, ``attention``, ``mlp``, ``moe``."""
    cfg = lang.fields
    pattern = cfg.get("hybrid_override_pattern")
    named = cfg.get("layers_block_type")
    key = "hybrid_override_pattern"
    if not isinstance(pattern, str) and isinstance(named, Sequence) and not isinstance(named, str):
        pattern = "".join(NEMOTRON_H_NAMES.get(name, "?") if isinstance(name, str) else "?" for name in named)
        key = "layers_block_type"
    if not isinstance(pattern, str):
        raise _refuse(lang, key, "missing: it says which layers are Mamba, attention or MLP")
    if len(pattern) != layers:
        raise _refuse(lang, key, f"{len(pattern)} blocks for {layers} layers")
    unknown = sorted(set(pattern) - set(NEMOTRON_H_BLOCKS))
    if unknown:
        raise _refuse(lang, key, f"block kinds the planner does not read ({''.join(unknown)!r})")
    return tuple(NEMOTRON_H_BLOCKS[c] for c in pattern)


def _block_configs(lang: LanguageConfig, layers: int) -> tuple[Layer, ...]:
    """DeciLM (Llama-Nemotron): a block config per layer, as modeling_decilm.py builds it. Attention is
    skipped (``no_op``), one hidden x hidden matrix (``replace_with_linear``) or grouped attention of
    ``num_attention_heads / n_heads_in_group`` KV heads; the MLP likewise, of width
    ``_ffn_mult_to_intermediate_size``: ``2 * ffn_mult * hidden / 3`` rounded up to a multiple of 256."""
    cfg = lang.fields
    blocks = cfg.get("block_configs")
    if not isinstance(blocks, Sequence) or isinstance(blocks, str) or len(blocks) != layers:
        raise _refuse(lang, "block_configs", f"must list one block for each of the {layers} layers")
    heads, hidden = _int(cfg, "num_attention_heads"), _int(cfg, "hidden_size")
    out = []
    for i, block in enumerate(blocks):
        attention = block.get("attention") if isinstance(block, Mapping) else None
        ffn = block.get("ffn") if isinstance(block, Mapping) else None
        if not isinstance(attention, Mapping) or not isinstance(ffn, Mapping):
            raise _refuse(lang, f"block_configs[{i}]", "needs an attention and an ffn object")
        mixer: Mixer = "attention"
        kv_heads = 0
        if attention.get("no_op"):
            mixer = "none"
        elif attention.get("replace_with_linear"):
            mixer = "linear"
        else:
            group = _int(attention, "n_heads_in_group")
            if not group or not heads or heads % group:
                raise _refuse(lang, f"block_configs[{i}].attention.n_heads_in_group", f"must divide {heads} heads")
            kv_heads = heads // group
        mlp: Mlp = "dense"
        width = 0
        if ffn.get("no_op"):
            mlp = "none"
        elif ffn.get("replace_with_linear"):
            mlp = "linear"
        else:
            mult = ffn.get("ffn_mult")
            if isinstance(mult, bool) or not isinstance(mult, int | float) or not 0 < mult < 1 << 10:
                raise _refuse(lang, f"block_configs[{i}].ffn.ffn_mult", f"must be a positive number (given {mult!r})")
            width = -(-int(2 * mult * hidden / 3) // 256) * 256
        out.append(Layer(mixer, mlp, kv_heads=kv_heads, intermediate=width))
    return tuple(out)


def _jamba(lang: LanguageConfig, layers: int) -> tuple[Layer, ...]:
    """Jamba (JambaConfig.layers_block_type and layers_num_experts): layer ``i`` is attention where ``i %
    attn_layer_period == attn_layer_offset`` (defaults 8 and 4), else Mamba; it holds ``num_experts``
    experts where ``i % expert_layer_period == expert_layer_offset`` (defaults 2 and 1), else a dense
    MLP."""
    cfg = lang.fields
    sizes = {}
    for key, default in (
        ("attn_layer_period", 8),
        ("attn_layer_offset", 4),
        ("expert_layer_period", 2),
        ("expert_layer_offset", 1),
    ):
        value = cfg.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise _refuse(lang, key, f"must be a whole number (given {value!r})")
        sizes[key] = value
    if not sizes["attn_layer_period"] or not sizes["expert_layer_period"]:
        raise _refuse(lang, "attn_layer_period", "a period of 0 layers")
    experts = _int(cfg, "num_experts", 16) > 1
    return tuple(
        Layer(
            "attention" if i % sizes["attn_layer_period"] == sizes["attn_layer_offset"] else "mamba",
            "moe" if experts and i % sizes["expert_layer_period"] == sizes["expert_layer_offset"] else "dense",
        )
        for i in range(layers)
    )


def _kimi_linear(lang: LanguageConfig, layers: int) -> tuple[Layer, ...]:
    """Kimi Linear (KimiLinearConfig, vLLM's kimi_linear.py): ``linear_attn_config.kda_layers`` lists the
    Kimi Delta Attention layers counting from 1 (``is_kda_layer``: ``layer_idx + 1 in kda_layers``), the
    others MLA; experts as DeepSeek places them (``first_k_dense_replace``, ``moe_layer_freq``)."""
    cfg = lang.fields
    linear = cfg.get("linear_attn_config")
    listed = linear.get("kda_layers") if isinstance(linear, Mapping) else None
    if not isinstance(listed, Sequence) or isinstance(listed, str):
        raise _refuse(lang, "linear_attn_config.kda_layers", "missing: it says which layers are linear attention")
    if not all(type(i) is int and 1 <= i <= layers for i in listed):
        raise _refuse(lang, "linear_attn_config.kda_layers", f"must list layers from 1 to {layers}")
    return tuple(Layer("kda" if i + 1 in listed else "attention", _mlp(cfg, i)) for i in range(layers))


def _bamba(lang: LanguageConfig, layers: int) -> tuple[Layer, ...]:
    """Bamba (BambaConfig.layers_block_type): the layers ``attn_layer_indices`` lists are attention, the
    others Mamba-2 (of Granite 4.0-H's names, ``planner.mixers``); a dense MLP on every layer."""
    listed = lang.fields.get("attn_layer_indices")
    if not isinstance(listed, Sequence) or isinstance(listed, str):
        raise _refuse(lang, "attn_layer_indices", "missing: it says which layers are attention")
    if not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in listed):
        raise _refuse(lang, "attn_layer_indices", f"must list layers from 0 to {layers - 1}")
    return tuple(Layer("attention" if i in listed else "mamba2", "dense") for i in range(layers))
