"""A bitsandbytes 4-bit model under vLLM: its forward pass dequantises each weight shard before the matmul
(bitsandbytes' ``MatMul4Bit``), and its CUDA graphs keep the largest in their pool
(``planner.vllmcost.vllm_dequantised``)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from planner import options
from planner.constants import GIB
from planner.estimate import EngineShape
from planner.quantconfig import BNB_4BIT
from planner.shape import shape_from_config
from planner.vllmcost import vllm_card, vllm_dequantised
from tests.planner import published_vllm as V
from tests.planner.helpers import gpu_node, original

LLAMA_70B = EngineShape(layers=80, hidden=8192, vocab=128_256, mlp_width=28_672, heads=64)
BNB_ROW = 61
"""Llama-3.3-70B in bitsandbytes 4-bit on an H100 NVL under 0.10.0, whose graphs took 2.89 GiB."""


def test_the_largest_shard_is_an_mlp_matrix_split_over_the_group() -> None:
    assert vllm_dequantised(LLAMA_70B) == 28_672 * 8192 * 2
    assert vllm_dequantised(LLAMA_70B, tp=4) == 28_672 * 8192 * 2 // 4
    # a width not known is counted wide: six times the hidden size
    assert vllm_dequantised(EngineShape(hidden=4096)) == 6 * 4096 * 4096 * 2


def test_only_a_bitsandbytes_model_with_graphs_counts_it() -> None:
    plain = dict(vllm_card(40 * GIB, 0, LLAMA_70B).parts)
    bnb = dict(vllm_card(40 * GIB, 0, LLAMA_70B, dequantised=True).parts)
    eager = dict(vllm_card(40 * GIB, 0, LLAMA_70B, dequantised=True, enforce_eager=True).parts)
    assert "bitsandbytes dequantised weight" not in plain and "bitsandbytes dequantised weight" not in eager
    assert bnb.pop("bitsandbytes dequantised weight") == vllm_dequantised(LLAMA_70B) and bnb == plain


def test_the_published_bitsandbytes_run_is_met_with_it_and_under_without() -> None:
    r = V.load()["rows"][BNB_ROW]
    assert r["quantization"] == "bitsandbytes" and r["cuda_graph_gib"] == 2.89
    own = V.need(r, V.own_settings(r))
    took = V.took_bytes(r)
    parts = dict(own.parts)
    assert 1.0 <= own.total / took <= 1.01
    assert (own.total - parts["bitsandbytes dequantised weight"]) / took < 1.0
    # the graphs' figure beyond the term holds the shard
    assert parts["bitsandbytes dequantised weight"] <= (2.89 * GIB - parts["CUDA graphs"])


def test_a_bitsandbytes_original_is_planned_with_its_shard_and_the_width_is_read_from_its_config() -> None:
    config = Path(__file__).parent / "corpus" / "meta-llama--Meta-Llama-3.1-70B" / "config.json"
    shape = shape_from_config(json.loads(config.read_text(encoding="utf-8")))
    assert shape.mlp_width == 28_672
    bf16 = original(40)
    nf4 = replace(bf16, quant=BNB_4BIT)
    [plain] = options([bf16], shape, [gpu_node("n", "h100-80g")], 4096)
    [bnb] = options([nf4], shape, [gpu_node("n", "h100-80g")], 4096)
    assert (bnb.need_gb - plain.need_gb) * GIB == pytest.approx(28_672 * 8192 * 2, rel=1e-6)
