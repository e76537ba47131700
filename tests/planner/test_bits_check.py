"""Every reading checked against the bytes: the parameters a config implies, at the dtype or quantisation
it names, must come to the weights' size; a reading at bits a weight no format stores is refused in one
line, and the safetensors headers, where given, win over the config."""

from __future__ import annotations

import math
from typing import Any

import pytest

from planner import InvalidInput, repository_from_listing
from tests.planner.test_weights import header

HIDDEN, LAYERS, VOCAB, EXPERTS, WIDTH = 64, 4, 1024, 24, 96


def moe_config() -> dict[str, Any]:
    """A mixture of experts whose expert count sits under keys no reader knows: it reads as a dense
    decoder of ``intermediate_size``."""
    return {
        "model_type": "mystery_moe",
        "architectures": ["MysteryMoeForCausalLM"],
        "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": WIDTH,
        "expert_count_per_layer": EXPERTS,
        "expert_ffn_width": WIDTH,
        "vocab_size": VOCAB,
        "torch_dtype": "bfloat16",
    }


def moe_header() -> dict[str, Any]:
    """The weights that config's model holds: 24 experts a layer and a router."""
    t: dict[str, tuple[str, list[int]]] = {"model.embed_tokens.weight": ("BF16", [VOCAB, HIDDEN])}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t |= {p + f"self_attn.{x}_proj.weight": ("BF16", [32 if x in "kv" else HIDDEN, HIDDEN]) for x in "qkvo"}
        t[p + "mlp.gate.weight"] = ("BF16", [EXPERTS, HIDDEN])
        for e in range(EXPERTS):
            for m, s in (("gate", [WIDTH, HIDDEN]), ("up", [WIDTH, HIDDEN]), ("down", [HIDDEN, WIDTH])):
                t[p + f"mlp.experts.{e}.{m}_proj.weight"] = ("BF16", s)
    t["lm_head.weight"] = ("BF16", [VOCAB, HIDDEN])
    return header(t)


def params_and_bytes(head: dict[str, Any]) -> tuple[int, int]:
    tensors = [t for name, t in head.items() if name != "__metadata__"]
    return sum(math.prod(t["shape"]) for t in tensors), max(t["data_offsets"][1] for t in tensors)


def test_an_moe_under_unknown_keys_is_refused_without_headers_never_read_at_an_impossible_precision() -> None:
    params, size = params_and_bytes(moe_header())
    files = [{"path": "model.safetensors", "size": size}]
    with pytest.raises(InvalidInput) as e:
        repository_from_listing(files, moe_config())
    line = str(e.value)
    assert "\n" not in line
    # it names the disagreement: the count, the bytes, the bits and what the dtype allows
    assert "the config's shapes give" in line and f"hold {size:,} bytes" in line
    assert "bits a weight, past the 20 its dtype bf16 allows" in line
    assert "config and the weights disagree" in line
    assert params > 5 * int(line.split(" give ")[1].split(" parameters")[0].replace(",", ""))


def test_an_moe_under_unknown_keys_is_read_from_its_headers() -> None:
    head = moe_header()
    params, size = params_and_bytes(head)
    files = [{"path": "model.safetensors", "size": size + 8 + 4096}]  # the header's JSON besides
    repo = repository_from_listing(files, moe_config(), headers=head)
    assert repo.shape.params == params
    bits = repo.artifacts[-1].weights_bytes * 8 / repo.shape.params
    assert 16 <= bits < 16.5
    assert any("the config's shapes count" in n and "the weights win" in n for n in repo.notes)
    # attention is what the config says: 4 layers of 2 KV heads x 16, keys and values
    assert repo.shape.kv_bytes_per_token == LAYERS * 2 * 32 * 2


@pytest.mark.parametrize(
    ("size", "quant", "words"),
    [
        (1, {}, "under the 1 any format stores"),
        (10**9, {"quantization_config": {"quant_method": "awq", "bits": 4}}, "past the 20 its quantisation awq-int4"),
        (10**9, {"torch_dtype": None}, r"past the 40 float32 \(it names no dtype\) allows"),
    ],
)
def test_bits_no_format_stores_are_refused(size: int, quant: dict[str, Any], words: str) -> None:
    files = [{"path": "model.safetensors", "size": size}]
    config = {**moe_config(), **quant}
    with pytest.raises(InvalidInput, match=words):
        repository_from_listing(files, config)


def test_a_reading_within_the_dtype_stands_without_a_word() -> None:
    config = {**moe_config(), "expert_count_per_layer": None}
    dense = {**config, "model_type": "llama"}
    # the dense reading: embeddings and head, 4 layers of attention and a gated MLP, the norms
    counted = 2 * VOCAB * HIDDEN + LAYERS * (2 * HIDDEN * HIDDEN + 2 * 32 * HIDDEN + 3 * HIDDEN * WIDTH + 2 * HIDDEN)
    repo = repository_from_listing([{"path": "model.safetensors", "size": 2 * counted + 4096}], dense)
    assert repo.shape.params == counted + HIDDEN
    assert repo.notes == ()


def listed_config() -> dict[str, Any]:
    """A family no rule names whose MLP width is listed a layer each (as Gemma 3n's is)."""
    return {**moe_config(), "expert_count_per_layer": None, "intermediate_size": [WIDTH, 2 * WIDTH, WIDTH, 2 * WIDTH]}


def listed_header() -> dict[str, Any]:
    t: dict[str, tuple[str, list[int]]] = {"model.embed_tokens.weight": ("BF16", [VOCAB, HIDDEN])}
    for i, width in enumerate(listed_config()["intermediate_size"]):
        p = f"model.layers.{i}."
        t |= {p + f"self_attn.{x}_proj.weight": ("BF16", [32 if x in "kv" else HIDDEN, HIDDEN]) for x in "qkvo"}
        t |= {
            p + f"mlp.{m}_proj.weight": ("BF16", [width, HIDDEN] if m != "down" else [HIDDEN, width])
            for m in ("gate", "up", "down")
        }
    t["lm_head.weight"] = ("BF16", [VOCAB, HIDDEN])
    return header(t)


def test_per_layer_lists_are_read_right_with_or_without_headers() -> None:
    head = listed_header()
    params, size = params_and_bytes(head)
    files = [{"path": "model.safetensors", "size": size}]
    from_config = repository_from_listing(files, listed_config())
    assert abs(from_config.shape.params - params) <= 0.01 * params
    assert from_config.notes == ()
    from_headers = repository_from_listing(files, listed_config(), headers=head)
    assert from_headers.shape.params == params
    assert 15.9 < from_headers.artifacts[-1].weights_bytes * 8 / params <= 16


def test_a_per_layer_list_the_reader_does_not_know_is_refused_in_one_line() -> None:
    config = {**listed_config(), "num_key_value_heads": [2, 2, 1, 1]}
    with pytest.raises(InvalidInput, match=r"num_key_value_heads: must be a whole number .*given \[2, 2, 1, 1\]") as e:
        repository_from_listing([{"path": "model.safetensors", "size": 10**6}], config)
    assert "\n" not in str(e.value)


def test_gguf_files_the_config_count_belies_are_refused() -> None:
    params, _ = params_and_bytes(moe_header())
    q4 = int(params * 4.8 / 8)  # the whole mixture at Q4_K_M
    with pytest.raises(InvalidInput, match=r"m-Q4_K_M.gguf holds .* bits a weight, past the 10.6 its quant Q4_K_M"):
        repository_from_listing([{"path": "m-Q4_K_M.gguf", "size": q4}], moe_config())
    # a dense model at its quant's bits stands
    dense = {**moe_config(), "model_type": "llama", "expert_count_per_layer": None}
    repo = repository_from_listing([{"path": "m-Q4_K_M.gguf", "size": 160_000}], dense)
    assert 4 < repo.artifacts[0].bytes * 8 / repo.shape.params < 10.6
