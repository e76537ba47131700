"""The planner's safety rules, each test naming its rule: the ranking's order, the KV cache's arithmetic,
and waiting rather than falling to a worse option. ``scripts/mutate`` breaks each rule in a copy of the
code and expects these to fail."""

from __future__ import annotations

from planner import Shape, options, rank, shape_from_config
from planner.constants import GIB
from planner.decide import plan_job
from planner.parallel import llamacpp_kv_bytes, vllm_kv_bytes
from tests.planner.helpers import cpu_node, gguf, gpu_node, original

KV_70B = Shape(kv_bytes_per_token=327_680, kv_heads=8, heads=64)
"""Llama 3.1 70B's KV cache: 80 layers x 8 KV heads x (128 + 128) x 2 bytes a token."""

KV_8B = Shape(kv_bytes_per_token=131_072, kv_heads=8, heads=32)


def test_fewer_cards_rank_before_better_precision() -> None:
    """Rule: the ranking puts the fewest cards before the better precision: a Q4 file on one card comes
    before a Q8 file on two, free or not."""
    nodes = [gpu_node("gpu-1", "h100-80g", gpus=2)]
    ranked = options([gguf("m-Q8_0.gguf", 70), gguf("m-Q4_K_M.gguf", 40)], KV_70B, nodes, 8192)
    assert [(o.artifact, o.gpus) for o in ranked] == [("m-Q4_K_M.gguf", 1), ("m-Q8_0.gguf", 2)]
    assert ranked[0].bits_per_weight < ranked[1].bits_per_weight
    # the same order from the other side, and with the one-card option busy
    busy = [gpu_node("gpu-1", "h100-80g", gpus=2, free=1)]
    reranked = list(reversed(options([gguf("m-Q8_0.gguf", 70), gguf("m-Q4_K_M.gguf", 40)], KV_70B, busy, 8192)))
    rank(reranked)
    assert [(o.artifact, o.gpus) for o in reranked] == [("m-Q4_K_M.gguf", 1), ("m-Q8_0.gguf", 2)]


def test_a_card_ranks_before_the_cpu() -> None:
    """Rule: any card ranks before the CPU, busy or free, whatever the precision."""
    nodes = [gpu_node("gpu-1", "h100-80g", gpus=1, free=0, host=16), cpu_node("cpu-1", 256)]
    ranked = options([gguf("m-Q4_K_M.gguf", 4.6), gguf("m-F16.gguf", 15)], KV_8B, nodes, 8192)
    assert [o.cpu for o in ranked] == [False, False, True, True]
    assert not ranked[0].free_now and all(o.free_now for o in ranked if o.cpu)


def test_busy_cards_rank_by_their_hardware() -> None:
    """Rule: whether cards are free now only breaks a tie: one busy card ranks before two free ones, and a
    busy card before a free CPU; between equal hardware the free one comes first."""
    nodes = [
        gpu_node("busy", "h100-80g", gpus=1, free=0, host=16),
        gpu_node("pair", "a100-40g", gpus=2, host=16),
        cpu_node("cpu-1", 256),
    ]
    ranked = options([gguf("m-Q4_K_M.gguf", 40)], KV_70B, nodes, 8192)
    assert [(o.gpu_class, o.gpus, o.free_now) for o in ranked] == [
        ("h100-80g", 1, False),
        ("a100-40g", 2, True),
        ("", 0, True),
    ]
    tie = [gpu_node("busy", "h100-80g", gpus=1, free=0), gpu_node("free", "a100-40g", gpus=1)]
    ranked = options([original(15)], KV_8B, tie, 8192)
    assert [(o.gpu_class, o.free_now) for o in ranked] == [("a100-40g", True), ("h100-80g", False)]


LLAMA_8B_CONFIG = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
}


def test_kv_cache_bytes_per_token_of_a_plain_decoder() -> None:
    """Rule: the KV cache a token takes is layers x KV heads x (key + value head widths) x 2 bytes, and
    an engine's cache for a context is that times the tokens."""
    shape = shape_from_config(LLAMA_8B_CONFIG)
    assert shape.kv_bytes_per_token == 32 * 8 * (128 + 128) * 2 == 131_072
    assert vllm_kv_bytes(shape, 8192) == llamacpp_kv_bytes(shape, 8192) == 131_072 * 8192 == GIB
    wider_keys = shape_from_config({**LLAMA_8B_CONFIG, "head_dim": 192, "v_head_dim": 128})
    assert wider_keys.kv_bytes_per_token == 32 * 8 * (192 + 128) * 2


def test_a_job_whose_best_cards_are_busy_waits() -> None:
    """Rule: a job whose best option's cards are busy waits for them: it does not drop to a worse option
    (the CPU, free now), nor fail. Only a job that allows fallbacks runs elsewhere meanwhile."""
    nodes = [gpu_node("gpu-1", "h100-80g", gpus=1, free=0, host=16), cpu_node("cpu-1", 256)]
    arts = [gguf("m-Q4_K_M.gguf", 4.6)]
    plan = plan_job(arts, KV_8B, nodes, 8192)
    assert plan.outcome == "waiting" and plan.target is not None and not plan.target.cpu
    [replica] = plan.replicas
    assert (replica.state, replica.option, replica.holds) == ("waiting", None, ())
    assert replica.wait is not None and replica.wait.kind == "resources" and replica.wait.nodes == ("gpu-1",)
    with_fallback = plan_job(arts, KV_8B, nodes, 8192, fallback=True)
    [replica] = with_fallback.replicas
    assert replica.state == "fallback" and replica.option is not None and replica.option.cpu
    assert [h.node_id for h in replica.holds] == ["cpu-1"]
