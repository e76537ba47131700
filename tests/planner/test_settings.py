"""The engines' settings: each one's default for the card, what a request sets reaching the option and its
estimate, and bad settings refused naming the field."""

from __future__ import annotations

import pytest

from planner import InvalidInput, Settings, Shape, options
from planner.decide import plan_job
from planner.options import gguf_kv_bytes, original_kv_bytes
from planner.settings import (
    LlamacppSettings,
    VllmSettings,
    is_a100,
    llamacpp_run,
    merged,
    parse_settings,
    vllm_run,
)
from tests.planner.helpers import gguf, gpu_node, original

LLAMA_8B = Shape(kv_bytes_per_token=131_072, kv_heads=8, heads=32, layers=32, hidden=4096, vocab=128_256)


@pytest.mark.parametrize(
    ("gpu_class", "gib", "defaults"),
    [
        ("h100-80g", 80, (8192, 1024)),
        ("h200-141g", 141, (8192, 1024)),
        ("mi300x-192g", 192, (8192, 1024)),
        ("a100-80g", 80, (2048, 256)),  # 70 GiB and more, but an A100
        ("A100-SXM4-80g", 80, (2048, 256)),
        ("a100-40g", 40, (2048, 256)),
        ("l40s-48g", 48, (2048, 256)),
        ("rtx4090-24g", 24, (2048, 256)),
        ("l4-24g", 24, (2048, 256)),
    ],
)
def test_vllm_batch_defaults_follow_vllms_rule(gpu_class: str, gib: int, defaults: tuple[int, int]) -> None:
    """vLLM's ``EngineArgs.get_batch_defaults`` (vllm/engine/arg_utils.py), pinned upstream by
    ``test_defaults_with_usage_context`` (tests/engine/test_arg_utils.py): for the API server 8,192 batched
    tokens and 1,024 sequences on a card of 70 GiB or more whose name is not an A100's, else 2,048 and
    256."""
    run = vllm_run(VllmSettings(), gpu_class, gib)
    assert (run.batched_tokens, run.max_seqs) == defaults
    assert is_a100(gpu_class) == ("a100" in gpu_class.lower())
    given = vllm_run(VllmSettings(max_num_batched_tokens=4096, max_num_seqs=64), gpu_class, gib)
    assert (given.batched_tokens, given.max_seqs) == (4096, 64)


def test_a_24gb_card_and_an_a100_get_vllms_smaller_defaults_and_a_lower_estimate_than_an_h100() -> None:
    """The same model and context: an H100 counts 1,024 sequences' logits, a 24 GB card and an A100 80 GB
    256 (vLLM's arg_utils), so each of them needs less of a card."""
    need = {}
    for gpu_class in ("h100-80g", "a100-80g", "rtx4090-24g"):
        [o] = options([original(14.96)], LLAMA_8B, [gpu_node("n", gpu_class)], 4096)
        assert o.gpus_per_node == 1
        need[gpu_class] = o.need_gb
        assert o.settings[:4] == (
            ("--max-num-batched-tokens", "8192", "--max-num-seqs", "1024")
            if gpu_class == "h100-80g"
            else ("--max-num-batched-tokens", "2048", "--max-num-seqs", "256")
        )
    assert need["a100-80g"] == need["rtx4090-24g"] < need["h100-80g"] - 1.0


def test_llamacpp_defaults_are_llama_servers() -> None:
    run = llamacpp_run(LlamacppSettings())
    assert (run.flash_attn, run.batch, run.ubatch, run.cache_type_k, run.cache_type_v) == (
        True, 2048, 512, "f16", "f16"
    )  # fmt: skip
    assert run.unified and run.cache_tokens(8192) == 8192  # 4 slots sharing one cache of -c tokens
    slots = llamacpp_run(LlamacppSettings(parallel=4))
    assert not slots.unified and slots.cache_tokens(8192) == 32_768
    assert slots.args(8192)[:4] == ("-c", "32768", "-np", "4")


def test_quantised_cache_types_take_ggmls_block_sizes() -> None:
    """q8_0 is 34 bytes a block of 32 values, q4_0 18 (ggml-common.h): against f16's 64."""
    f16 = 64 * 1000
    assert llamacpp_run(LlamacppSettings(cache_type_k="q8_0", cache_type_v="q8_0")).kv_bytes(f16) == 34 * 1000
    assert llamacpp_run(LlamacppSettings(cache_type_k="q4_0", cache_type_v="q4_0")).kv_bytes(f16) == 18 * 1000
    assert llamacpp_run(LlamacppSettings(cache_type_k="q8_0")).kv_bytes(f16) == (34 + 64) * 500


def test_settings_in_a_request_reach_the_option_and_change_the_estimate() -> None:
    nodes = [gpu_node("h", "h100-80g")]
    [plain] = options([original(14.96)], LLAMA_8B, nodes, 32_768)
    fp8 = Settings(vllm=VllmSettings(kv_cache_dtype="fp8", max_num_seqs=256, enforce_eager=True))
    [small] = options([original(14.96)], LLAMA_8B, nodes, 32_768, settings=fp8)
    assert small.settings == (
        "--max-num-batched-tokens", "8192", "--max-num-seqs", "256", "--gpu-memory-utilization", "0.9",
        "--kv-cache-dtype", "fp8", "--enforce-eager",
    )  # fmt: skip
    # the KV cache halves (4 GiB to 2 at 32k tokens), the sampler's logits shrink and no graphs are taken
    assert plain.need_gb - small.need_gb > 2.0 + 1.0
    share = Settings(vllm=VllmSettings(gpu_memory_utilization=0.5))
    [half] = options([original(14.96)], LLAMA_8B, nodes, 32_768, settings=share)
    assert half.need_gb == plain.need_gb and "--gpu-memory-utilization" in half.settings
    assert half.settings[half.settings.index("--gpu-memory-utilization") + 1] == "0.5"
    placed = plan_job([original(14.96)], LLAMA_8B, nodes, 32_768, settings=share)
    assert placed.outcome == "placed" and placed.target == half
    quarter = Settings(vllm=VllmSettings(gpu_memory_utilization=0.25))
    assert plain.need_gb > 20 and options([original(14.96)], LLAMA_8B, nodes, 32_768, settings=quarter) == []
    job = plan_job([original(14.96)], LLAMA_8B, nodes, 32_768, settings=fp8)
    assert job.target is not None and job.target.settings == small.settings


def test_llamacpp_slots_and_cache_types_change_the_estimate() -> None:
    nodes = [gpu_node("h", "h100-80g")]
    art = [gguf("m-Q4_K_M.gguf", 4.6)]
    [one] = options(art, LLAMA_8B, nodes, 8192)
    [four] = options(art, LLAMA_8B, nodes, 8192, settings=Settings(llamacpp=LlamacppSettings(parallel=4)))
    assert four.need_gb - one.need_gb == pytest.approx(3.0, abs=0.1)  # 3 more slots of 1 GiB each
    q8 = Settings(llamacpp=LlamacppSettings(cache_type_k="q8_0", cache_type_v="q8_0"))
    [small] = options(art, LLAMA_8B, nodes, 8192, settings=q8)
    assert one.need_gb - small.need_gb == pytest.approx(1 - 34 / 64, abs=0.01)
    assert "-ctk" in small.settings and small.settings[small.settings.index("-ctk") + 1] == "q8_0"


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"vllm": {"max_num_seqs": 0}}, "settings.vllm.max_num_seqs"),
        ({"vllm": {"max_num_seqs": "many"}}, "settings.vllm.max_num_seqs"),
        ({"vllm": {"kv_cache_dtype": "int3"}}, "settings.vllm.kv_cache_dtype"),
        ({"vllm": {"gpu_memory_utilization": 1.5}}, "settings.vllm.gpu_memory_utilization"),
        ({"vllm": {"max_num_sequences": 8}}, "settings.vllm.max_num_sequences"),
        ({"llamacpp": {"cache_type_k": "q3"}}, "settings.llamacpp.cache_type_k"),
        ({"llamacpp": {"parallel": -1}}, "settings.llamacpp.parallel"),
        ({"llamacpp": {"batch": 512, "ubatch": 2048}}, "settings.llamacpp.ubatch"),
        ({"llamacpp": {"flash_attn": False, "cache_type_v": "q8_0"}}, "settings.llamacpp.cache_type_v"),
        ({"sglang": {}}, "settings.sglang"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(data: object, field: str) -> None:
    with pytest.raises(InvalidInput) as e:
        parse_settings(data, "request")
    assert e.value.field == field, str(e.value)
    assert str(e.value).startswith(f"request: {field}: ")


def test_a_request_takes_the_deployments_settings_where_it_gives_none() -> None:
    deployment = Settings(vllm=VllmSettings(max_num_seqs=128, kv_cache_dtype="fp8"))
    request = Settings(vllm=VllmSettings(max_num_seqs=512))
    got = merged(request, deployment)
    assert (got.vllm.max_num_seqs, got.vllm.kv_cache_dtype, got.vllm.enforce_eager) == (512, "fp8", None)


def test_a_hybrids_state_is_counted_once_for_vllm_and_for_every_llamacpp_slot() -> None:
    hybrid = Shape(kv_bytes_per_token=24_576, kv_heads=2, heads=16, state_bytes_per_sequence=64 << 20)
    plain = Shape(kv_bytes_per_token=24_576, kv_heads=2, heads=16)
    assert original_kv_bytes(hybrid, 4096) - original_kv_bytes(plain, 4096) == 64 << 20
    slots = Settings(llamacpp=LlamacppSettings(parallel=2))
    assert gguf_kv_bytes(hybrid, 4096, slots) - gguf_kv_bytes(plain, 4096, slots) == 2 * 2 * (64 << 20)
    assert gguf_kv_bytes(hybrid, 4096) - gguf_kv_bytes(plain, 4096) == 4 * 2 * (64 << 20)  # 4 slots by default


@pytest.mark.parametrize(
    ("cache_ram_mib", "flag", "counted_mib"),
    [(None, ("--cache-ram", "0"), 0), (512, ("--cache-ram", "512"), 512), (-1, None, 0)],
    ids=["default: none", "bounded: counted", "left out"],
)
def test_llama_servers_prompt_cache_is_off_or_counted(
    cache_ram_mib: int | None, flag: tuple[str, str] | None, counted_mib: int
) -> None:
    """llama-server keeps idle slots' prompts in RAM up to ``--cache-ram`` (8,192 MiB by default in the
    releases that have it): a plan starts it with none, or counts the bound it is given."""
    from tests.planner.helpers import cpu_node

    run = llamacpp_run(LlamacppSettings(cache_ram_mib=cache_ram_mib))
    args = run.args(4096)
    assert (args[-2:] == flag) if flag else "--cache-ram" not in args
    settings = Settings(llamacpp=LlamacppSettings(cache_ram_mib=cache_ram_mib))
    base = options([gguf("m-Q4_K_M.gguf", 4.0)], LLAMA_8B, [cpu_node("c", 64)], 4096)[0]
    [opt] = options([gguf("m-Q4_K_M.gguf", 4.0)], LLAMA_8B, [cpu_node("c", 64)], 4096, settings=settings)
    assert opt.cpu and round((opt.need_gb - base.need_gb) * 1024) == counted_mib
