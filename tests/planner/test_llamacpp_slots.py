"""llama-server's cache where each slot has its own (``-np N``): every slot keeps its own sliding-window
cells, a micro-batch's room and padding included (src/llama-kv-cache-iswa.cpp: ``n_swa*(unified ?
n_seq_max : 1) + n_ubatch`` cells a stream, one stream a slot)."""

from __future__ import annotations

from planner.model import Shape
from planner.options import gguf_kv_bytes
from planner.parallel import llamacpp_kv_bytes
from planner.settings import LlamacppSettings, Settings

PER_LAYER = 2 * 8 * 256 * 2
GEMMA2 = Shape(kv_bytes_per_token=42 * PER_LAYER, kv_heads=8, windows=((4096, 21 * PER_LAYER),))
"""Gemma-2-9B: 42 layers, every other one a 4,096-token window."""


def test_each_slot_of_its_own_keeps_its_own_window_cells() -> None:
    context = 2 * 32768
    full = 21 * PER_LAYER * context
    # two streams, each of 4,096 + 512 cells padded to 256 (4,608)
    assert llamacpp_kv_bytes(GEMMA2, context, sequences=2, unified=False) == full + 2 * 4608 * 21 * PER_LAYER
    # one unified cache: 2 × 4,096 + 512 = 8,704 cells, a micro-batch's room once
    assert llamacpp_kv_bytes(GEMMA2, context, sequences=2) == full + 8704 * 21 * PER_LAYER


def test_a_slot_whose_share_is_shorter_than_its_window_keeps_its_share() -> None:
    assert llamacpp_kv_bytes(GEMMA2, 2 * 2048, sequences=2, unified=False) == 2 * 2048 * GEMMA2.kv_bytes_per_token


def test_a_plan_with_slots_of_their_own_counts_every_slots_window() -> None:
    settings = Settings(llamacpp=LlamacppSettings(parallel=2))
    counted = gguf_kv_bytes(GEMMA2, 32768, settings)
    assert counted == 21 * PER_LAYER * 2 * 32768 + 2 * 4608 * 21 * PER_LAYER
