"""Reading safetensors headers: parameters by dtype, bytes, bits, and the layers that carry a KV cache."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

import pytest

from planner.errors import InvalidInput
from planner.weights import MAX_TENSORS, WeightsReading, headers_by_file, read_weights

TINY = Path(__file__).resolve().parents[2] / "examples" / "models" / "tiny-llama-safetensors"
BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I32": 4, "F8_E4M3": 1, "U8": 1, "I8": 1}


def header(tensors: dict[str, tuple[str, list[int]]]) -> dict[str, Any]:
    """A header with offsets laid out one tensor after another, as a writer lays them."""
    out: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    at = 0
    for name, (dtype, shape) in tensors.items():
        size = math.prod(shape) * BYTES[dtype]
        out[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + size]}
        at += size
    return out


def llama(layers: int = 2, hidden: int = 64, kv: int = 32, inter: int = 128, vocab: int = 1024) -> dict[str, Any]:
    t: dict[str, tuple[str, list[int]]] = {"model.embed_tokens.weight": ("BF16", [vocab, hidden])}
    for i in range(layers):
        p = f"model.layers.{i}."
        t |= {
            p + "self_attn.q_proj.weight": ("BF16", [hidden, hidden]),
            p + "self_attn.k_proj.weight": ("BF16", [kv, hidden]),
            p + "self_attn.v_proj.weight": ("BF16", [kv, hidden]),
            p + "self_attn.o_proj.weight": ("BF16", [hidden, hidden]),
            p + "mlp.gate_proj.weight": ("BF16", [inter, hidden]),
            p + "mlp.up_proj.weight": ("BF16", [inter, hidden]),
            p + "mlp.down_proj.weight": ("BF16", [hidden, inter]),
            p + "input_layernorm.weight": ("BF16", [hidden]),
            p + "post_attention_layernorm.weight": ("BF16", [hidden]),
        }
    t |= {"model.norm.weight": ("BF16", [hidden]), "lm_head.weight": ("BF16", [vocab, hidden])}
    return header(t)


def test_the_tiny_llamas_real_header() -> None:
    raw = (TINY / "model.safetensors").read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    reading = read_weights(json.loads(raw[8 : 8 + length]))
    assert reading.params_by_dtype == (("BF16", 205_120),)
    assert reading.bytes == 2 * 205_120
    assert reading.bits_per_weight == 16
    assert (reading.layers, reading.kv_layers) == (2, (0, 1))
    # 2 KV heads of 16 (hidden 64 over 4 heads), keys and values
    assert reading.kv_widths == ((0, 64), (1, 64))
    assert reading.kv_values_per_token == 128


def test_a_llama_split_in_two_files_reads_as_one() -> None:
    whole = llama(layers=4)
    names = [n for n in whole if n != "__metadata__"]
    first = {n: whole[n] for n in names[:20]}
    second = {n: whole[n] for n in names[20:]}
    split = read_weights({"model-00001-of-00002.safetensors": first, "model-00002-of-00002.safetensors": second})
    assert split == read_weights(whole)
    assert split.layers == 4 and split.kv_layers == (0, 1, 2, 3)


def test_a_hybrid_counts_only_its_attention_layers() -> None:
    t: dict[str, tuple[str, list[int]]] = {"model.embed_tokens.weight": ("BF16", [1000, 256])}
    for i in range(8):
        p = f"model.layers.{i}."
        if i % 4 == 3:  # attention every fourth layer, as Jamba's attn_layer_period
            t |= {
                p + "self_attn.q_proj.weight": ("BF16", [256, 256]),
                p + "self_attn.k_proj.weight": ("BF16", [64, 256]),
                p + "self_attn.v_proj.weight": ("BF16", [64, 256]),
                p + "self_attn.o_proj.weight": ("BF16", [256, 256]),
            }
        else:
            t |= {
                p + "mamba.in_proj.weight": ("BF16", [1024, 256]),
                p + "mamba.conv1d.weight": ("BF16", [512, 1, 4]),
                p + "mamba.A_log": ("F32", [512, 16]),
                p + "mamba.D": ("F32", [512]),
                p + "mamba.out_proj.weight": ("BF16", [256, 512]),
            }
        t[p + "input_layernorm.weight"] = ("BF16", [256])
    reading = read_weights(header(t))
    assert reading.layers == 8
    assert reading.kv_layers == (3, 7)
    assert reading.kv_widths == ((3, 128), (7, 128))
    assert dict(reading.params_by_dtype)["F32"] == 6 * (512 * 16 + 512)
    f32 = 6 * (512 * 16 + 512)
    bf16 = reading.params - f32
    assert reading.bytes == 4 * f32 + 2 * bf16


def test_a_recurrent_mixer_with_a_k_proj_caches_no_kv() -> None:
    t = {
        "model.layers.0.self_attn.k_proj.weight": ("BF16", [64, 64]),
        "model.layers.0.self_attn.v_proj.weight": ("BF16", [64, 64]),
        "model.layers.0.self_attn.A_log": ("F32", [4]),
        "model.layers.1.self_attn.k_proj.weight": ("BF16", [32, 64]),
        "model.layers.1.self_attn.v_proj.weight": ("BF16", [32, 64]),
    }
    reading = read_weights(header(t))
    assert (reading.layers, reading.kv_layers, reading.kv_widths) == (2, (1,), ((1, 64),))


def test_fused_and_latent_projections() -> None:
    fused = read_weights(
        header({f"transformer.h.{i}.self_attention.query_key_value.weight": ("BF16", [96, 64]) for i in range(3)})
    )
    assert fused.kv_layers == (0, 1, 2) and fused.kv_widths == () and fused.kv_values_per_token == 0
    mla = {
        "model.layers.0.self_attn.kv_a_proj_with_mqa.weight": ("F8_E4M3", [576, 7168]),
        "model.layers.0.self_attn.kv_a_proj_with_mqa.weight_scale_inv": ("F32", [5, 56]),
        "model.layers.0.self_attn.kv_b_proj.weight": ("F8_E4M3", [32768, 512]),
        # the multi-token-prediction layer after the last: no KV cache of its own
        "model.layers.1.self_attn.kv_a_proj_with_mqa.weight": ("F8_E4M3", [576, 7168]),
        "model.layers.1.eh_proj.weight": ("F8_E4M3", [7168, 14336]),
    }
    reading = read_weights(header(mla))
    assert (reading.layers, reading.kv_layers, reading.kv_widths) == (1, (0,), ((0, 576),))
    # scales are bytes, not parameters
    assert reading.params_by_dtype == (("F8_E4M3", 576 * 7168 * 2 + 32768 * 512 + 7168 * 14336),)
    assert reading.bytes == reading.params + 5 * 56 * 4
    assert reading.quant() == "fp8"


def test_a_vision_tower_is_no_language_layer() -> None:
    t = llama(layers=2)
    for i in range(4):
        t[f"vision_tower.vision_model.encoder.layers.{i}.self_attn.k_proj.weight"] = {"dtype": "BF16", "shape": [8, 8]}
    reading = read_weights(t)
    assert (reading.layers, reading.kv_layers) == (2, (0, 1))


def test_gptq_qweight_counts_the_values_it_packs() -> None:
    hidden, out, group = 256, 64, 128
    t = {
        "model.layers.0.self_attn.k_proj.qweight": ("I32", [hidden // 8, out]),
        "model.layers.0.self_attn.k_proj.qzeros": ("I32", [hidden // group, out // 8]),
        "model.layers.0.self_attn.k_proj.scales": ("F16", [hidden // group, out]),
        "model.layers.0.self_attn.k_proj.g_idx": ("I32", [hidden]),
        "model.layers.0.self_attn.v_proj.qweight": ("I32", [hidden // 8, out]),
        "model.layers.0.self_attn.v_proj.scales": ("F16", [hidden // group, out]),
    }
    reading = read_weights(header(t))
    assert reading.params_by_dtype == (("I32", 2 * hidden * out),)
    assert reading.kv_widths == ((0, 2 * out),)
    assert reading.quant() == "int4"
    assert reading.notes and "4-bit" in reading.notes[0]
    assert 4 < reading.bits_per_weight < 5
    eight = read_weights(header(t), quant="gptq-int8")
    assert eight.params == hidden * out and not eight.notes


def test_four_bit_bytes_hold_two_values() -> None:
    t = {
        "model.layers.0.mlp.experts.gate_up_proj_blocks": ("U8", [4, 128, 90, 16]),  # gpt-oss MXFP4
        "model.layers.0.mlp.experts.gate_up_proj_scales": ("U8", [4, 128, 90]),
        "model.layers.0.mlp.down_proj.weight": ("U8", [64, 32]),  # ModelOpt NVFP4
        "model.layers.0.mlp.down_proj.weight_scale": ("F8_E4M3", [64, 4]),
        "model.layers.0.mlp.down_proj.weight_scale_2": ("F32", []),
    }
    reading = read_weights(header(t))
    assert reading.params == 2 * (4 * 128 * 90 * 16) + 2 * 64 * 32
    assert 4 < reading.bits_per_weight < 4.5


def test_the_hubs_metadata_shape_is_taken_as_it_comes() -> None:
    tensors = {k: v for k, v in llama().items() if k != "__metadata__"}
    hub = {
        "metadata": None,
        "sharded": False,
        "weight_map": dict.fromkeys(tensors, "model.safetensors"),
        "files_metadata": {"model.safetensors": {"metadata": {"format": "pt"}, "tensors": tensors}},
        "parameter_count": {"BF16": 205_120},
    }
    assert headers_by_file(hub) == {"model.safetensors": tensors}
    assert read_weights(hub) == read_weights(llama())


def test_a_reading_round_trips_through_json() -> None:
    reading = read_weights(llama())
    assert WeightsReading.from_json(json.loads(json.dumps(reading.to_json()))) == reading


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "expected a JSON object of headers"),
        ({"a.safetensors": 3}, "expected a header"),
        ({"x": {"dtype": "BF16", "shape": [-1]}}, "not a list of sizes"),
        ({"x": {"dtype": "Q9", "shape": [2]}}, "'Q9' is not one of BOOL"),
        ({"x": {"dtype": "BF16", "shape": [1 << 30, 1 << 30]}}, "past any tensor"),
        ({"x": {"dtype": "BF16", "shape": [2], "data_offsets": [4, 0]}}, "end before begin"),
        ({"a": {"x": {"dtype": "BF16", "shape": [2]}}, "b": {"x": {"dtype": "BF16", "shape": [2]}}}, "in two files"),
    ],
)
def test_bad_headers_get_one_line(data: Any, message: str) -> None:
    with pytest.raises(InvalidInput, match=message) as e:
        read_weights(data)
    assert "\n" not in str(e.value)


def test_too_many_tensors_are_refused_unread() -> None:
    many = dict.fromkeys((f"t{i}" for i in range(MAX_TENSORS + 1)), None)
    with pytest.raises(InvalidInput, match="past the limit of 1,000,000") as e:
        read_weights({"model.safetensors": many})
    assert "\n" not in str(e.value)


def test_an_unknown_dtype_with_offsets_is_counted_and_noted() -> None:
    reading = read_weights({"x": {"dtype": "F2_NEW", "shape": [8], "data_offsets": [0, 2]}})
    assert (reading.params, reading.bytes) == (8, 2)
    assert "F2_NEW" in reading.notes[0]


def test_compressed_tensors_packs_and_a_time_mixer_caches_nothing() -> None:
    t = {
        "model.layers.0.self_attn.k_proj.weight_packed": ("I32", [32, 8]),
        "model.layers.0.self_attn.k_proj.weight_scale": ("BF16", [32, 1]),
        "model.layers.0.self_attn.v_proj.weight_packed": ("I32", [32, 8]),
        "model.layers.0.self_attn.v_proj.weight_scale": ("BF16", [32, 1]),
        "rwkv.blocks.0.attention.key.weight": ("BF16", [64, 64]),
        "rwkv.blocks.0.attention.value.weight": ("BF16", [64, 64]),
        "rwkv.blocks.0.attention.time_decay": ("F32", [64]),
    }
    packed = read_weights(header({k: v for k, v in t.items() if k.startswith("model.")}), quant="int4")
    assert packed.params_by_dtype == (("I32", 2 * 32 * 64),)
    assert packed.kv_widths == ((0, 64),)
    rwkv = read_weights(header({k: v for k, v in t.items() if k.startswith("rwkv.")}))
    assert (rwkv.layers, rwkv.kv_layers) == (1, ())
