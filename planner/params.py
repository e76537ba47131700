"""A model's parameter count from its config's shapes, for when neither the safetensors headers nor the
index's total size and a 16-bit dtype tell it (quantised originals, listings without an index).

Counted: the embeddings (and the output head unless tied), each layer's attention (standard, grouped,
multi-query or DeepSeek's MLA) and MLP (dense, or routed experts with shared experts and the router), and
a vision tower and projector where the config has one, and two norms a layer and a final one (a Llama's
count is then exact). Biases and any further norms are left out: well under 0.1% of any model here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planner.caches import full_flags
from planner.configs import LanguageConfig
from planner.layers import EXPERT_KEYS, Layer, layer_plan
from planner.mixers import mixer_params

UNGATED_MLP = frozenset(
    {"gpt2", "gptj", "gpt_neox", "falcon", "RefinedWeb", "RefinedWebModel", "gpt_bigcode", "starcoder2"}
    | {"nemotron", "nemotron_h", "phi"}
)
"""Model types whose MLP is two matrices (up, down) rather than three (gate, up, down): StarCoder2's
``c_fc``/``c_proj`` (Starcoder2MLP), Nemotron's squared-ReLU ``up_proj``/``down_proj`` (NemotronMLP,
NemotronHMLP and its experts), Phi's ``fc1``/``fc2`` (PhiMLP, modeling_phi.py)."""

HALVED_MLP = frozenset({"qwen"})
"""Model types whose ``intermediate_size`` is twice each MLP matrix's width: QWen v1's ``w1`` and ``w2``
are ``intermediate_size // 2`` wide and ``c_proj`` takes that width back (QWenMLP, Qwen's
modeling_qwen.py; vLLM's qwen.py builds ``QWenMLP(hidden_size, intermediate_size // 2)``)."""


def _int(cfg: Mapping[str, Any], name: str, default: int = 0) -> int:
    value = cfg.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def vision_params(lang: LanguageConfig) -> int:
    """The vision tower's and projector's parameters; 0 without a ``vision_config``."""
    return _vision(lang.top, _int(lang.fields, "hidden_size"))


def vision_hidden(lang: LanguageConfig) -> int:
    """The vision tower's width (``vision_config``'s ``hidden_size``, ``embed_dim`` for Qwen2-VL's,
    ``vt_hidden_size`` for MoonViT); 0 without one."""
    vision = lang.top.get("vision_config")
    if not isinstance(vision, Mapping):
        return 0
    return _int(vision, "hidden_size") or _int(vision, "embed_dim") or _int(vision, "vt_hidden_size")


def mlp_width(lang: LanguageConfig) -> int:
    """Each dense MLP matrix's width (``intermediate_size``, four times the hidden size where the config
    gives none; Llama 4's dense ``intermediate_size_mlp``, QWen v1's half, Granite 4.0-H's shared one); 0
    without a hidden size."""
    cfg = lang.fields
    hidden = _int(cfg, "hidden_size")
    if not hidden:
        return 0
    listed = cfg.get("intermediate_size")
    if isinstance(listed, list) and listed and all(type(w) is int and w > 0 for w in listed):
        listed = max(listed)  # Gemma 3n's widths a layer each: the widest bounds a split
    width = _int(cfg, "intermediate_size_mlp") or _int({"intermediate_size": listed}, "intermediate_size", 4 * hidden)
    if lang.model_type in HALVED_MLP:
        width //= 2
    if lang.model_type == "lfm2" and cfg.get("block_auto_adjust_ff_dim"):
        width = lfm2_width(cfg, width)
    if lang.model_type == "granitemoehybrid":  # its dense MLP is the shared one every layer has
        width = _int(cfg, "shared_intermediate_size", width)
    return width


def lfm2_width(cfg: Mapping[str, Any], width: int) -> int:
    """LFM2's MLP width where ``block_auto_adjust_ff_dim`` is set (Lfm2MLP, vLLM's lfm2.py): two thirds of
    the configured width, times ``block_ffn_dim_multiplier``, rounded up to ``block_multiple_of``."""
    width = int(2 * width / 3)
    multiplier = cfg.get("block_ffn_dim_multiplier")
    if isinstance(multiplier, int | float) and not isinstance(multiplier, bool) and 0 < multiplier < 1 << 10:
        width = int(multiplier * width)
    multiple = _int(cfg, "block_multiple_of", 256)
    return multiple * -(-width // multiple)


def params_from_config(lang: LanguageConfig, kv_heads: int, plan: tuple[Layer, ...] = ()) -> int:
    """The parameter count from the shapes, layer by layer as ``plan`` has them (``planner.layers``; empty:
    read from the config); 0 when a shape it needs is missing."""
    cfg = lang.fields
    hidden, layers, heads = _int(cfg, "hidden_size"), _int(cfg, "num_hidden_layers"), _int(cfg, "num_attention_heads")
    vocab = _int(cfg, "vocab_size")
    if not (hidden and layers and heads and vocab):
        return 0
    plan = plan or layer_plan(lang, layers)
    head_dim = _int(cfg, "head_dim", hidden // heads)
    embed = vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2)
    mats = 2 if lang.model_type in UNGATED_MLP else 3
    dense_inter = mlp_width(lang)
    moe = _moe(lang, hidden, mats) if any(layer.mlp == "moe" for layer in plan) else 0
    total = embed + (2 * len(plan) + 1) * hidden + _vision(lang.top, hidden) + _per_layer_inputs(cfg, hidden, len(plan))
    full = full_flags(lang, len(plan))
    global_heads, global_dim = _int(cfg, "num_global_key_value_heads"), _int(cfg, "global_head_dim")
    for i, layer in enumerate(plan):
        if layer.mixer == "attention" and full[i] and (global_heads or global_dim):
            # Gemma 4's full layers: their own KV heads and head width (planner.caches)
            total += _attention(cfg, hidden, heads, global_heads or kv_heads, global_dim or head_dim)
        elif layer.mixer == "attention":
            total += _attention(cfg, hidden, heads, layer.kv_heads or kv_heads, head_dim)
            if cfg.get("attn_output_gate", lang.model_type == "qwen3_next"):
                total += hidden * heads * head_dim  # Qwen3-Next's gated attention: q_proj doubled for the gate
        else:
            total += mixer_params(cfg, layer, hidden)
        if layer.beside != "none":
            total += mixer_params(cfg, Layer(layer.beside), hidden)
        if layer.mlp == "dense":
            total += mats * hidden * (layer.intermediate or dense_inter)
        elif layer.mlp == "moe":
            total += moe
        elif layer.mlp == "linear":
            total += hidden * hidden
    return total


def _per_layer_inputs(cfg: Mapping[str, Any], hidden: int, layers: int) -> int:
    """Gemma 3n's parts beside its layers (Gemma3nTextModel, vLLM's gemma3n.py): per-layer embeddings
    (``embed_tokens_per_layer``, ``vocab_size_per_layer_input`` x layers x ``hidden_size_per_layer_input``)
    and their projection from the hidden state, each layer's gate into and projection out of them; each
    layer's LAuReL block (two matrices through ``laurel_rank``) and AltUp router; the AltUp projections
    in and out (``altup_num_inputs - 1`` each way). 0 for a model without them."""
    per_layer = _int(cfg, "hidden_size_per_layer_input")
    total = 0
    if per_layer:
        vocab = _int(cfg, "vocab_size_per_layer_input") or _int(cfg, "vocab_size")
        total += vocab * layers * per_layer + hidden * layers * per_layer + layers * 2 * hidden * per_layer
    total += layers * 2 * hidden * _int(cfg, "laurel_rank")
    streams = _int(cfg, "altup_num_inputs")
    if streams > 1:
        total += 2 * (streams - 1) * hidden * hidden + layers * (hidden * streams + streams**3 + streams**2)
    return total


def _moe(lang: LanguageConfig, hidden: int, mats: int) -> int:
    """One mixture-of-experts layer: the routed experts, the router and the shared experts (Qwen-MoE's
    ``shared_expert_intermediate_size`` and its gate; DeepSeek's ``n_shared_experts`` of the experts'
    width, Nemotron-H's of ``moe_shared_expert_intermediate_size``; Llama 4's one of
    ``intermediate_size``; Granite 4.0-H's shared MLP of ``shared_intermediate_size``)."""
    cfg = lang.fields
    experts = next((n for n in (_int(cfg, name) for name in EXPERT_KEYS) if n), 0)
    moe_inter = _int(cfg, "moe_intermediate_size") or _int(cfg, "intermediate_size", 4 * hidden)
    latent = _int(cfg, "moe_latent_size")
    # Nemotron 3's latent experts work in moe_latent_size, projected from and back to the hidden width
    moe = experts * mats * (latent or hidden) * moe_inter + hidden * experts + 2 * hidden * latent
    shared = _int(cfg, "shared_expert_intermediate_size")
    if shared:
        moe += 3 * hidden * shared + hidden
    if lang.model_type == "llama4_text":
        moe += 3 * hidden * moe_inter
    if lang.model_type == "granitemoehybrid":  # GraniteMoeHybridMLP beside the experts, on every layer
        moe += 3 * hidden * _int(cfg, "shared_intermediate_size")
    shared_width = _int(cfg, "moe_shared_expert_intermediate_size", moe_inter)
    # ERNIE 4.5's moe_num_shared_experts, of the experts' width (Ernie4_5_MoeMoE, vLLM's ernie45_moe.py)
    # and Kimi Linear's num_shared_experts (KimiMoE, vLLM's kimi_linear.py)
    shared_count = _int(cfg, "n_shared_experts") or _int(cfg, "moe_num_shared_experts")
    if lang.model_type == "kimi_linear":
        shared_count = shared_count or _int(cfg, "num_shared_experts")
    return moe + shared_count * mats * hidden * shared_width


def _attention(cfg: Mapping[str, Any], hidden: int, heads: int, kv_heads: int, head_dim: int) -> int:
    kv_lora = _int(cfg, "kv_lora_rank") if cfg.get("use_mla") is not False else 0
    if kv_lora:  # MLA: DeepseekV3Attention's q_a/q_b (or q), kv_a, kv_b and o projections
        rope, nope = _int(cfg, "qk_rope_head_dim"), _int(cfg, "qk_nope_head_dim")
        v_dim = _int(cfg, "v_head_dim", nope)
        q_lora = _int(cfg, "q_lora_rank")
        q = hidden * q_lora + q_lora * heads * (nope + rope) if q_lora else hidden * heads * (nope + rope)
        return q + hidden * (kv_lora + rope) + kv_lora * heads * (nope + v_dim) + heads * v_dim * hidden
    # values of their own width where the config says (MiMo-V2-Flash: v_proj and o_proj of v_head_dim,
    # MiMoV2FlashAttention)
    v_dim = _int(cfg, "v_head_dim", head_dim)  # 0 or null: no width of its own
    return hidden * heads * (head_dim + v_dim) + hidden * kv_heads * (head_dim + v_dim)


def _vision(config: Mapping[str, Any], text_hidden: int) -> int:
    """A vision tower's parameters and its projector into the language model: a ViT of
    ``num_hidden_layers`` (Qwen2-VL: ``depth``; Mllama: plus ``num_global_layers``) blocks of attention
    (four d x d matrices) and an MLP, with the patch embedding; 0 when there is no ``vision_config``."""
    vision = config.get("vision_config")
    if not isinstance(vision, Mapping):
        return 0
    # Kimi-K2.5's MoonViT names its fields vt_*
    d = _int(vision, "embed_dim") or _int(vision, "hidden_size") or _int(vision, "vt_hidden_size")
    blocks = _int(vision, "depth") or _int(vision, "num_hidden_layers") or _int(vision, "vt_num_hidden_layers")
    blocks += _int(vision, "num_global_layers")
    if not d or not blocks:
        return 0
    inter = (
        _int(vision, "intermediate_size") or _int(vision, "vt_intermediate_size") or d * _int(vision, "mlp_ratio", 4)
    )
    gated = vision.get("hidden_act") == "silu"  # Qwen2.5-VL's vision MLP is gated (SwiGLU)
    patch = _int(vision, "patch_size", 14)
    temporal = _int(vision, "temporal_patch_size", 1)
    tower = blocks * (4 * d * d + (3 if gated else 2) * d * inter) + 3 * temporal * patch * patch * d
    merge = _int(vision, "spatial_merge_size")
    if merge:  # Qwen2-VL's merger: an MLP from merge^2 patches to the language model's width
        wide = d * merge * merge
        return tower + wide * wide + wide * (_int(vision, "out_hidden_size") or _int(vision, "hidden_size"))
    out = _int(vision, "vision_output_dim")
    if out:  # Mllama: the concatenated layer outputs projected to the text width
        return tower + out * text_hidden
    return tower + d * text_hidden + text_hidden * text_hidden  # LLaVA's two-layer projector
