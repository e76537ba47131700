"""The forward pass's peak under tensor parallel: its bytes are the MLP's intermediate activations, which
vLLM's column-parallel layers split over the group, so each card holds its share of the peak; the residual
stream and the hidden states it keeps are whole on every card (``planner.vllmcost.vllm_activation``)."""

from __future__ import annotations

from planner.constants import VLLM_FORWARD_BYTES, VLLM_FORWARD_PEAK_BYTES
from planner.estimate import EngineShape
from planner.vllmcost import vllm_activation
from tests.planner import published_vllm as V

QWEN25_14B = EngineShape(layers=48, hidden=5120, vocab=152_064)


def test_each_card_holds_its_share_of_the_forward_peak_and_the_whole_residual_stream() -> None:
    tokens = 32_768
    held = tokens * 5120 * VLLM_FORWARD_BYTES
    for tp in (1, 2, 4):
        got = vllm_activation(QWEN25_14B, batched_tokens=tokens, max_seqs=256, tp=tp)
        assert got == tokens * 5120 * VLLM_FORWARD_PEAK_BYTES // tp + held


def test_where_the_sampler_is_the_peak_tensor_parallel_moves_nothing() -> None:
    """The sampler's logits are gathered on every card: 1,024 sequences over 152,064 entries peak above
    8,192 tokens' forward pass at any group size."""
    one = vllm_activation(QWEN25_14B, batched_tokens=8192, max_seqs=1024)
    assert vllm_activation(QWEN25_14B, batched_tokens=8192, max_seqs=1024, tp=4) == one


def test_the_published_v0_run_at_tp2_profiling_32768_tokens_is_within_ten_percent() -> None:
    """Qwen2.5-14B at TP 2 under vLLM 0.7.2 (V0 profiles the whole 32,768-token context in one step): the log
    prints an activation peak of 2.84 GiB a card, and the estimate is within 10% of what the run took."""
    [row] = [p for p in V.rows() if p.index == 42]
    assert V.load()["rows"][42]["activation_peak_gib"] == 2.84
    assert 1.0 <= row.ratio <= 1.1, row.ratio
