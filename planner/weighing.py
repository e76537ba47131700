"""Where the weights correct the config's arithmetic: the parameter count, the KV cache, the bits.

A config says what a family's rules make of it; the weights' headers (``planner.weights``) say what the
files hold. Where both are at hand and they disagree, the weights win, and the repository says so in its
``notes``. Without headers the files' sizes still tell one thing: an original whose files hold half the
bytes its config's dtype implies (an FP8 checkpoint whose quantisation only ``hf_quant_config.json``
describes) is planned at the bits its bytes give, not at the dtype's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from planner.caches import first_shared
from planner.configs import language_config
from planner.constants import KV_BYTES_PER_ELEMENT
from planner.errors import InvalidInput
from planner.model import Artifact, Shape
from planner.quant import bits_of
from planner.quantconfig import config_dtype, is_quantised, original_quant
from planner.shape import shape_from_config
from planner.weights import WeightsReading, kv_layers_by_name

BYTES_TRUSTED = 0.7
"""How far below the config's dtype the files' bytes a parameter may fall before the dtype is doubted:
between 8-bit weights (0.5 of 16) and 16-bit ones with the layers a count leaves out."""

_DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}

MIN_BITS = 1.0
"""Fewer bits a weight than any format stores (llama.cpp's smallest type, IQ1_S, holds 1.5625): a reading
that gives fewer counted parameters the files do not hold."""

MAX_BITS = 40.0
"""More bits a weight than any format stores (float32 is 32, a quantisation's scales add a few): a reading
that gives more missed parameters the files hold."""

OVER_BITS = 1.25
"""How far past the widest dtype its config names (the dtype, or 16 bits for the layers a quantised model
keeps unquantised) the files' bits a weight may go before the config's count is doubted: what a count
leaves out (biases, norms, a multi-token-prediction layer) is well under a quarter of any model."""

COUNT_AGREES = 0.1
"""How far the config's count may stray from the headers' before a note says the config has parts the
reader does not count (a vision tower's projector or an audio tower counted roughly stays within it)."""


def dtype_bytes(config: Mapping[str, Any], hf_quant: Any = None) -> int:
    """Bytes per weight of unquantised original weights by ``torch_dtype`` (newer configs: ``dtype``); 0
    when unknown or when the weights are quantised (``quantization_config``, ``hf_quant_config.json``)."""
    if is_quantised(original_quant(config, hf_quant)):
        return 0
    return _DTYPE_BYTES.get(config_dtype(config), 0)


def params_from_index(index: Any, config: Mapping[str, Any], hf_quant: Any = None) -> int:
    """The parameter count from ``model.safetensors.index.json``'s ``metadata.total_size`` (bytes) and the
    weights' dtype; 0 when either is unknown."""
    width = dtype_bytes(config, hf_quant)
    meta = index.get("metadata") if isinstance(index, Mapping) else None
    total = meta.get("total_size") if isinstance(meta, Mapping) else None
    if not width or isinstance(total, bool) or not isinstance(total, int | float) or not 0 < total < 1 << 60:
        return 0
    return int(total) // width


Notes = tuple[str, ...]
"""Where the weights corrected the config's arithmetic, one line each; empty where nothing did."""


def shape_of(
    config: Any, index: Any, hf_quant: Any, original_bytes: int, reading: WeightsReading | None, source: str
) -> tuple[Shape, Notes]:
    """The shape by the config, its parameters from the weights' headers where they tell them, else from
    the index's total (unless the files' sizes belie the config's dtype), else from the config's shapes;
    and the notes on what the weights corrected."""
    if not isinstance(config, Mapping):
        return shape_from_config(config, source=source), ()
    counted = shape_from_config(config, source=source)
    if reading is not None:
        reading = _own_caches(reading, config, source)
    if reading is not None and reading.params:
        shape, notes = with_weights(counted, reading)
        # the headers' own bytes where they tell them: the files hold the headers' JSON besides
        check_bits(shape.params, reading.bytes or original_bytes, config, hf_quant, source, "the safetensors headers")
        return shape, (*notes, *_count_note(counted.params, reading.params))
    params = params_from_index(index, config, hf_quant)
    shape = replace(counted, params=params or counted.params)
    shape, notes = against_files(shape, counted.params, original_bytes, dtype_bytes(config, hf_quant))
    check_bits(shape.params, original_bytes, config, hf_quant, source, _counted_by(params, shape.params))
    if reading is None:
        shape, named = by_names(shape, index)
        return shape, (*notes, *named)
    shape, more = with_weights(shape, reading)
    return shape, (*notes, *more)


def _own_caches(reading: WeightsReading, config: Mapping[str, Any], source: str) -> WeightsReading:
    """``reading`` without the key/value projections of layers that keep no cache of their own: Gemma 3n's
    last ``num_kv_shared_layers`` hold k_proj and v_proj but read the cache of an earlier layer
    (``planner.caches``)."""
    first = first_shared(language_config(config, source), reading.layers) if reading.layers else 0
    if not first or first >= reading.layers:
        return reading
    return replace(
        reading,
        kv_layers=tuple(i for i in reading.kv_layers if i < first),
        kv_widths=tuple((i, w) for i, w in reading.kv_widths if i < first),
    )


GGUF_OVER_NOMINAL = 2.0
"""How far past its quantisation's nominal bits (``Q4_K_M`` 4.8) a GGUF file's bits a weight may go by
the config's count before the count is doubted: llama.cpp keeps the embeddings and output of a small
model in wider types (Q6_K, Q8_0), which lifts a 0.5B model's Q4_K_M to about 6."""


def check_gguf_bits(artifacts: Sequence[Artifact], shape: Shape, source: str) -> None:
    """Refuse, in one line, GGUF files whose bytes put the config's count (less a vision tower, which
    llama.cpp keeps in its projector file) at bits a weight no format stores, or at more than
    ``GGUF_OVER_NOMINAL`` times (plus one) the bits their quantisation names."""
    params = shape.params - shape.vision_params
    if params <= 0:
        return
    for a in artifacts:
        if a.format != "gguf" or not a.bytes:
            continue
        bits = a.bytes * 8 / params
        nominal = bits_of(a.quant)
        ceiling = min(MAX_BITS, GGUF_OVER_NOMINAL * nominal + 1) if nominal else MAX_BITS
        if MIN_BITS <= bits <= ceiling:
            continue
        named = f"past the {ceiling:g} its quant {a.quant} allows" if nominal else f"past the {MAX_BITS:g} any format"
        bound = f"under the {MIN_BITS:g} any format stores" if bits < MIN_BITS else named
        raise InvalidInput(
            source,
            "(weights)",
            f"the config's shapes give {params:,} parameters and {a.name} holds {a.bytes:,} bytes: "
            f"{bits:.1f} bits a weight, {bound}; the config and the weights disagree (read the shape from "
            "the GGUF file's own header)",
        )


def _counted_by(index_params: int, params: int) -> str:
    return "the index's total" if index_params and params == index_params else "the config's shapes"


def _count_note(counted: int, params: int) -> Notes:
    """A note where the config's shapes count the parameters far from the headers (which win)."""
    if not counted or abs(counted - params) <= COUNT_AGREES * params:
        return ()
    return (
        f"parameters from the weights' headers: {params:,}; the config's shapes count {counted:,} "
        f"({counted / params:.0%} of them): the config's reading and the weights disagree, and the weights win",
    )


def bits_allowed(config: Mapping[str, Any], hf_quant: Any = None) -> tuple[float, str]:
    """The most bits a weight the original's files may hold by what its config names, and that name: its
    dtype's bits (``OVER_BITS`` past them), 16 bits' for a quantised model, float32's where it names
    neither; never past ``MAX_BITS``."""
    quant = original_quant(config, hf_quant)
    width = dtype_bytes(config, hf_quant) * 8
    if is_quantised(quant):
        width, name = 16, f"its quantisation {quant} (16 bits for the layers it leaves)"
    elif width:
        name = f"its dtype {config_dtype(config)}"
    else:
        width, name = 32, "float32 (it names no dtype)"
    return min(MAX_BITS, width * OVER_BITS), name


def check_bits(
    params: int, files_bytes: int, config: Mapping[str, Any], hf_quant: Any, source: str, counted_by: str
) -> None:
    """Refuse, in one line, a parameter count that puts the original's files at bits a weight no format
    stores (under ``MIN_BITS``) or past what the config's dtype or quantisation allows
    (``bits_allowed``): the config has parts the reader does not count, or counts parts that are not
    there, and a plan at that precision would be wrong. Nothing to check without both."""
    if not params or not files_bytes:
        return
    bits = files_bytes * 8 / params
    ceiling, name = bits_allowed(config, hf_quant)
    if MIN_BITS <= bits <= ceiling:
        return
    bound = f"under the {MIN_BITS:g} any format stores" if bits < MIN_BITS else f"past the {ceiling:g} {name} allows"
    ask = "" if "headers" in counted_by else " (pass the safetensors headers to count from the weights)"
    raise InvalidInput(
        source,
        "(weights)",
        f"{counted_by} give {params:,} parameters and the original's files hold {files_bytes:,} bytes: "
        f"{bits:.1f} bits a weight, {bound}; the config and the weights disagree{ask}",
    )


def with_weights(shape: Shape, reading: WeightsReading) -> tuple[Shape, Notes]:
    """``shape`` with the weights' parameter count, and their KV cache where it differs from the config's
    arithmetic: the widths of their key/value projections where each KV layer's is known, else the
    config's per-layer bytes over the layers that carry one. Sliding-window bytes follow in proportion."""
    notes: list[str] = []
    kv, windows = shape.kv_bytes_per_token, shape.windows
    count = len(reading.kv_layers)
    if count and shape.layers and kv:
        values = reading.kv_values_per_token
        new = values * KV_BYTES_PER_ELEMENT if values else kv * count // shape.layers
        if new != kv:
            held = f"{count} of {reading.layers} layers hold key/value projections"
            if values:
                held += f", {values:,} values a token by their shapes"
            notes.append(
                f"KV cache from the weights' headers: {new:,} bytes a token ({held}); the config's arithmetic "
                f"gave {kv:,} over {shape.layers} layers"
            )
            windows = tuple((w, b * new // kv) for w, b in windows)
            kv = new
    shape = replace(shape, params=reading.params or shape.params, kv_bytes_per_token=kv, windows=windows)
    return shape, (*notes, *reading.notes)


def by_names(shape: Shape, index: Any) -> tuple[Shape, Notes]:
    """``shape`` with its KV cache over the layers the index's tensor names show a key/value projection in,
    where those are fewer than the config's arithmetic counted (a hybrid whose config the reader took for
    a plain decoder): the names win, and a note says so. Without names, or where every layer has one, as
    it was."""
    weight_map = index.get("weight_map") if isinstance(index, Mapping) else None
    if not isinstance(weight_map, Mapping) or not shape.layers or not shape.kv_bytes_per_token:
        return shape, ()
    layers, kv_layers = kv_layers_by_name(weight_map)
    counted = shape.attention_layers or shape.layers  # the layers the config's arithmetic gave a cache
    if not kv_layers or len(kv_layers) >= counted or layers != shape.layers:
        return shape, ()
    kv = shape.kv_bytes_per_token * len(kv_layers) // counted
    note = (
        f"KV cache from the index's tensor names: {kv:,} bytes a token ({len(kv_layers)} of {layers} layers hold "
        f"key/value projections); the config's arithmetic gave {shape.kv_bytes_per_token:,} over {counted}"
    )
    windows = tuple((w, b * len(kv_layers) // counted) for w, b in shape.windows)
    return replace(shape, kv_bytes_per_token=kv, windows=windows, attention_layers=len(kv_layers)), (note,)


def against_files(shape: Shape, counted: int, files_bytes: int, dtype_bytes: int) -> tuple[Shape, Notes]:
    """``shape`` (its parameters from the index's total over the config's dtype, or from the config's
    shapes) checked against the original's files: where they hold well under ``dtype_bytes`` a parameter
    of the ``counted`` (the config's shapes), the index's total is no 16-bit count and the parameters are
    the counted ones, so that the bits per weight follow the bytes; a note says so."""
    if not dtype_bytes or not counted or not files_bytes:
        return shape, ()
    params = shape.params if shape.params >= BYTES_TRUSTED * counted else counted
    bits = files_bytes * 8 / params
    if bits >= BYTES_TRUSTED * dtype_bytes * 8:
        return replace(shape, params=params), ()
    note = (
        f"the original's files hold {bits:.1f} bits a weight, not the {dtype_bytes * 8} of the config's dtype: "
        "a quantisation its config.json does not name (hf_quant_config.json?); planned at the files' bits"
    )
    return replace(shape, params=params), (note,)
