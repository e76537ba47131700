"""Tensor parallel on cards that cannot reach each other's memory (no GPU peer-to-peer access): NCCL's
buffers go through the host and vLLM's custom all-reduce is not set up, so a card of the group holds, outside
PyTorch, what one card does (``VllmSettings.gpu_p2p``, ``planner.vllmcost.vllm_non_torch``)."""

from __future__ import annotations

import pytest

from planner import InvalidInput
from planner.constants import GIB, VLLM_NON_TORCH_ONE_CARD
from planner.settings import VllmSettings, parse_settings, vllm_run
from planner.vllmcost import vllm_non_torch
from tests.planner import published_vllm as V


def test_a_card_with_no_peer_access_holds_what_one_card_holds_outside_pytorch() -> None:
    for tp in (2, 4, 8):
        assert vllm_non_torch(tp, p2p=False) == VLLM_NON_TORCH_ONE_CARD
        assert vllm_non_torch(tp, pcie=True, p2p=False) == VLLM_NON_TORCH_ONE_CARD
        assert vllm_non_torch(tp) > VLLM_NON_TORCH_ONE_CARD + GIB  # NCCL's peer buffers over NVLink
    assert vllm_non_torch(1, p2p=False) == vllm_non_torch(1)


def test_peer_access_is_assumed_unless_a_request_or_deployment_says_otherwise() -> None:
    """Left out, a card has peer access as its class has (NVLink, or PCIe as the class decides); a data-centre
    card in a VM or container that blocks it (an A100 whose driver reports no peer access) says so."""
    assert vllm_run(VllmSettings(), "a100-80g", 80).p2p
    assert vllm_run(VllmSettings(), "rtx-3090", 24).p2p
    assert not vllm_run(VllmSettings(gpu_p2p=False), "a100-80g", 80).p2p
    assert vllm_run(VllmSettings(gpu_p2p=True), "a100-80g", 80).p2p


def test_peer_access_that_is_not_a_boolean_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidInput) as e:
        parse_settings({"vllm": {"gpu_p2p": "no"}})
    assert "settings.vllm.gpu_p2p" in str(e.value) and "\n" not in str(e.value)


def test_the_published_runs_whose_logs_say_their_cards_lack_p2p_are_within_ten_percent() -> None:
    """Qwen2-7B at TP 2 on two A100s in one node (vLLM 0.10.1.1): both logs say 'Custom allreduce is disabled
    because your platform lacks GPU P2P capability', having trusted the driver's report (the same CUDA query
    NCCL's P2P transport asks); they are estimated without peer access and are within 10%. No other row's
    log says so."""
    rows = V.load()["rows"]
    lacking = {i for i, r in enumerate(rows) if V.own_settings(r).gpu_p2p is False}
    assert lacking == {3, 4}
    by = {p.index: p for p in V.rows()}
    for i in lacking:
        assert 1.0 <= by[i].ratio <= 1.1, (i, by[i].ratio)
