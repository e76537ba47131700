"""Configs as the Hub has them: quantised originals, model-type defaults, other architectures' names, rope
scaling, vLLM's tensor-parallel rules, MLA, sliding windows, odd files and labels. Each from a small
inline config; the corpus test checks the same on real ones."""

from __future__ import annotations

from typing import Any

import pytest

from planner import InvalidInput, Shape, check_context, options, parse_node, plan, repository_from_listing
from planner.constants import GIB
from planner.parallel import llamacpp_kv_bytes, vllm_kv_bytes, vllm_tp_allowed
from planner.shape import shape_from_config
from tests.planner.helpers import gpu_node, original

LLAMA_8B: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
}
LLAMA_8B_PARAMS = 128256 * 4096 * 2 + 32 * (4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336) + 65 * 4096


def listing(gib: float, name: str = "model.safetensors") -> list[dict[str, Any]]:
    return [{"path": name, "size": int(gib * GIB)}]


# --- quantised originals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("quantization_config", "quant"),
    [
        ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8"),
        ({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm"}, "awq-int4"),
        ({"quant_method": "gptq", "bits": 4, "group_size": 128}, "gptq-int4"),
        ({"quant_method": "gptq", "bits": 8}, "gptq-int8"),
        ({"quant_method": "mxfp4"}, "mxfp4"),
        ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "bnb-nf4"),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}},
            },
            "fp8",
        ),
        (
            {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int"}}}},
            "int4",
        ),
    ],
)
def test_a_quantised_original_is_named_for_its_quant(quantization_config: dict[str, Any], quant: str) -> None:
    repo = repository_from_listing(listing(5), {**LLAMA_8B, "quantization_config": quantization_config})
    [original] = repo.artifacts
    assert original.quant == quant
    assert repo.shape.params == LLAMA_8B_PARAMS  # from the shapes: the files are no 16-bit count


def test_modelopt_hf_quant_config_names_the_quant_and_keeps_the_index_out() -> None:
    hf_quant = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8", "exclude_modules": ["lm_head"]}}
    index = {"metadata": {"total_size": 9_000_000_000}}  # FP8 weights: these bytes are no bf16 count
    repo = repository_from_listing(listing(8.4), LLAMA_8B, index, hf_quant=hf_quant)
    assert repo.artifacts[0].quant == "fp8"
    assert repo.shape.params == LLAMA_8B_PARAMS


def test_real_bits_rank_an_int4_original_below_a_q5_and_an_fp8_above_it() -> None:
    q5 = {"path": "m-Q5_K_M.gguf", "size": int(5.3 * GIB)}
    awq = {**LLAMA_8B, "quantization_config": {"quant_method": "awq", "bits": 4}}
    ranked = plan(repository_from_listing([*listing(4.7), q5], awq), [gpu_node("n", "l40s-48g")], 4096)
    assert [(o.artifact, round(o.bits_per_weight, 2)) for o in ranked] == [("m-Q5_K_M.gguf", 5.67), ("original", 5.03)]
    fp8 = {**LLAMA_8B, "quantization_config": {"quant_method": "fp8"}}
    ranked = plan(repository_from_listing([*listing(8.5), q5], fp8), [gpu_node("n", "l40s-48g")], 4096)
    assert [(o.artifact, round(o.bits_per_weight, 2)) for o in ranked] == [("original", 9.09), ("m-Q5_K_M.gguf", 5.67)]


def test_an_fp32_original_is_loaded_at_16_bits() -> None:
    repo = repository_from_listing(listing(30), {**LLAMA_8B, "torch_dtype": "float32"})
    [original] = repo.artifacts
    assert (original.quant, original.bytes, original.load_bytes) == ("fp32", int(30 * GIB), int(30 * GIB) // 2)
    [o] = options(repo.artifacts, repo.shape, [gpu_node("n", "h100-80g")], 4096)
    assert o.bits_per_weight == pytest.approx(int(30 * GIB) // 2 * 8 / LLAMA_8B_PARAMS)
    assert repository_from_listing(listing(15), {**LLAMA_8B, "torch_dtype": "float16"}).artifacts[0].quant == "fp16"


# --- configs as transformers reads them ------------------------------------------------------------------


def test_llava_15_text_config_takes_llamas_defaults() -> None:
    llava = {
        "model_type": "llava",
        "text_config": {"model_type": "llama", "max_position_embeddings": 4096, "vocab_size": 32064},
        "vision_config": {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24},
    }
    shape = shape_from_config(llava)
    assert (shape.kv_bytes_per_token, shape.kv_heads, shape.heads, shape.max_context) == (
        2 * 32 * 32 * 128 * 2,
        32,
        32,
        4096,
    )
    text = 32064 * 4096 * 2 + 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008) + 65 * 4096
    vision = 24 * (4 * 1024 * 1024 + 2 * 1024 * 4096) + 3 * 14 * 14 * 1024 + 1024 * 4096 + 4096 * 4096
    assert shape.params == text + vision


def test_gemma3_4b_takes_gemma3_text_defaults_and_its_windows() -> None:
    gemma3 = {
        "model_type": "gemma3",
        "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                        "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                        "sliding_window": 1024},
    }  # fmt: skip
    shape = shape_from_config(gemma3)
    assert (shape.heads, shape.kv_heads, shape.kv_bytes_per_token) == (8, 4, 2 * 34 * 4 * 256 * 2)
    assert shape.max_context == 131072  # Gemma 3's 128k is already scaled: vLLM does not multiply it
    assert shape.windows == ((1024, 29 * 2 * 4 * 256 * 2),)  # every sixth layer full: 5 of 34


def test_a_field_still_missing_names_the_model_type() -> None:
    with pytest.raises(InvalidInput, match=r"text_config\): num_attention_heads: missing \(model type 'mystery'"):
        shape_from_config({"text_config": {"model_type": "mystery", "num_hidden_layers": 2}})


@pytest.mark.parametrize(
    ("config", "kv_per_token", "kv_heads"),
    [
        # falcon-7b: multi-query, one KV head of 64
        ({"model_type": "falcon", "hidden_size": 4544, "n_head": 71, "n_layer": 32, "multi_query": True},
         2 * 32 * 64 * 2, 1),
        # falcon-40b: the new decoder architecture's 8 KV heads
        ({"model_type": "falcon", "hidden_size": 8192, "num_attention_heads": 128, "num_hidden_layers": 60,
          "new_decoder_architecture": True, "num_kv_heads": 8}, 2 * 60 * 8 * 64 * 2, 8),
        # RefinedWeb's names
        ({"model_type": "RefinedWeb", "hidden_size": 8192, "n_head": 128, "n_layer": 60, "n_head_kv": 8,
          "new_decoder_architecture": True}, 2 * 60 * 8 * 64 * 2, 8),
        ({"model_type": "gpt2", "n_embd": 1600, "n_head": 25, "n_layer": 48, "n_positions": 1024},
         2 * 48 * 25 * 64 * 2, 25),
        ({"model_type": "gptj", "n_embd": 4096, "n_head": 16, "n_layer": 28}, 2 * 28 * 16 * 256 * 2, 16),
        # ChatGLM: kv_channels, num_layers, and multi_query_group_num with multi_query_attention
        ({"model_type": "chatglm", "num_layers": 40, "hidden_size": 4096, "num_attention_heads": 32, "kv_channels": 128,
          "multi_query_attention": True, "multi_query_group_num": 2, "seq_length": 131072}, 2 * 40 * 2 * 128 * 2, 2),
    ],
)  # fmt: skip
def test_other_architectures_names(config: dict[str, Any], kv_per_token: int, kv_heads: int) -> None:
    shape = shape_from_config(config)
    assert (shape.kv_bytes_per_token, shape.kv_heads) == (kv_per_token, kv_heads)


# --- context limits -------------------------------------------------------------------------------------


def test_rope_scaling_extends_the_limit_as_vllm_derives_it() -> None:
    yarn = {**LLAMA_8B, "max_position_embeddings": 32768}
    yarn["rope_scaling"] = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    shape = shape_from_config(yarn)
    assert shape.max_context == 131072
    assert check_context(shape, 131072) == 131072
    with pytest.raises(InvalidInput, match=r"131073 is more than the model's 131072 tokens \(rope_scaling"):
        check_context(shape, 131073)
    dynamic = {**LLAMA_8B, "max_position_embeddings": 4096, "rope_scaling": {"type": "dynamic", "factor": 2.0}}
    assert shape_from_config(dynamic).max_context == 8192
    llama3 = {**LLAMA_8B, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}
    assert shape_from_config(llama3).max_context == 131072  # already the extended length
    with pytest.raises(InvalidInput, match=r"more than the model's max_position_embeddings 131072$"):
        check_context(shape_from_config(llama3), 131073)


# --- vLLM's parallel rules -------------------------------------------------------------------------------


def test_tp_widths_as_vllm_accepts_them() -> None:
    qwen3_235b = Shape(0, kv_heads=4, heads=64)
    assert [w for w in (1, 2, 4, 8, 16) if vllm_tp_allowed(qwen3_235b, w)] == [1, 2, 4, 8, 16]
    assert not vllm_tp_allowed(Shape(0, kv_heads=4, heads=28), 8)  # Qwen2.5-7B: 28 heads do not divide by 8
    assert not vllm_tp_allowed(Shape(0, kv_heads=6, heads=48), 4)  # 4 neither divides 6 nor is a multiple
    assert vllm_tp_allowed(Shape(0, kv_heads=128, heads=128, mla=True), 8)
    # the attention heads unknown: the seed's rule, the KV heads divide by the width
    assert not vllm_tp_allowed(Shape(0, kv_heads=4), 8)


def test_four_kv_heads_run_on_eight_cards_with_replicated_heads() -> None:
    shape = Shape(kv_bytes_per_token=94 * 2 * 4 * 128 * 2, kv_heads=4, heads=64)
    nodes = [gpu_node("n", "h100-80g", gpus=8)]
    [o] = options([original(438)], shape, nodes, 8192, estimate="seed")
    assert (o.gpus_per_node, o.nodes) == (8, 1)
    weights = int(438 * GIB)
    kv = 8192 * shape.kv_bytes_per_token
    # eight cards each hold one of the four KV heads: twice the model's cache across the node
    assert o.need_gb == pytest.approx((weights + 2 * kv) / 8 / GIB + 2 + weights / 8 / 5 / GIB)
    # the seed's rule where the attention heads are unknown: the width divides the KV heads
    assert options([original(438)], Shape(shape.kv_bytes_per_token, kv_heads=4), nodes, 8192, estimate="seed") == []


def test_mla_latent_is_whole_on_every_card() -> None:
    shape = Shape(kv_bytes_per_token=61 * (512 + 64) * 2, kv_heads=128, heads=128, mla=True)
    nodes = [gpu_node("n", "h200-141g", gpus=8)]
    [o] = options([original(642)], shape, nodes, 131072, estimate="seed")
    kv = 131072 * shape.kv_bytes_per_token  # 8.58 GiB, on each of the 8 cards
    assert o.gpus_per_node == 8
    assert o.need_gb == pytest.approx((int(642 * GIB) + 8 * kv) / 8 / GIB + 2 + int(642 * GIB) / 8 / 5 / GIB)
    assert kv / GIB == pytest.approx(8.58, abs=0.01)


# --- sliding windows -----------------------------------------------------------------------------------


def test_window_layers_are_counted_as_each_engine_keeps_them() -> None:
    gemma2 = {"model_type": "gemma2", "num_hidden_layers": 42, "num_attention_heads": 16, "num_key_value_heads": 8,
              "head_dim": 256, "hidden_size": 3584, "sliding_window": 4096}  # fmt: skip
    shape = shape_from_config(gemma2)
    per_layer = 2 * 8 * 256 * 2
    assert shape.kv_bytes_per_token == 42 * per_layer and shape.windows == ((4096, 21 * per_layer),)
    context = 32768
    full = context * 21 * per_layer
    # vLLM: window - 1 + 8192 batched tokens, in blocks of 16, plus a block
    vllm_tokens = (-(-(4095 + 8192) // 16) + 1) * 16
    assert vllm_kv_bytes(shape, context) == full + vllm_tokens * 21 * per_layer
    # llama.cpp: 4 slots of the window and a micro-batch of 512, padded to 256 cells
    assert llamacpp_kv_bytes(shape, context) == full + (4 * 4096 + 512) * 21 * per_layer
    # a short context: the whole of it on every layer
    assert vllm_kv_bytes(shape, 2048) == llamacpp_kv_bytes(shape, 2048) == 2048 * shape.kv_bytes_per_token
    # Qwen2's window is off unless use_sliding_window; Mistral 7B v0.1's (every layer) is counted whole
    assert shape_from_config({**LLAMA_8B, "model_type": "qwen2", "sliding_window": 4096}).windows == ()
    assert shape_from_config({**LLAMA_8B, "model_type": "mistral", "sliding_window": 4096}).windows == ()


# --- files and labels -----------------------------------------------------------------------------------


def test_pytorch_bin_originals_when_there_is_no_safetensors() -> None:
    files = [{"path": f"pytorch_model-0000{i}-of-00002.bin", "size": 7 * GIB} for i in (1, 2)]
    [original] = repository_from_listing(files, LLAMA_8B).artifacts
    assert (original.name, original.format, original.bytes, original.shards) == ("original", "pytorch", 14 * GIB, 2)
    both = files + listing(15)
    assert [a.format for a in repository_from_listing(both, LLAMA_8B).artifacts] == ["safetensors"]


def test_projectors_and_importance_matrices_anywhere_in_the_name_are_not_artifacts() -> None:
    files = [
        {"path": "llava-v1.6-mmproj-f16.gguf", "size": 600},
        {"path": "imatrix.gguf", "size": 9},
        {"path": "Model-imatrix.gguf", "size": 9},
        {"path": "m-Q4_K_M.gguf", "size": 4_920_000_000},  # an 8B at Q4_K_M
    ]
    assert [a.name for a in repository_from_listing(files, LLAMA_8B).artifacts] == ["m-Q4_K_M.gguf"]


def test_an_adapter_alone_is_refused_naming_its_base() -> None:
    files = [{"path": "adapter_config.json", "size": 700}, {"path": "adapter_model.safetensors", "size": 160 << 20}]
    adapter = {"base_model_name_or_path": "meta-llama/Meta-Llama-3-8B-Instruct", "peft_type": "LORA"}
    with pytest.raises(
        InvalidInput, match=r"an adapter, not a model: serve its base model 'meta-llama/Meta-Llama-3-8B"
    ):
        repository_from_listing(files, None, adapter=adapter)
    with pytest.raises(InvalidInput, match=r"an adapter, not a model: serve its base model"):
        repository_from_listing(files[1:], adapter)  # adapter_config.json given where config.json goes


def test_a_label_past_any_card_is_refused() -> None:
    record = {"node_id": "n", "gpu_class": "x-" + "9" * 21 + "g", "gpus": 1, "host_mem_gb": 64, "host_free_gb": 64}
    with pytest.raises(InvalidInput, match=r"names a card of 9+ GiB, past 1048576"):
        parse_node(record)
    assert parse_node({**record, "gpu_class": "rtx4090-24gig"}).card_gb == 24
    assert parse_node({**record, "gpu_class": "a100-80GB"}).card_gb == 80
