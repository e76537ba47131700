"""What a CPU option says it has: the RAM a node without cards offers where one holds the replica (as
such a node is taken first, ``test_cpu_placement``), and a GPU node's only where none does."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from planner import PoolNode, Shape, options
from planner.constants import HOST_SHARE
from planner.decide import plan_job
from planner.index import PoolIndex
from tests.planner.helpers import cpu_node, gguf, gpu_node

SHAPE = Shape(kv_bytes_per_token=131072, kv_heads=8, params=8_000_000_000)
FILE = gguf("Llama-3-8B-Q4_K_M.gguf", 4.6)


def cpu_option_have(nodes: list[PoolNode]) -> float:
    [cpu] = [o for o in options([FILE], SHAPE, nodes, 8192) if o.cpu]
    return cpu.have_gb


def test_a_node_without_cards_that_holds_it_is_the_room_said() -> None:
    nodes = [gpu_node("gpu-1", host=2048), cpu_node("cpu-1", 128)]
    assert cpu_option_have(nodes) == 128 * HOST_SHARE
    assert cpu_option_have(list(PoolIndex(nodes))) == 128 * HOST_SHARE


def test_without_a_node_without_cards_that_holds_it_the_gpu_nodes_room_is_said() -> None:
    assert cpu_option_have([gpu_node("gpu-1", host=2048), cpu_node("cpu-1", 4)]) == 2048 * HOST_SHARE
    assert cpu_option_have([gpu_node("gpu-1", host=512), gpu_node("gpu-2", host=256)]) == 512 * HOST_SHARE


@given(st.lists(st.tuples(st.booleans(), st.integers(min_value=4, max_value=2048)), min_size=1, max_size=6))
def test_the_room_said_is_of_the_kind_of_node_a_replica_is_placed_on(specs: list[tuple[bool, int]]) -> None:
    nodes = [
        gpu_node(f"gpu-{i}", free=0, host=ram) if has_cards else cpu_node(f"cpu-{i}", ram)
        for i, (has_cards, ram) in enumerate(specs)
    ]
    job = plan_job([FILE], SHAPE, nodes, 8192, fallback=True)
    if not job.replicas:  # nothing holds it
        return
    [replica] = job.replicas
    if not replica.holds or replica.option is None or not replica.option.cpu:
        return
    [hold] = replica.holds
    on = next(n for n in nodes if n.id == hold.node_id)
    said = replica.option.have_gb
    # the room said is that of the largest node of the kind the replica went to, and it holds the replica
    assert said == max(n.host_mem_gb for n in nodes if (n.gpus > 0) == (on.gpus > 0)) * HOST_SHARE
    assert said >= replica.option.need_gb
