"""llama.cpp over several of a node's cards: layers go to cards whole, the first card taking the larger
share (llama.cpp splits ``n_layer + 1`` layers, the output counted as one, and the first card rounds up),
and with every layer on the cards it runs them as a pipeline whose compute buffers are larger than one
card's (the published Qwen2.5-Coder-32B over two RTX 3090 Ti: 233 and 237.5 MiB where one card's is
177)."""

from __future__ import annotations

from planner.constants import GIB, MIB
from planner.estimate import EngineShape, llamacpp_card, llamacpp_compute, llamacpp_split
from planner.settings import LlamacppSettings, llamacpp_run
from tests.planner import published_llamacpp as L

QWEN_32B = EngineShape(layers=64, hidden=5120, vocab=152_064, heads=40)


def test_the_fullest_card_of_a_split_holds_its_layers_rounded_up_with_the_output_counted() -> None:
    weights, kv = 32 * GIB, 8 * GIB
    need = llamacpp_split(weights, kv, 2, QWEN_32B, context=32768)
    # 65 layers (the output one of them) over 2 cards: the first takes 33 of the 64 repeating layers
    assert need.weights == weights * 33 // 64 and need.kv == kv * 33 // 64
    one = llamacpp_card(weights, kv, QWEN_32B, context=32768)
    assert need.weights > weights // 2 and need.kv > kv // 2 and one.weights == weights


def test_a_pipeline_over_cards_has_a_larger_compute_buffer_than_one_card() -> None:
    run = llamacpp_run(LlamacppSettings(ubatch=256, batch=512, cache_type_k="q8_0", cache_type_v="q8_0"))
    split = dict(llamacpp_split(40 * GIB, 4 * GIB, 2, QWEN_32B, context=32768, run=run).parts)
    single = llamacpp_compute(QWEN_32B, 32768, ubatch=256)
    assert split["compute buffer"] > single


def test_the_published_pipeline_rows_compute_buffers_are_within_the_split_estimate() -> None:
    r = L.load()["rows"][5]
    assert "pipeline" in r["notes"].lower()
    run = llamacpp_run(
        LlamacppSettings(ubatch=r["n_ubatch"], batch=r["n_batch"], cache_type_k="q8_0", cache_type_v="q8_0")
    )
    counted = dict(llamacpp_split(34 * GIB, 4 * GIB, 2, QWEN_32B, context=r["n_ctx"], run=run).parts)["compute buffer"]
    for device in ("CUDA0", "CUDA1"):
        took = r["compute_buffers_mib"][device] * MIB
        assert 1.0 <= counted / took <= 1.10, (device, counted / MIB, took / MIB)
