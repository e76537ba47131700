"""The parts of a layer other than attention: a Mamba-2 mixer or a gated DeltaNet (linear attention), their
parameters as the transformers modeling code builds them and the fixed state per sequence that vLLM
keeps for them in place of a KV cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planner.configs import LanguageConfig
from planner.layers import Layer

STATE_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
"""The SSM state's bytes per value where the config names its dtype (``mamba_ssm_cache_dtype``, which
vLLM's NemotronH config hook copies into ``cache_config``; Qwen3.5's ``mamba_ssm_dtype``); else the
model's 16 bits, vLLM's ``auto``."""


def _int(cfg: Mapping[str, Any], name: str, default: int = 0) -> int:
    value = cfg.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def _mamba2(cfg: Mapping[str, Any]) -> tuple[int, int, int, int, int]:
    """A Mamba-2 mixer's sizes: heads, head width, state size, groups, convolution width. Nemotron-H
    (NemotronHConfig): ``mamba_num_heads``, ``mamba_head_dim``, ``ssm_state_size``, ``n_groups``,
    ``conv_kernel``. Granite 4.0-H (GraniteMoeHybridConfig): ``mamba_n_heads`` (128), ``mamba_d_head``
    (else the inner width ``mamba_expand x hidden`` over the heads), ``mamba_d_state`` (256),
    ``mamba_n_groups`` (1), ``mamba_d_conv`` (4). The inner width is heads x head width."""
    if "mamba_n_heads" in cfg or "mamba_d_state" in cfg:
        heads = _int(cfg, "mamba_n_heads", 128)
        # Falcon-H1's mamba_d_ssm where it gives one (FalconH1Config; vLLM's falcon_h1.py: d_ssm)
        inner = _int(cfg, "mamba_d_ssm") or _int(cfg, "mamba_expand", 2) * _int(cfg, "hidden_size")
        return (
            heads,
            _int(cfg, "mamba_d_head", inner // heads),
            _int(cfg, "mamba_d_state", 256),
            _int(cfg, "mamba_n_groups", 1),
            _int(cfg, "mamba_d_conv", 4),
        )
    return (
        _int(cfg, "mamba_num_heads", 128),
        _int(cfg, "mamba_head_dim", 64),
        _int(cfg, "ssm_state_size", 128),
        _int(cfg, "n_groups", 8),
        _int(cfg, "conv_kernel", 4),
    )


def _deltanet(cfg: Mapping[str, Any]) -> tuple[int, int, int, int, int]:
    """Qwen3-Next's gated DeltaNet sizes: key heads, key head width, value heads, value head width,
    convolution width (Qwen3NextConfig's ``linear_*`` fields and their defaults)."""
    return (
        _int(cfg, "linear_num_key_heads", 16),
        _int(cfg, "linear_key_head_dim", 128),
        _int(cfg, "linear_num_value_heads", 32),
        _int(cfg, "linear_value_head_dim", 128),
        _int(cfg, "linear_conv_kernel_dim", 4),
    )


def _kda(cfg: Mapping[str, Any]) -> tuple[int, int, int]:
    """Kimi Delta Attention's heads, head width and short-convolution width (``linear_attn_config``'s
    ``num_heads``, ``head_dim``, ``short_conv_kernel_size``; else the attention heads, 128 and 4)."""
    linear = cfg.get("linear_attn_config")
    linear = linear if isinstance(linear, Mapping) else {}
    return (
        _int(linear, "num_heads", _int(cfg, "num_attention_heads")),
        _int(linear, "head_dim", 128),
        _int(linear, "short_conv_kernel_size", 4),
    )


def _short_conv(cfg: Mapping[str, Any]) -> tuple[int, int]:
    """LFM2's short convolution: its width (``conv_dim``, else the hidden size) and length
    (``conv_L_cache``, Lfm2Config default 3)."""
    return _int(cfg, "conv_dim", _int(cfg, "hidden_size")), _int(cfg, "conv_L_cache", 3)


def _mamba1(cfg: Mapping[str, Any], hidden: int) -> tuple[int, int, int, int]:
    """Jamba's Mamba sizes: inner width (``mamba_expand`` x hidden), state size, convolution width, step
    rank (JambaConfig: ``mamba_d_state`` 16, ``mamba_d_conv`` 4, ``mamba_expand`` 2, ``mamba_dt_rank``
    ``ceil(hidden / 16)``)."""
    rank = cfg.get("mamba_dt_rank")
    dt_rank = rank if isinstance(rank, int) and not isinstance(rank, bool) and rank > 0 else -(-hidden // 16)
    return _int(cfg, "mamba_expand", 2) * hidden, _int(cfg, "mamba_d_state", 16), _int(cfg, "mamba_d_conv", 4), dt_rank


def mixer_params(cfg: Mapping[str, Any], layer: Layer, hidden: int) -> int:
    """A non-attention mixer's parameters; 0 for none.

    Mamba (JambaMambaMixer): ``in_proj`` to x and the gate, a depthwise ``conv1d``, ``x_proj`` to the
    step's rank and B and C, ``dt_proj``, ``A_log`` and ``D``, ``out_proj``. Mamba-2
    (NemotronHMamba2Mixer): ``in_proj`` to the gate, the convolved x, B and C, and a step per head; a
    depthwise ``conv1d`` over x, B and C; ``dt_bias``, ``A_log`` and ``D`` per head; a gated norm and
    ``out_proj``. Gated DeltaNet (Qwen3NextGatedDeltaNet): ``in_proj_qkvz`` and ``in_proj_ba``, a
    ``conv1d`` over q, k and v, ``dt_bias`` and ``A_log`` per value head, a norm of a head's width and
    ``out_proj``."""
    if layer.mixer == "mamba":
        inner, state, conv, rank = _mamba1(cfg, hidden)
        # in_proj (x and gate), conv1d, x_proj (step, B, C), dt_proj, A_log, D, out_proj, the step's and B's
        # and C's norms (JambaMambaMixer)
        return (
            hidden * 2 * inner
            + inner * (conv + 1)
            + inner * (rank + 2 * state)
            + rank * inner
            + inner
            + inner * state
            + inner
            + inner * hidden
            + rank
            + 2 * state
        )
    if layer.mixer == "mamba2":
        heads, head_dim, state, groups, conv = _mamba2(cfg)
        inner = heads * head_dim
        conv_dim = inner + 2 * groups * state
        return hidden * (inner + conv_dim + heads) + conv_dim * (conv + 1) + 3 * heads + inner + inner * hidden
    if layer.mixer == "gated_deltanet":
        k_heads, k_dim, v_heads, v_dim, conv = _deltanet(cfg)
        key, value = k_heads * k_dim, v_heads * v_dim
        conv_dim = 2 * key + value
        return hidden * (2 * key + 2 * value + 2 * v_heads) + conv_dim * conv + 2 * v_heads + v_dim + value * hidden
    if layer.mixer == "kda":
        # KimiDeltaAttention (vLLM's layers/kda.py): q, k, v and o projections of heads x head width; the
        # decay gate through f_a/f_b and the output gate through g_a/g_b (low rank of a head's width); b_proj
        # a value per head; a short convolution over each of q, k and v; A_log per head, dt_bias per value;
        # the output norm of a head's width
        heads, dim, conv = _kda(cfg)
        inner = heads * dim
        return (
            4 * hidden * inner
            + 2 * (hidden * dim + dim * inner)
            + hidden * heads
            + 3 * inner * conv
            + heads
            + inner
            + dim
        )
    if layer.mixer == "short_conv":
        # ShortConv (vLLM's layers/mamba/short_conv.py): in_proj to B, C and x, a depthwise conv, out_proj
        width, length = _short_conv(cfg)
        return hidden * 3 * width + width * length + width * hidden
    if layer.mixer == "linear":
        return hidden * hidden
    return 0


def state_bytes_per_sequence(lang: LanguageConfig, plan: tuple[Layer, ...]) -> int:
    """The fixed state one sequence keeps in the non-attention layers, as vLLM allocates it
    (``MambaStateShapeCalculator``, vllm/model_executor/layers/mamba/mamba_utils.py): Mamba a convolution
    state of ``(conv_kernel - 1) x inner`` and an SSM state of ``inner x state``; Mamba-2 a
    convolution state of ``(conv_kernel - 1) x (inner + 2 x groups x state)`` and an SSM state of
    ``heads x head_dim x state``; a gated DeltaNet a convolution state of ``(conv_kernel - 1) x (2 x key
    + value)`` and a recurrent state of ``value heads x key head width x value head width``. The
    convolution state is in the model's 16 bits, the SSM state as ``STATE_DTYPE_BYTES`` says."""
    cfg = lang.fields
    ssm_dtype = cfg.get("mamba_ssm_cache_dtype") or cfg.get("mamba_ssm_dtype")
    ssm_bytes = STATE_DTYPE_BYTES.get(ssm_dtype, 2) if isinstance(ssm_dtype, str) else 2
    total = 0
    for part in plan:
        layers = (part, Layer(part.beside)) if part.beside != "none" else (part,)
        total += sum(_state(cfg, layer, ssm_bytes) for layer in layers)
    return total


def _state(cfg: Mapping[str, Any], layer: Layer, ssm_bytes: int) -> int:
    """One layer's state per sequence (``state_bytes_per_sequence``); Kimi Delta Attention's recurrent
    state in float32 (vLLM's ``kda_state_dtype``), its three convolution states in the model's 16 bits;
    LFM2's short convolution ``(conv_L_cache - 1) x conv_dim`` (``short_conv_state_shape``)."""
    if layer.mixer == "mamba":
        inner, state, conv, _ = _mamba1(cfg, _int(cfg, "hidden_size"))
        return (conv - 1) * inner * 2 + inner * state * ssm_bytes
    if layer.mixer == "mamba2":
        heads, head_dim, state, groups, conv = _mamba2(cfg)
        inner = heads * head_dim
        return (conv - 1) * (inner + 2 * groups * state) * 2 + heads * head_dim * state * ssm_bytes
    if layer.mixer == "gated_deltanet":
        k_heads, k_dim, v_heads, v_dim, conv = _deltanet(cfg)
        return (conv - 1) * (2 * k_heads * k_dim + v_heads * v_dim) * 2 + v_heads * k_dim * v_dim * ssm_bytes
    if layer.mixer == "kda":
        heads, dim, conv = _kda(cfg)
        return 3 * (conv - 1) * heads * dim * 2 + heads * dim * dim * 4
    if layer.mixer == "short_conv":
        width, length = _short_conv(cfg)
        return (length - 1) * width * 2
    return 0
