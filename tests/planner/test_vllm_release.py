"""vLLM's release as one of its settings: each release rule (``planner.vllmrelease``) moves the estimate
where that release profiles otherwise, and the published logs of those releases are met by it."""

from __future__ import annotations

import pytest

from planner import InvalidInput, Settings, options
from planner.constants import GIB, VLLM_SAMPLER_BYTES
from planner.estimate import EngineShape
from planner.settings import VllmSettings, parse_settings, vllm_run
from planner.vllmcost import vllm_activation
from planner.vllmrelease import DEFAULT_VLLM_VERSION, VLLM_SORT_SAMPLER_BYTES, release_of
from tests.planner import published_vllm as V
from tests.planner.helpers import gpu_node, original
from tests.planner.test_settings import LLAMA_8B

QWEN3 = EngineShape(layers=36, hidden=2560, vocab=151_936)


def test_a_release_left_out_is_the_one_the_estimate_was_fitted_on() -> None:
    assert vllm_run(VllmSettings(), "h100-80g", 80).release == release_of(DEFAULT_VLLM_VERSION) == (0, 19)
    assert vllm_run(VllmSettings(vllm_version="0.10.2"), "h100-80g", 80).release == (0, 10)


@pytest.mark.parametrize("version", ["0.10.x", "v0.19", "0.19.0rc1", "latest", "0.6.5.dev", ""])
def test_a_version_that_is_not_a_release_is_refused_naming_the_field(version: str) -> None:
    with pytest.raises(InvalidInput) as e:
        parse_settings({"vllm": {"vllm_version": version}})
    assert "settings.vllm.vllm_version" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(("version", "sorts"), [("0.7", False), ("0.8", True), ("0.11.2", True), ("0.16", True)])
def test_the_sampler_is_sorted_from_08_to_016(version: str, sorts: bool) -> None:
    """V1 profiles its sampler with top-k and top-p over the whole vocabulary (PR 13594, 0.8), sorted by
    PyTorch where FlashInfer is not installed, until the Triton kernels (0.17): 37 bytes a sequence and
    vocabulary entry where 0.19 holds 15."""
    assert (VLLM_SORT_SAMPLER_BYTES, VLLM_SAMPLER_BYTES) == (37, 15)
    at = vllm_activation(QWEN3, max_seqs=1024, release=release_of(version))
    now = vllm_activation(QWEN3, max_seqs=1024)
    assert (at - now == 1024 * 151_936 * (37 - 15)) == sorts
    assert at >= now
    assert vllm_activation(QWEN3, pooling=True, release=release_of(version)) == vllm_activation(QWEN3, pooling=True)


def test_a_plan_for_an_older_release_needs_more_of_an_h100() -> None:
    """The same Llama 3 8B on an H100 at vLLM's defaults (1,024 sequences): 0.11 sorts 1,024 sequences'
    logits, 2.7 GiB more than 0.19 holds; the release reaches the option's need."""
    need = {}
    for version in ("0.11", "0.19"):
        s = Settings(vllm=VllmSettings(vllm_version=version))
        [o] = options([original(14.96)], LLAMA_8B, [gpu_node("n", "h100-80g")], 4096, settings=s)
        need[version] = o.need_gb
    assert abs(need["0.11"] - need["0.19"] - 1024 * 128_256 * 22 / GIB) < 0.01


@pytest.mark.parametrize(
    ("context", "tokens"), [(0, 2048), (1024, 2048), (8192, 8192), (32_768, 32_768), (32_769, 2048), (131_072, 2048)]
)
def test_v0_profiles_the_whole_context_in_one_step_up_to_32k(context: int, tokens: int) -> None:
    """The V0 engine (before 0.8): ``max_num_batched_tokens = max(max_model_len, 2048)``, and a chunk of
    2,048 past 32K where it turns chunked prefill on by itself; 256 sequences on every card."""
    run = vllm_run(VllmSettings(vllm_version="0.6"), "h100-80g", 80, context)
    assert (run.batched_tokens, run.max_seqs) == (tokens, 256)
    v1 = vllm_run(VllmSettings(vllm_version="0.8"), "h100-80g", 80, context)
    assert (v1.batched_tokens, v1.max_seqs) == (8192, 1024)
    given = vllm_run(VllmSettings(vllm_version="0.6", max_num_batched_tokens=4096), "h100-80g", 80, context)
    assert given.batched_tokens == 4096


def test_v0_rows_are_estimated_at_their_contexts_tokens() -> None:
    """The V0 rows of the published table that print no batched tokens (0.6.4 on an RTX 3090): the
    estimate at the row's release profiles its ``max_model_len`` as V0 did, and meets the log."""
    rows = {p.index: p for p in V.rows()}
    for i in (12, 13):
        r = V.load()["rows"][i]
        assert r["max_num_batched_tokens"] is None and r["engine"] == "V0"
        assert 1.0 <= rows[i].ratio <= 1.01


@pytest.mark.parametrize("index", [16, 38, 40, 48])
def test_the_sorted_sampler_meets_the_published_1024_sequence_rows(index: int) -> None:
    """vLLM 0.10.0-0.11.2 at 1,024 sequences on H100s and an H200: under at 0.19's rules, within 10% at
    their own release."""
    rows = V.load()["rows"]
    [p] = [p for p in V.rows() if p.index == index]
    at_019 = V.need(rows[index], V.own_settings(rows[index]).model_copy(update={"vllm_version": "0.19"}))
    assert at_019.total < p.took <= p.own.total <= p.took * 1.1


def test_rows_out_of_scope_are_development_builds_unified_memory_and_tensor_parallel_across_nodes() -> None:
    rows = V.load()["rows"]

    def why(r: dict[str, object]) -> bool:
        across = "spans across nodes" in str(r["excerpt"]).replace("\n", "")
        return ".dev" in str(r["vllm"]) or str(r["card"]).startswith("GB10") or across

    out = {p.index for p in V.rows() if p.why_not.startswith("out of scope")}
    printed = {p.index for p in V.rows() if not p.why_not.startswith("not printed")}
    assert out == {i for i, r in enumerate(rows) if why(r)} & printed
    assert {2, 5} <= out  # the two runs whose tensor-parallel group spans nodes (over Ray)


def test_flashinfers_sampler_sorts_nothing_at_any_release() -> None:
    """Where FlashInfer samples (installed, and vLLM logs 'Using FlashInfer for top-p & top-k sampling'),
    the releases that sort do not: a deployment that knows it says so (``flashinfer_sampler``)."""
    run = vllm_run(VllmSettings(vllm_version="0.11", flashinfer_sampler=True), "h100-80g", 80)
    assert run.flashinfer_sampler
    at = vllm_activation(QWEN3, max_seqs=1024, release=(0, 11), flashinfer_sampler=True)
    assert at == vllm_activation(QWEN3, max_seqs=1024)
    assert not vllm_run(VllmSettings(vllm_version="0.11"), "h100-80g", 80).flashinfer_sampler


def test_the_published_runs_that_sampled_with_flashinfer_are_within_ten_percent() -> None:
    """vLLM 0.10.1.1 on A100s whose logs say FlashInfer sampled: within 10% at their own settings, where the
    sort would put them past it; the run whose log says PyTorch's fallback is given no FlashInfer."""
    rows = {p.index: p for p in V.rows()}
    for i in (0, 1):
        assert V.own_settings(V.load()["rows"][i]).flashinfer_sampler
        assert 1.0 <= rows[i].ratio <= 1.1
    assert V.own_settings(V.load()["rows"][2]).flashinfer_sampler is None
