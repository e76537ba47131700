"""Where a replica on the CPU goes: a node without cards first, as a GPU node's RAM and cores serve its
cards' engines (vLLM's swap space and loading, llama.cpp's host buffers); then the GPU node with the most
room."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from planner import PoolNode, Shape
from planner.constants import HOST_SHARE
from planner.decide import plan_job
from tests.planner.helpers import cpu_node, gguf, gpu_node

SHAPE = Shape(kv_bytes_per_token=131072, kv_heads=8, params=8_000_000_000)
FILE = gguf("Llama-3-8B-Q4_K_M.gguf", 4.6)


def cpu_fallback(nodes: list[PoolNode]) -> str:
    job = plan_job([FILE], SHAPE, nodes, 8192, fallback=True)
    [replica] = job.replicas
    assert replica.state == "fallback" and replica.option is not None and replica.option.cpu
    [hold] = replica.holds
    return hold.node_id


def test_a_cpu_node_is_taken_before_the_host_ram_of_the_gpu_node_it_waits_for() -> None:
    busy_gpu = gpu_node("gpu-1", free=0, host=256, host_free=200)
    assert cpu_fallback([busy_gpu, cpu_node("cpu-1", 512, 500)]) == "cpu-1"


def test_among_cpu_nodes_the_tightest_fit_keeps_large_ones_whole() -> None:
    nodes = [gpu_node("gpu-1", free=0, host=256), cpu_node("cpu-big", 1024), cpu_node("cpu-small", 64)]
    assert cpu_fallback(nodes) == "cpu-small"


def test_without_a_cpu_node_the_gpu_node_with_the_most_room_is_taken() -> None:
    nodes = [
        gpu_node("gpu-1", free=0, host=256, host_free=40),
        gpu_node("gpu-2", free=0, host=1024, host_free=900),
        gpu_node("gpu-3", free=0, host=512, host_free=300),
    ]
    assert cpu_fallback(nodes) == "gpu-2"


@given(st.lists(st.tuples(st.booleans(), st.integers(min_value=16, max_value=2048)), min_size=1, max_size=6))
def test_a_gpu_nodes_ram_is_taken_only_when_no_cpu_node_has_room(specs: list[tuple[bool, int]]) -> None:
    nodes = [
        gpu_node(f"gpu-{i}", free=0, host=ram) if has_cards else cpu_node(f"cpu-{i}", ram)
        for i, (has_cards, ram) in enumerate(specs)
    ]
    job = plan_job([FILE], SHAPE, nodes, 8192, fallback=True)
    [replica] = job.replicas
    if not replica.holds or replica.option is None or not replica.option.cpu:
        return
    [hold] = replica.holds
    fits = [n for n in nodes if n.host_free_gb >= hold.host_gb and n.host_mem_gb * HOST_SHARE >= hold.host_gb]
    chosen = next(n for n in nodes if n.id == hold.node_id)
    if any(n.gpus == 0 for n in fits):
        assert chosen.gpus == 0
    else:
        assert chosen.host_free_gb == max(n.host_free_gb for n in fits)
