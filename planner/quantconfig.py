"""What an original's safetensors weights are: 16-bit, or quantised as its ``quantization_config`` (in
``config.json``) or ModelOpt's ``hf_quant_config.json`` says.

The name is what a person reads in a plan (``fp8``, ``awq-int4``, ``gptq-int4``, ``mxfp4``); the bits are
the quantised layers' nominal precision, scales included, used only where the parameter count is unknown
(with it, bits per weight are the files' bits over the parameters, which counts the layers left in 16
bits too).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planner.configs import nested_language

ORIGINAL_BITS: dict[str, float] = {
    "fp32": 16,  # vLLM loads a float32 checkpoint in 16 bits (dtype "auto")
    "bf16": 16,
    "fp16": 16,
    "fp8": 8,
    "int8": 8,
    "bnb-int8": 8,
    "int4": 4.25,
    "awq-int4": 4.25,  # 4 bits and a 16-bit scale per group of 128 (AutoAWQ's default group size)
    "gptq-int4": 4.25,
    "gptq-int8": 8.25,
    "bnb-nf4": 4.25,
    "mxfp4": 4.25,  # 4 bits and an 8-bit scale per block of 32 (OCP MX specification)
    "nvfp4": 4.5,  # 4 bits and an 8-bit scale per block of 16 (ModelOpt NVFP4)
}
"""Nominal bits per weight of an original's quantisation, for when its parameter count is unknown."""

BNB_4BIT = "bnb-nf4"
"""bitsandbytes 4-bit (``load_in_4bit``), whose forward pass dequantises each weight before its matmul."""

_DTYPES = {"float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16"}
_MODELOPT_ALGOS = {"FP8": "fp8", "NVFP4": "nvfp4", "W4A16_AWQ": "awq-int4", "W4A8_AWQ": "awq-int4", "INT8_SQ": "int8"}


def config_dtype(config: Mapping[str, Any]) -> str:
    """The weights' dtype by ``torch_dtype`` (newer configs: ``dtype``), here or in the nested language
    model's config (``text_config``, ``llm_config``, ``language_config``), as ``bf16``, ``fp16`` or
    ``fp32``; ``""`` when the config names none."""
    dtype = config.get("torch_dtype") or config.get("dtype")
    _, text = nested_language(config)
    if dtype is None and text is not None:
        dtype = text.get("torch_dtype") or text.get("dtype")
    return _DTYPES.get(str(dtype), "")


def original_quant(config: Mapping[str, Any], hf_quant: Any = None) -> str:
    """What an original's weights are: a quantisation's name when ``quantization_config`` or
    ``hf_quant_config.json`` (``hf_quant``) says one, else the dtype (``bf16`` when none is named)."""
    q = config.get("quantization_config")
    _, text = nested_language(config)
    if q is None and text is not None:
        q = text.get("quantization_config")
    if isinstance(q, Mapping):
        return _from_quantization_config(q)
    if isinstance(hf_quant, Mapping):
        quantization = hf_quant.get("quantization")
        algo = quantization.get("quant_algo") if isinstance(quantization, Mapping) else None
        if isinstance(algo, str):
            return _MODELOPT_ALGOS.get(algo.upper(), algo.lower())
    return config_dtype(config) or "bf16"


def is_quantised(quant: str) -> bool:
    """Whether an original's quant is a quantisation rather than a float dtype."""
    return quant not in ("bf16", "fp16", "fp32")


def _whole(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 64 else default


def _from_quantization_config(q: Mapping[str, Any]) -> str:
    method = str(q.get("quant_method") or "").lower()
    bits = _whole(q.get("bits") or q.get("w_bit") or q.get("weight_bits"), 4)
    if method in ("fp8", "fbgemm_fp8"):
        return "fp8"
    if method == "awq":
        return f"awq-int{bits}"
    if method in ("gptq", "gptq_marlin", "auto-round", "autoround"):
        return f"gptq-int{bits}"
    if method == "mxfp4":
        return "mxfp4"
    if method == "bitsandbytes":
        return BNB_4BIT if q.get("load_in_4bit") else "bnb-int8"
    if method == "modelopt":
        algo = q.get("quant_algo")
        return _MODELOPT_ALGOS.get(str(algo).upper(), str(algo).lower()) if algo else "modelopt"
    if method == "compressed-tensors":
        return _compressed_tensors(q)
    return method or "quantised"


def _compressed_tensors(q: Mapping[str, Any]) -> str:
    """compressed-tensors (llm-compressor's format): the first config group's weights, ``float`` of 8 bits
    (FP8), ``float`` of 4 (NVFP4) or ``int`` of N bits."""
    groups = q.get("config_groups")
    if isinstance(groups, Mapping):
        for group in groups.values():
            weights = group.get("weights") if isinstance(group, Mapping) else None
            if isinstance(weights, Mapping):
                bits = _whole(weights.get("num_bits"), 8)
                if weights.get("type") == "float":
                    return "fp8" if bits == 8 else "nvfp4" if bits == 4 else f"fp{bits}"
                return f"int{bits}"
    return "compressed-tensors"


def original_bits(quant: str) -> float:
    """Nominal bits per weight of an original's quant; 0 when unknown."""
    return ORIGINAL_BITS.get(quant, 0.0)
