"""The estimate as a choice: what the planner reads of a model for it, and each option saying which one
counted it."""

from __future__ import annotations

import dataclasses

import pytest

from planner import ESTIMATES, PoolNode, Shape, options, repository_from_listing
from planner.decide import plan_job, why_unfit
from planner.estimate import engine_shape
from planner.shape import shape_from_config
from tests.planner.helpers import gguf, gpu_node, original

LLAMA_8B = Shape(kv_bytes_per_token=131_072, kv_heads=8, heads=32, layers=32, hidden=4096, vocab=128_256)
L4 = [gpu_node("l4", "l4-24g", gpus=2, host=192)]


def test_the_config_tells_the_estimate_layers_hidden_vocabulary_and_experts() -> None:
    dense = shape_from_config(
        {"model_type": "llama", "num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096,
         "num_key_value_heads": 8, "vocab_size": 128_256, "max_position_embeddings": 131_072}
    )  # fmt: skip
    assert (dense.layers, dense.hidden, dense.vocab, dense.experts) == (32, 4096, 128_256, 0)
    moe = shape_from_config(
        {"model_type": "mixtral", "num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096,
         "num_key_value_heads": 8, "vocab_size": 32_000, "num_local_experts": 8}
    )  # fmt: skip
    assert moe.experts == 8 and engine_shape(moe).moe
    assert engine_shape(Shape(0, vision_params=1, params=2)).multimodal
    assert not engine_shape(Shape(0, vision_params=1, params=2), gguf=True).multimodal  # the projector is apart


def test_measured_takes_one_l4_where_the_seed_takes_two() -> None:
    """Llama-3.1-8B in bf16 at 16k tokens on 24 GB cards: 15 GiB of weights, 2 GiB of KV cache and vLLM's
    own 2.0 GiB (0.5 GiB outside torch, 0.5 of activations for the 256 sequences and 2,048 batched tokens
    vLLM defaults to on a card under 70 GiB, 1.0 of graphs) fit one card's 21.6 GiB; with the seed's
    2 GiB + weights/5 they do not."""
    art = original(14.96)
    by = {e: options([art], LLAMA_8B, L4, 16_384, e)[0] for e in ESTIMATES}
    assert (by["measured"].gpus_per_node, by["seed"].gpus_per_node) == (1, 2)
    assert (by["measured"].estimate, by["seed"].estimate) == ("measured", "seed")
    assert by["measured"].need_gb == pytest.approx(18.98, abs=0.01)


def test_llamacpp_measured_is_flat_where_the_seed_grows_with_the_file() -> None:
    small, big = gguf("m-Q4_K_M.gguf", 4.6), gguf("m-BF16.gguf", 15)
    cpu = [PoolNode("cpu", host_mem_gb=128, host_free_gb=128)]
    for e, grows in ((ESTIMATES[0], False), (ESTIMATES[1], True)):
        [a] = options([small], LLAMA_8B, cpu, 4096, e)
        [b] = options([big], LLAMA_8B, cpu, 4096, e)
        engine_a, engine_b = a.need_gb - 4.6 - 0.5, b.need_gb - 15 - 0.5
        assert (engine_b > engine_a + 0.1) is grows, e


def test_thin_data_is_said_in_the_option() -> None:
    unknown = Shape(kv_bytes_per_token=131_072, kv_heads=8)
    # a node that reports its driver: the graphs' error at an unreported one is said too otherwise
    current = dataclasses.replace(gpu_node("h", "h100-80g"), gpu_vendor="nvidia", gpu_driver="570.195.03")
    [o] = options([original(14.96)], unknown, [current], 4096)
    assert o.margin == "model shape unknown"
    assert o.to_json()["margin"] == "model shape unknown"
    [seed] = options([original(14.96)], unknown, [gpu_node("h", "h100-80g")], 4096, "seed")
    assert seed.margin == "" and "margin" not in seed.to_json()


def test_a_job_and_its_failure_are_counted_with_its_estimate() -> None:
    art = original(14.96)
    assert plan_job([art], LLAMA_8B, L4, 16_384, estimate="seed").target.gpus == 2  # type: ignore[union-attr]
    assert plan_job([art], LLAMA_8B, L4, 16_384, estimate="measured").target.gpus == 1  # type: ignore[union-attr]
    one_card = [gpu_node("l4", "l4-24g", gpus=1, host=0)]
    assert "needs 21.0 GiB a card" in why_unfit([art], LLAMA_8B, one_card, 32_768, "measured")
    assert "needs 24.0 GiB a card" in why_unfit([art], LLAMA_8B, one_card, 32_768, "seed")


def test_an_example_repository_plans_with_both() -> None:
    repo = repository_from_listing(
        [{"path": "model.safetensors", "size": 16_060_522_496}],
        {"model_type": "llama", "num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096,
         "num_key_value_heads": 8, "vocab_size": 128_256, "max_position_embeddings": 131_072}, None,
    )  # fmt: skip
    assert repo.shape.vocab == 128_256
    measured, seed = (options(repo.artifacts, repo.shape, L4, 16_384, e) for e in ESTIMATES)
    assert measured[0].gpus < seed[0].gpus
