"""What safetensors headers say of a model: its parameters by dtype, its bytes, and which layers carry a
KV cache.

A safetensors file opens with an 8-byte little-endian length and a JSON header naming every tensor's
``dtype``, ``shape`` and ``data_offsets`` (and a free ``__metadata__``), readable without the data. Rules
per model family lag behind new models; the weights say what they are. Parameters are counted as the
loaded model holds them, as ``planner.quantconfig`` counts a quantised original: a packed tensor counts
the values it packs (a GPTQ/AWQ ``qweight`` of int32 holds 32 / bits of them, a ``U8`` tensor of 4-bit
values two), and a quantisation's scales, zero points and group indexes count in the bytes but are no
parameters. Bits per weight then follow: the bytes over the parameters.

Which layers carry a KV cache is read from the tensor names alone (an index's ``weight_map`` suffices): a
layer with a key or value projection (``k_proj``/``v_proj``, fused ``qkv_proj``/``query_key_value``/
``Wqkv``, MLA's ``kv_a_proj_with_mqa``/``kv_b_proj``) does, unless the projection belongs to a recurrent
mixer (one holding ``A_log``, ``dt_bias`` or ``conv1d``); a Mamba layer (``in_proj``, ``A_log``) does not.
Where keys and values have projections of their own, their output features (KV heads × head_dim) are what
one token caches in that layer; MLA's ``kv_a_proj_with_mqa`` outputs the latent it caches.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from planner.errors import InvalidInput

MAX_HEADER_BYTES = 100 << 20
"""The safetensors format caps a header at 100 MB (``safetensors``' ``MAX_HEADER_SIZE``)."""

MAX_TENSORS = 1_000_000
"""Tensors read in all: the largest models on the Hub hold about 100,000."""

MAX_ELEMENTS = 1 << 50
"""A tensor of more values than this is a typo, not a tensor."""

DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E4M3": 8,
    "F8_E5M2": 8,
    "F8_E8M0": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "I64": 64,
    "U64": 64,
    "F64": 64,
    "C64": 64,
}
"""Bits per element of the safetensors dtypes (safetensors 0.6: ``Dtype::bitsize``)."""

QUANT_PARTS = frozenset(
    {
        "scales",  # GPTQ, AWQ
        "qzeros",
        "g_idx",
        "weight_scale",  # FP8 (vLLM, ModelOpt, compressed-tensors), NVFP4
        "weight_scale_inv",  # DeepSeek-V3's block FP8
        "weight_scale_2",
        "weight_global_scale",
        "weight_zero_point",
        "weight_g_idx",
        "weight_shape",
        "input_scale",
        "input_global_scale",
        "input_zero_point",
        "k_scale",
        "v_scale",
        "q_scale",
        "SCB",  # bitsandbytes int8
        "weight_format",
        "absmax",  # bitsandbytes 4-bit
        "quant_map",
        "nested_absmax",
        "nested_quant_map",
    }
)
"""Last name parts of a quantisation's own tensors: bytes, not parameters."""

_LAYER = re.compile(r"^(?P<stack>(?:.*?\.)?(?:layers|layer|h|blocks|block))\.(?P<index>\d{1,6})\.(?P<rest>.+)$")
_NOT_LANGUAGE = ("vision", "visual", "image", "audio", "speech", "projector", "mtp")
"""Words in a layer stack's name that make it no part of the language model: a vision or audio tower, a
multi-token-prediction head (Qwen3-Next's ``mtp.layers``)."""
_MTP_PARTS = frozenset({"eh_proj", "enorm", "hnorm", "shared_head"})
"""DeepSeek-V3's and GLM-4.5's multi-token-prediction layer, numbered after the last decoder layer: no KV
cache unless speculative decoding is asked for."""
KV_SEPARATE = {"k_proj": "k", "v_proj": "v", "wk": "k", "wv": "v", "key": "k", "value": "v"}
KV_FUSED = frozenset({"qkv_proj", "query_key_value", "Wqkv", "wqkv", "c_attn", "W_pack", "att_proj"})
KV_LATENT = frozenset({"kv_a_proj_with_mqa", "kv_b_proj"})
RECURRENT_PARTS = frozenset({"A_log", "dt_bias", "conv1d", "time_decay"})
"""Parts of a recurrent mixer: a projection named ``k_proj`` or ``key`` beside them (Kimi Linear's delta
attention, RWKV's time mixing) feeds a state, not a KV cache."""
_PACKED_4BIT_BESIDE = (
    "weight_scale_2",  # ModelOpt's NVFP4
    "weight.absmax",  # bitsandbytes 4-bit
    "weight.quant_state.bitsandbytes__nf4",
    "weight.quant_state.bitsandbytes__fp4",
)
"""Tensors beside a ``U8`` weight that make it two 4-bit values a byte."""


@dataclass(frozen=True, slots=True)
class WeightsReading:
    """What a model's safetensors headers say."""

    params_by_dtype: tuple[tuple[str, int], ...]
    """Parameters by the dtype they are stored in, most first; packed values counted one by one."""
    bytes: int
    """Every tensor's bytes, a quantisation's scales included."""
    layers: int = 0
    """The language model's layers, as the names number them; 0 where the names number none."""
    kv_layers: tuple[int, ...] = ()
    """The layers (by number) with a key/value projection."""
    kv_widths: tuple[tuple[int, int], ...] = ()
    """``(layer, values one token caches there)`` for the KV layers whose projections' shapes tell it."""
    notes: tuple[str, ...] = ()
    """How something was read that a reader may want to know (a packing assumed, a dtype not known)."""

    @property
    def params(self) -> int:
        return sum(n for _, n in self.params_by_dtype)

    @property
    def bits_per_weight(self) -> float:
        """The bytes' bits over the parameters; 0 with no parameters."""
        return self.bytes * 8 / self.params if self.params else 0.0

    @property
    def kv_values_per_token(self) -> int:
        """What one token caches in every KV layer together; 0 unless each KV layer's width is known."""
        if not self.kv_layers or len(self.kv_widths) != len(self.kv_layers):
            return 0
        return sum(w for _, w in self.kv_widths)

    def quant(self) -> str:
        """The quantisation the stored dtypes show, in ``planner.quantconfig``'s names: ``fp8``, ``int8``,
        ``int4`` (int32 packs), where most parameters are stored so; ``""`` otherwise (floats, or bytes
        whose packing the dtype does not tell)."""
        dtype = self.params_by_dtype[0][0] if self.params_by_dtype else ""
        return {"F8_E4M3": "fp8", "F8_E5M2": "fp8", "I8": "int8", "I32": "int4"}.get(dtype, "")

    def to_json(self) -> dict[str, Any]:
        return {
            "params_by_dtype": dict(self.params_by_dtype),
            "bytes": self.bytes,
            "layers": self.layers,
            "kv_layers": list(self.kv_layers),
            "kv_widths": {str(i): w for i, w in self.kv_widths},
            "notes": list(self.notes),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WeightsReading:
        """A reading as ``to_json`` wrote it (a cache's copy)."""
        by_dtype = data.get("params_by_dtype") or {}
        widths = data.get("kv_widths") or {}
        return cls(
            params_by_dtype=tuple((str(k), int(v)) for k, v in by_dtype.items()),
            bytes=int(data.get("bytes", 0)),
            layers=int(data.get("layers", 0)),
            kv_layers=tuple(int(i) for i in data.get("kv_layers") or ()),
            kv_widths=tuple(sorted((int(i), int(w)) for i, w in widths.items())),
            notes=tuple(str(n) for n in data.get("notes") or ()),
        )


def headers_by_file(data: Any, source: str = "headers") -> dict[str, Mapping[str, Any]]:
    """Headers as ``{file: header}`` from any of the shapes they come in: one file's header (tensor name to
    ``{dtype, shape, data_offsets}``), a mapping of file names to headers, or what ``huggingface_hub``'s
    ``get_safetensors_metadata`` returns, as JSON (``files_metadata``, each with its ``tensors``)."""
    if not isinstance(data, Mapping):
        raise InvalidInput(source, "(headers)", f"expected a JSON object of headers, got {type(data).__name__}")
    files = data.get("files_metadata")
    if isinstance(files, Mapping):
        out: dict[str, Mapping[str, Any]] = {}
        for name, meta in files.items():
            tensors = meta.get("tensors") if isinstance(meta, Mapping) else None
            if not isinstance(tensors, Mapping):
                raise InvalidInput(source, f"files_metadata.{name}", "has no tensors")
            out[str(name)] = tensors
        return out
    if any(isinstance(v, Mapping) and "dtype" in v for v in data.values()):
        return {"model.safetensors": data}
    for name, header in data.items():
        if not isinstance(header, Mapping):
            raise InvalidInput(
                source, str(name)[:200], f"expected a header (a JSON object), got {type(header).__name__}"
            )
    return dict(data)


def read_weights(data: Any, *, quant: str = "", source: str = "headers") -> WeightsReading:
    """What the headers in ``data`` (any shape ``headers_by_file`` takes) say. ``quant`` is the original's
    quantisation where its config names one (``gptq-int8``: an int32 ``qweight`` packs four values); an
    int32 ``qweight`` is read as 4-bit values where it names none. More than ``MAX_TENSORS`` tensors are
    refused unread."""
    files = headers_by_file(data, source)
    count = sum(len(h) - ("__metadata__" in h) for h in files.values())
    if count > MAX_TENSORS:
        raise InvalidInput(source, "(headers)", f"hold {count:,} tensors, past the limit of {MAX_TENSORS:,}")
    tensors: dict[str, tuple[str, tuple[int, ...], int]] = {}
    notes: set[str] = set()
    for file, header in files.items():
        for name, info in header.items():
            if name == "__metadata__":
                continue
            where = f"{file}: {name}"[:300]
            if name in tensors:
                raise InvalidInput(source, where, "appears in two files")
            tensors[name] = _tensor(info, source, where, notes)
    packed_bits = _packed_bits(quant)
    by_dtype: dict[str, int] = {}
    total_bytes = 0
    for name, (dtype, shape, size) in tensors.items():
        elements = math.prod(shape)
        total_bytes += size
        part = name.rsplit(".", 1)[-1]
        if part in QUANT_PARTS or part.endswith("_scales") or ".quant_state" in name:
            continue
        per = _values_per_element(name, part, dtype, packed_bits, tensors)
        if per != 1 and dtype == "I32" and not packed_bits:
            notes.add("int32 qweight read as 4-bit values, 8 to an int32 (the config names no bits)")
        by_dtype[dtype] = by_dtype.get(dtype, 0) + elements * per
    layers, kv_layers, widths = _kv_layers(tensors)
    return WeightsReading(
        params_by_dtype=tuple(sorted(by_dtype.items(), key=lambda kv: (-kv[1], kv[0]))),
        bytes=total_bytes,
        layers=layers,
        kv_layers=kv_layers,
        kv_widths=widths,
        notes=tuple(sorted(notes)),
    )


def _tensor(info: Any, source: str, where: str, notes: set[str]) -> tuple[str, tuple[int, ...], int]:
    """A tensor's dtype, shape and bytes; bytes from ``data_offsets`` where given, else from the dtype."""
    if not isinstance(info, Mapping):
        raise InvalidInput(source, where, f"expected {{dtype, shape}}, got {type(info).__name__}")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if not isinstance(shape, list | tuple) or not all(_whole(d) for d in shape) or len(shape) > 16:
        raise InvalidInput(source, f"{where}.shape", f"not a list of sizes (given {str(shape)[:80]})")
    elements = math.prod(shape)
    if elements > MAX_ELEMENTS:
        raise InvalidInput(source, f"{where}.shape", f"{elements:,} values, past any tensor")
    size = -1
    if isinstance(offsets, list | tuple) and len(offsets) == 2 and all(_whole(o) for o in offsets):
        if offsets[1] < offsets[0]:
            raise InvalidInput(source, f"{where}.data_offsets", f"end before begin (given {list(offsets)})")
        size = offsets[1] - offsets[0]
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        if size < 0 or not isinstance(dtype, str):
            known = ", ".join(DTYPE_BITS)
            raise InvalidInput(source, f"{where}.dtype", f"{str(dtype)[:40]!r} is not one of {known}")
        notes.add(f"dtype {dtype[:40]} not known: its values counted one a parameter")
    elif size < 0:
        size = (elements * DTYPE_BITS[dtype] + 7) // 8
    return dtype, tuple(shape), size


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 60


def _packed_bits(quant: str) -> int:
    """The bits of the values an int32 ``qweight`` packs, by the config's quantisation (``gptq-int8``: 8);
    0 where it names none."""
    m = re.search(r"int(\d+)$", quant)
    bits = int(m.group(1)) if m else 0
    return bits if bits in (2, 3, 4, 8) else 0


def _values_per_element(
    name: str, part: str, dtype: str, packed_bits: int, tensors: Mapping[str, tuple[str, tuple[int, ...], int]]
) -> int:
    """How many parameters one stored element holds."""
    if dtype == "I32" and part in ("qweight", "weight_packed"):  # GPTQ, AWQ, compressed-tensors' pack
        return 32 // (packed_bits or 4)
    if dtype in ("U8", "I8"):
        if part.endswith("_blocks") or part == "weight_packed":  # MXFP4 (gpt-oss), compressed-tensors' NVFP4
            return 2
        module = name[: -len(part)]
        if part == "weight" and any(module + tail in tensors for tail in _PACKED_4BIT_BESIDE):
            return 2
    return 1


def kv_layers_by_name(names: Iterable[str]) -> tuple[int, tuple[int, ...]]:
    """From tensor names alone (an index's ``weight_map``): the language model's layer count and its layers
    that carry a key/value projection (widths need the headers' shapes)."""
    layers, kv, _ = _kv_layers({n: ("", (), 0) for n in names if isinstance(n, str)})
    return layers, kv


def _kv_layers(
    tensors: Mapping[str, tuple[str, tuple[int, ...], int]],
) -> tuple[int, tuple[int, ...], tuple[tuple[int, int], ...]]:
    """The language model's layer count, its layers with a KV projection, and the width each caches."""
    stacks: dict[str, dict[int, list[str]]] = {}
    for name in tensors:
        m = _LAYER.match(name)
        if m is None or any(word in m["stack"].lower() for word in _NOT_LANGUAGE):
            continue
        stacks.setdefault(m["stack"], {}).setdefault(int(m["index"]), []).append(m["rest"])
    if not stacks:
        return 0, (), ()
    stack_name, stack = max(stacks.items(), key=lambda kv: (len(kv[1]), kv[0]))
    stack = {i: rests for i, rests in stack.items() if not any(_MTP_PARTS & set(r.split(".")) for r in rests)}
    kv: list[int] = []
    widths: list[tuple[int, int]] = []
    for index in sorted(stack):
        found, width = _kv_of_layer(f"{stack_name}.{index}.", stack[index], tensors)
        if found:
            kv.append(index)
            if width:
                widths.append((index, width))
    return len(stack), tuple(kv), tuple(widths)


def _kv_of_layer(
    prefix: str, rests: list[str], tensors: Mapping[str, tuple[str, tuple[int, ...], int]]
) -> tuple[bool, int]:
    """Whether a layer holds a KV projection, and the values a token caches there (0 where not told)."""
    recurrent: set[str] = set()
    for rest in rests:
        parts = rest.split(".")
        recurrent.update(".".join(parts[:j]) for j, part in enumerate(parts) if part in RECURRENT_PARTS)
    found = False
    sides: dict[str, int] = {}
    latent = 0
    for rest in rests:
        parts = rest.split(".")
        for i, part in enumerate(parts[:-1]):
            if part not in KV_SEPARATE and part not in KV_FUSED and part not in KV_LATENT:
                continue
            if ".".join(parts[:i]) in recurrent:
                break
            found = True
            tail = ".".join(parts[i + 1 :])
            out = _out_features(tensors[prefix + rest], tail)
            if part in KV_SEPARATE and out:
                sides[KV_SEPARATE[part]] = out
            elif part == "kv_a_proj_with_mqa" and out:
                latent = out
            break
    if latent:
        return found, latent
    return found, sides["k"] + sides["v"] if len(sides) == 2 else 0


def _out_features(tensor: tuple[str, tuple[int, ...], int], tail: str) -> int:
    """A projection's output features from its tensor: a float or FP8 ``weight`` is ``[out, in]``, as is
    compressed-tensors' ``weight_packed`` (packed along ``in``); GPTQ/AWQ ``scales`` are ``[groups, out]``.
    0 for any other tensor (a GPTQ/AWQ ``qweight``, a bias)."""
    dtype, shape, _ = tensor
    if len(shape) != 2:
        return 0
    if tail == "weight_packed" or (tail == "weight" and dtype != "I32" and shape[1] > 1):
        return shape[0]  # bitsandbytes 4-bit keeps its weight as [n, 1]: no width
    if tail == "scales":
        return shape[1]
    return 0
