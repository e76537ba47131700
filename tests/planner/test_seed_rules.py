"""Each rule of the seed planner, pinned: every test here fails if its rule changes."""

from __future__ import annotations

import json
from functools import partial

import pytest

from planner import Option, PoolNode, Shape, classes, mem_from_class, quality, quant_of, rank
from planner import options as any_options
from planner.constants import (
    GIB,
    HOST_SHARE,
    USABLE_FRACTION,
    card_budget_gb,
    fits,
    gguf_overhead_bytes,
    gib,
    vllm_overhead_bytes,
)
from planner.options import grouped
from planner.quant import QUANT_BITS, bits_of
from tests.planner.helpers import cpu_node, gguf, gpu_node, original

NO_KV = Shape(kv_bytes_per_token=0)

options = partial(any_options, estimate="seed")
"""The seed's rules are counted with the seed's estimate, the named choice ``seed``."""


# --- the four names the seed left undefined -------------------------------------------------------------


def test_gb_is_gib() -> None:
    assert gib(3 * (1 << 30)) == 3.0
    assert gib(1_000_000_000) == pytest.approx(0.9313, abs=1e-4)


def test_a_card_counts_for_its_usable_fraction() -> None:
    assert USABLE_FRACTION == 0.90
    assert card_budget_gb(80) == pytest.approx(72.0)
    assert fits(72.0, 80) and not fits(72.01, 80)


def test_overheads() -> None:
    assert gguf_overhead_bytes(20 * GIB) == GIB + GIB
    assert vllm_overhead_bytes(10 * GIB) == 2 * GIB + 2 * GIB


# --- the CPU branch -------------------------------------------------------------------------------------


def test_cpu_holds_the_whole_replica_within_85_percent_of_ram() -> None:
    art = gguf("m-Q8_0.gguf", 60)  # 60 + 1 + 3 = 64 GiB with no cache
    kv = Shape(kv_bytes_per_token=1024)
    nodes = [cpu_node("small", 70), cpu_node("big", 100, host_free=10), cpu_node("bigger", 120, host_free=64)]
    [cpu] = [o for o in options([art], kv, nodes, context=GIB // 1024) if o.cpu]  # the cache: 1 GiB
    assert HOST_SHARE == 0.85
    assert cpu.need_gb == pytest.approx(65.0)
    assert cpu.hosts == 2  # 70 * 0.85 = 59.5 cannot hold it
    assert cpu.have_gb == pytest.approx(120 * 0.85)
    assert not cpu.free_now  # 64 GiB free is one short
    assert cpu.engine == "llamacpp" and cpu.gpus == 0 and cpu.nodes == 0


def test_cpu_is_free_now_when_one_node_has_the_ram_free() -> None:
    art = gguf("m-Q4_K_M.gguf", 5)
    [cpu] = options([art], NO_KV, [cpu_node("a", 64, host_free=1), cpu_node("b", 64, host_free=7)], 1)
    assert cpu.free_now and cpu.hosts == 2


def test_no_cpu_option_without_a_node_that_holds_it() -> None:
    assert options([gguf("m-Q4_K_M.gguf", 100)], NO_KV, [cpu_node("a", 64), cpu_node("zero", 0)], 1) == []


def test_safetensors_never_run_on_the_cpu() -> None:
    assert options([original(10)], NO_KV, [cpu_node("a", 1024)], 1) == []


# --- GGUF on one node's cards ---------------------------------------------------------------------------


def test_gguf_takes_the_fewest_cards_that_hold_it() -> None:
    nodes = [gpu_node("n", "h100-80g", gpus=8)]
    [one] = options([gguf("a-Q4_K_M.gguf", 67)], NO_KV, nodes, 1)  # 1 + 67 * 1.05 = 71.35 <= 72
    [two] = options([gguf("b-Q4_K_M.gguf", 68)], NO_KV, nodes, 1)  # 72.4 > 72: two cards
    [three] = options([gguf("c-Q4_K_M.gguf", 140)], NO_KV, nodes, 1)  # 74.5 on two: three, not four
    assert (one.gpus_per_node, two.gpus_per_node, three.gpus_per_node) == (1, 2, 3)
    assert two.need_gb == pytest.approx(gib(68 * GIB // 2 + GIB + (68 * GIB // 2) // 20))
    assert two.have_gb == pytest.approx(72.0) and two.nodes == 1 and two.engine == "llamacpp"


def test_gguf_counts_the_kv_cache_split_with_the_cards() -> None:
    shape = Shape(kv_bytes_per_token=131072)
    [o] = options([gguf("m-Q4_K_M.gguf", 4)], shape, [gpu_node("n", "h100-80g")], 8192)
    assert o.need_gb == pytest.approx(4 + 1.0 + 1 + 4 / 20)  # weights + 1 GiB cache + 1 GiB + weights/20


def test_gguf_hosts_and_free_now_count_nodes_with_enough_cards() -> None:
    nodes = [
        gpu_node("a", "h100-80g", gpus=1),
        gpu_node("b", "h100-80g", gpus=2, free=1),
        gpu_node("c", "h100-80g", gpus=4, free=2),
    ]
    [o] = options([gguf("m-F16.gguf", 100)], NO_KV, nodes, 1)
    assert (o.gpus_per_node, o.hosts, o.free_now) == (2, 2, True)
    nodes[2] = gpu_node("c", "h100-80g", gpus=4, free=1)
    [o] = options([gguf("m-F16.gguf", 100)], NO_KV, nodes, 1)
    assert (o.hosts, o.free_now) == (2, False)


def test_gguf_too_big_for_any_node_has_no_card_option() -> None:
    assert options([gguf("m-F16.gguf", 200)], NO_KV, [gpu_node("n", "a100-40g", gpus=4)], 1) == []


# --- vLLM on one node -----------------------------------------------------------------------------------


def test_vllm_takes_the_narrowest_power_of_two() -> None:
    nodes = [gpu_node("n", "h100-80g", gpus=8)]
    widths = [options([original(b)], NO_KV, nodes, 1)[0].gpus_per_node for b in (58, 59, 150, 300)]
    # 2 + 1.2 * 58 = 71.6 fits one card; 150 GiB fits three (62) but takes four; 300 GiB takes eight
    assert widths == [1, 2, 4, 8]
    [o] = options([original(150)], NO_KV, nodes, 1)
    assert o.engine == "vllm" and o.nodes == 1 and o.fabric == ""
    assert o.need_gb == pytest.approx(gib(150 * GIB // 4 + 2 * GIB + (150 * GIB // 4) // 5))


def test_vllm_width_must_divide_the_kv_heads() -> None:
    nodes = [gpu_node("n", "h100-80g", gpus=8, fabric="ib"), gpu_node("m", "h100-80g", gpus=8, fabric="ib")]
    assert options([original(150)], Shape(0, kv_heads=8), nodes, 1)[0].gpus_per_node == 4
    # two KV heads stop the widths at two cards, which cannot hold it; across nodes needs eight each
    assert options([original(150)], Shape(0, kv_heads=2), nodes, 1) == []
    # six KV heads: one card and two divide, four does not, so the search stops before it
    assert options([original(150)], Shape(0, kv_heads=6), nodes, 1) == []


def test_vllm_hosts_count_every_fabric() -> None:
    nodes = [
        gpu_node("a", "h100-80g", gpus=2, free=0, fabric="ib"),
        gpu_node("b", "h100-80g", gpus=2, free=0),
        gpu_node("c", "h100-80g", gpus=1),
    ]
    [o] = options([original(100)], NO_KV, nodes, 1)
    assert (o.gpus_per_node, o.hosts, o.free_now) == (2, 2, False)


# --- vLLM across nodes ----------------------------------------------------------------------------------


def four_card_nodes(count: int, fabric: str = "ib", free: int = 4) -> list[PoolNode]:
    return [gpu_node(f"{fabric or 'none'}-{i}", "h100-80g", gpus=4, free=free, fabric=fabric) for i in range(count)]


def test_across_nodes_takes_a_nodes_full_width_on_each() -> None:
    [o] = options([original(400)], NO_KV, four_card_nodes(3), 1)  # 4 cards: 122 GiB each; 8: 62
    assert (o.gpus_per_node, o.nodes, o.fabric, o.hosts, o.free_now) == (4, 2, "ib", 3, True)
    assert o.need_gb == pytest.approx(gib(400 * GIB // 8 + 2 * GIB + (400 * GIB // 8) // 5))
    assert o.label == "2 nodes × 4 h100-80g on ib"


def test_across_nodes_takes_powers_of_two_nodes_and_enough_hosts() -> None:
    # 700 GiB: two nodes' 8 cards need 107 GiB each, four nodes' 16 need 54.5
    [o] = options([original(700)], NO_KV, four_card_nodes(4), 1)
    assert (o.nodes, o.gpus) == (4, 16)
    assert options([original(700)], NO_KV, four_card_nodes(3), 1) == []


def test_across_nodes_only_within_one_named_fabric() -> None:
    assert options([original(400)], NO_KV, four_card_nodes(4, fabric=""), 1) == []
    split = four_card_nodes(1, "ib-a") + four_card_nodes(1, "ib-b")
    assert options([original(400)], NO_KV, split, 1) == []
    both = four_card_nodes(2, "ib-a") + four_card_nodes(2, "ib-b")
    assert sorted(o.fabric for o in options([original(400)], NO_KV, both, 1)) == ["ib-a", "ib-b"]


def test_across_nodes_is_free_now_only_with_enough_free_nodes() -> None:
    nodes = [*four_card_nodes(2), gpu_node("busy", "h100-80g", gpus=4, free=3, fabric="ib")]
    [o] = options([original(400)], NO_KV, nodes, 1)
    assert (o.hosts, o.free_now) == (3, True)
    nodes[0] = gpu_node("ib-0", "h100-80g", gpus=4, free=0, fabric="ib")
    [o] = options([original(400)], NO_KV, nodes, 1)
    assert (o.hosts, o.free_now) == (3, False)


def test_one_node_that_holds_it_rules_out_several() -> None:
    nodes = [*four_card_nodes(2), gpu_node("wide", "h100-80g", gpus=8, fabric="other")]
    [o] = options([original(400)], NO_KV, nodes, 1)
    assert (o.gpus_per_node, o.nodes, o.hosts) == (8, 1, 1)


def test_across_nodes_with_mixed_widths_uses_the_nodes_that_take_part() -> None:
    # The seed took the class's widest node (8 cards) as everyone's width, so this wide node, alone on
    # its fabric, would have left the four 4-card nodes of "ib" without a layout.
    nodes = [*four_card_nodes(4), gpu_node("wide", "h100-80g", gpus=8, fabric="other")]
    [o] = options([original(700)], NO_KV, nodes, 1)
    assert (o.gpus_per_node, o.nodes, o.fabric, o.hosts) == (4, 4, "ib", 4)
    # the same wide node on the same fabric takes part with four of its cards
    nodes[-1] = gpu_node("wide", "h100-80g", gpus=8, fabric="ib")
    [o] = options([original(700)], NO_KV, nodes, 1)
    assert (o.gpus_per_node, o.nodes, o.fabric, o.hosts) == (4, 4, "ib", 5)
    # two wide nodes give the fewest nodes for the same cards
    nodes.append(gpu_node("wide-2", "h100-80g", gpus=8, fabric="ib"))
    [o] = options([original(700)], NO_KV, nodes, 1)
    assert (o.gpus_per_node, o.nodes, o.fabric, o.hosts) == (8, 2, "ib", 2)


# --- classes --------------------------------------------------------------------------------------------


def test_classes_group_by_card_and_fabric_sorted_by_label() -> None:
    nodes = [
        gpu_node("z", "l40s-48g", fabric="x"),
        gpu_node("a", "a100-40g", gpus=4, fabric="y"),
        gpu_node("b", "a100-40g", gpus=8, fabric=""),
        gpu_node("c", "a100-40g", gpus=2, fabric="y"),
        cpu_node("cpu", 64),
        gpu_node("nomem", "mystery", mem=0),
    ]
    got = [
        (c.gpu_class, c.mem_gb, c.max_gpus, [(f.name, [n.id for n in f.nodes]) for f in c.fabrics])
        for c in classes(nodes)
    ]
    assert got == [
        ("a100-40g", 40, 8, [("", ["b"]), ("y", ["a", "c"])]),
        ("l40s-48g", 48, 1, [("x", ["z"])]),
    ]


def test_fabrics_are_in_order_of_name_whatever_the_order_of_nodes() -> None:
    nodes = [gpu_node(str(i), gpus=4, fabric=f) for i, f in enumerate(["ib-b", "", "ib-a", "ib-b"])]
    for pool in (nodes, nodes[::-1]):
        assert [[f.name for f in c.fabrics] for c in classes(pool)] == [["", "ib-a", "ib-b"]]
        assert [[f.name for f in c.fabrics] for c in grouped(pool)] == [["", "ib-a", "ib-b"]]


def test_a_label_with_two_card_sizes_is_two_classes() -> None:
    nodes = [gpu_node("a", "mi", mem=64), gpu_node("b", "mi", mem=192)]
    assert [(c.gpu_class, c.mem_gb) for c in classes(nodes)] == [("mi", 64), ("mi", 192)]
    assert [(c.gpu_class, c.mem_gb) for c in classes(nodes[::-1])] == [("mi", 64), ("mi", 192)]


# --- precision ------------------------------------------------------------------------------------------


def test_quant_table() -> None:
    assert len(QUANT_BITS) == 28
    assert (QUANT_BITS["Q8_0"], QUANT_BITS["Q4_K_M"], QUANT_BITS["IQ1_S"], QUANT_BITS["BF16"]) == (8.5, 4.8, 1.6, 16)
    assert bits_of("q4_k_m") == 4.8 and bits_of("bf16") == 16 and bits_of("Q7_X") == 0


def test_bits_per_weight_from_params_over_the_table() -> None:
    art = gguf("m-Q4_K_M.gguf", 4)
    [by_table] = options([art], NO_KV, [gpu_node("n")], 1)
    [by_size] = options([art], Shape(0, params=8_000_000_000), [gpu_node("n")], 1)
    assert by_table.bits_per_weight == 4.8
    assert by_size.bits_per_weight == pytest.approx(4 * GIB * 8 / 8e9)


@pytest.mark.parametrize(
    ("bits", "cpu", "want"),
    [
        (0, False, 0),
        (4.8, False, 4.8),
        (8.6, False, 8.6),
        (16, False, 8.6 - 7.4 * 0.25),
        (5.8, True, 5.8),
        (8.5, True, 5.8 - 2.7 * 0.25),
        (16, True, 5.8 - 10.2 * 0.25),
    ],
)
def test_quality_rises_to_the_cap_and_falls_past_it(bits: float, cpu: bool, want: float) -> None:
    o = Option("a", "gguf", "llamacpp", cpu=cpu, bits_per_weight=bits)
    assert quality(o) == pytest.approx(want)


@pytest.mark.parametrize(
    ("name", "quant"),
    [
        ("Meta-Llama-3-8B-Instruct-Q4_K_M.gguf", "Q4_K_M"),
        ("qwen2.5-7b-instruct-q5_k_m.gguf", "Q5_K_M"),
        ("model-IQ4_XS.gguf", "IQ4_XS"),
        ("x.iq3_xxs.gguf", "IQ3_XXS"),
        ("Q8_0/model-Q8_0-00001-of-00002.gguf", "Q8_0"),
        ("model.Q6_K.gguf", "Q6_K"),
        ("m-q4_0.gguf", "Q4_0"),
        ("gemma-2-9b-it-BF16.gguf", "BF16"),
        ("phi-f16.gguf", "F16"),
        ("Q4_K_M/model.gguf", "Q4_K_M"),
        ("model.gguf", ""),
        ("Q3_K_L-then-Q2_K.gguf", "Q2_K"),
    ],
)
def test_quant_of(name: str, quant: str) -> None:
    assert quant_of(name) == quant


@pytest.mark.parametrize(
    ("label", "gib_"),
    [
        ("h100-80g", 80),
        ("h200-140g", 140),
        ("rtx-4090-24g", 24),
        # the seed read "%dg" only where the label ended in a lowercase g; the port reads the same digits
        # whatever unit follows (g, gb, gib, gig) in either case
        ("a100-40gb", 40),
        ("a100-80GB", 80),
        ("rtx4090-24gig", 24),
        ("a100-80gbx", 0),
        ("h100", 0),
        ("80g", 0),
        ("h100-g", 0),
        ("h100-80.5g", 0),
        ("h100-+80g", 80),
        ("H100-80G", 80),
    ],
)
def test_mem_from_class(label: str, gib_: int) -> None:
    assert mem_from_class(label) == gib_


# --- rank -----------------------------------------------------------------------------------------------


def opt(**kw: object) -> Option:
    base: dict[str, object] = dict(
        artifact="a",
        format="gguf",
        engine="llamacpp",
        gpu_class="g",
        gpus_per_node=1,
        nodes=1,
        need_gb=10.0,
        have_gb=72.0,
        hosts=1,
        bits_per_weight=4.8,
    )
    base.update(kw)
    return Option(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("better", "worse"),
    [
        (opt(free_now=False), opt(cpu=True, gpus_per_node=0, nodes=0, free_now=True)),  # a card before the CPU
        (opt(gpus_per_node=1, free_now=False), opt(gpus_per_node=2, free_now=True)),  # fewest cards
        (opt(gpus_per_node=4, nodes=1, free_now=False), opt(gpus_per_node=2, nodes=2, free_now=True)),  # nodes
        (opt(bits_per_weight=8.5, free_now=False), opt(bits_per_weight=4.8, free_now=True)),  # precision
        (opt(bits_per_weight=8.5, free_now=False), opt(bits_per_weight=16, free_now=True)),  # past the cap
        (opt(free_now=True, need_gb=70), opt(free_now=False, need_gb=1)),  # free now breaks a tie
        (opt(need_gb=10, have_gb=80), opt(need_gb=10, have_gb=72)),  # then the most room
    ],
)
def test_rank_order(better: Option, worse: Option) -> None:
    for start in ([better, worse], [worse, better]):
        ranked = list(start)
        rank(ranked)
        assert ranked == [better, worse]


def test_rank_is_stable_for_ties() -> None:
    a, b = opt(artifact="a"), opt(artifact="b")
    for start in ([a, b], [b, a]):
        ranked = list(start)
        rank(ranked)
        assert ranked == start


# --- the busy-card regression (the seed's commit) -------------------------------------------------------


def test_busy_is_not_unfit() -> None:
    """On a cluster whose one card was in use, every file came out on the CPU. The card comes first."""
    nodes = [gpu_node("gpu", "h100-80g", gpus=1, free=0, host=256), cpu_node("cpu", 256)]
    arts = [gguf("m-Q4_K_M.gguf", 4.6), gguf("m-Q8_0.gguf", 8), gguf("m-F16.gguf", 15)]
    ranked = options(arts, Shape(kv_bytes_per_token=131072, kv_heads=8), nodes, 8192)
    best = ranked[0]
    assert not best.cpu and best.gpu_class == "h100-80g" and not best.free_now
    assert best.artifact == "m-Q8_0.gguf"  # the precision the card is there for, not the CPU's Q4
    assert all(o.cpu for o in ranked[3:]) and all(o.free_now for o in ranked[3:])
    assert [o.cpu for o in ranked] == [False] * 3 + [True] * 3


# --- JSON -----------------------------------------------------------------------------------------------


H100_SETTINGS = [
    "--max-num-batched-tokens", "8192", "--max-num-seqs", "1024",
    "--gpu-memory-utilization", "0.9", "--kv-cache-dtype", "auto",
]  # fmt: skip


def test_option_json_uses_the_seeds_names_and_leaves_out_empty_fields() -> None:
    [multi] = options([original(400)], NO_KV, four_card_nodes(2), 1)
    assert multi.to_json() == {
        "artifact": "original",
        "format": "safetensors",
        "engine": "vllm",
        "gpu_class": "h100-80g",
        "fabric": "ib",
        "gpus_per_node": 4,
        "nodes": 2,
        "need_gb": multi.need_gb,
        "have_gb": 72.0,
        "hosts": 2,
        "free_now": True,
        "bits_per_weight": 16.0,
        "estimate": "seed",
        # vLLM's API-server defaults on an 80 GiB card that is not an A100, and the plan's share of it
        "settings": H100_SETTINGS,
    }
    cpu = Option("m.gguf", "gguf", "llamacpp", cpu=True, need_gb=5.0, have_gb=50.0, hosts=1)
    assert cpu.to_json() == {
        "artifact": "m.gguf",
        "format": "gguf",
        "engine": "llamacpp",
        "cpu": True,
        "need_gb": 5.0,
        "have_gb": 50.0,
        "hosts": 1,
        "free_now": False,
    }
    assert Option.from_json(json.loads(json.dumps(multi.to_json()))) == multi
    assert cpu.label == "CPU" and opt(gpus_per_node=2).label == "2 × g"
