"""The cards' vendor and driver, from a node's record to the plan: a node that reports an NVIDIA driver
before the 550 branch, or AMD cards, needs more of each card for the same model (vLLM's graphs take more
there, ``planner.platform``), and a record that says neither reads as before."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner import InvalidInput, PoolNode, parse_node
from planner.index import PoolIndex
from planner.options import classes, grouped, options
from planner.platform import GRAPHS_ERROR, graphs_of, worst
from planner.settings import Settings, VllmSettings
from planner.view import PoolView
from tests.planner.helpers import gpu_node, original
from tests.planner.test_settings import LLAMA_8B

NODE = {"node_id": "gpu-a", "gpu_class": "h100-80g", "gpus": 1, "free_gpus": 1, "host_mem_gb": 64, "host_free_gb": 64}


def need_gb(nodes: list[PoolNode] | PoolIndex) -> float:
    (o,) = [o for o in options([original(15.0)], LLAMA_8B, nodes, 8192) if o.gpu_class == "h100-80g"]
    return o.need_gb


def node(driver: str = "", vendor: str = "", node_id: str = "gpu-a") -> PoolNode:
    return replace(gpu_node(node_id), gpu_vendor=vendor or ("nvidia" if driver else ""), gpu_driver=driver)


def test_a_node_record_carries_its_cards_vendor_and_driver_to_the_pool_node() -> None:
    report = parse_node({**NODE, "gpu_vendor": "nvidia", "gpu_driver": "535.230.02"})
    n = report.to_pool_node()
    assert (n.gpu_vendor, n.gpu_driver) == ("nvidia", "535.230.02")
    assert '"gpu_vendor":"nvidia","gpu_driver":"535.230.02"' in report.model_dump_json()


def test_a_record_that_says_neither_reads_and_writes_as_before() -> None:
    report = parse_node(NODE)
    assert (report.gpu_vendor, report.gpu_driver) == ("", "")
    assert "gpu_vendor" not in report.model_dump_json() and "gpu_driver" not in report.model_dump_json()


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ({"gpu_vendor": "intel"}, "gpu_vendor"),
        ({"gpu_vendor": "nvidia", "gpu_driver": "r535"}, "gpu_driver"),
        ({"gpu_vendor": "nvidia", "gpu_driver": '535"'}, "gpu_driver"),
        ({"gpu_driver": "535.230.02"}, "gpu_vendor"),
    ],
)
def test_a_vendor_or_driver_that_is_not_one_is_refused_naming_it(given: dict[str, str], field: str) -> None:
    with pytest.raises(InvalidInput) as e:
        parse_node({**NODE, **given})
    assert field in str(e.value) and "\n" not in str(e.value)


def test_a_cpu_node_names_no_vendor() -> None:
    cpu = {"node_id": "cpu-a", "host_mem_gb": 64, "host_free_gb": 64}
    with pytest.raises(InvalidInput) as e:
        parse_node({**cpu, "gpu_vendor": "nvidia"})
    assert "gpu_vendor" in str(e.value)


@pytest.mark.parametrize(
    ("vendor", "driver", "graphs"),
    [
        ("", "", "unreported"),
        ("nvidia", "", "unreported"),
        ("nvidia", "550.54.15", "current"),
        ("nvidia", "570.195.03", "current"),
        ("nvidia", "535.230.02", "old-driver"),
        ("nvidia", "470", "old-driver"),
        ("amd", "6.8.5", "rocm"),
        ("amd", "", "rocm"),
    ],
)
def test_what_a_nodes_graphs_take_follows_its_vendor_and_driver(vendor: str, driver: str, graphs: str) -> None:
    assert graphs_of(vendor, driver) == graphs


def test_an_old_drivers_node_needs_more_for_the_same_model_than_a_current_one() -> None:
    current, old, unknown = need_gb([node("570.195.03")]), need_gb([node("535.230.02")]), need_gb([node()])
    assert unknown == current  # counted as a current driver's, its error said (below)
    # Llama-3.1-8B's graphs on an H100 (1,024 sequences): 0.9 GiB at a current driver, × 3.5 of their part
    # per size at an old one
    assert 1.5 < old - current < 3.5, (current, old)


def test_an_amd_node_needs_more_than_an_nvidia_one_at_a_current_driver() -> None:
    nvidia, amd = need_gb([node("570.195.03")]), need_gb([node("6.8.5", "amd")])
    assert 1.5 < amd - nvidia < 3.5, (nvidia, amd)


def test_a_class_is_planned_at_its_nodes_worst_graphs() -> None:
    mixed = [node("570.195.03"), node("535.230.02", node_id="gpu-b")]
    assert need_gb(mixed) == need_gb([node("535.230.02")])
    assert [c.graphs for c in grouped(mixed)] == [c.graphs for c in classes(mixed)] == ["old-driver"]
    assert worst(["current", "rocm", "old-driver"]) == "rocm" and worst([]) == "current"
    assert worst(["current", "unreported"]) == "unreported"


def test_the_pool_index_follows_a_nodes_driver_as_it_changes() -> None:
    """The index counts each class's platforms as nodes come, change and go; a plan on it reads the same
    as one on a list of the nodes, and its views with nodes seen otherwise too."""
    index = PoolIndex([node("570.195.03"), node("570.195.03", node_id="gpu-b")])
    current = need_gb(index)
    index.put(node("535.230.02", node_id="gpu-b"))
    assert need_gb(index) == need_gb([node("535.230.02")]) > current
    assert [g.platforms for g in index.groups()] == [{"current": 1, "old-driver": 1}]
    seen_current = PoolView(index, [node("570.195.03", node_id="gpu-b")])
    assert [g.graphs for g in seen_current.groups()] == ["current"]
    assert [g.graphs for g in index.copy().groups()] == ["old-driver"]
    index.drop("gpu-b")
    assert need_gb(index) == current
    assert [g.platforms for g in index.groups()] == [{"current": 1}]


def test_an_unreported_driver_is_counted_as_a_current_one_and_its_error_said() -> None:
    def option(nodes: list[PoolNode]) -> tuple[float, str]:
        (o,) = [o for o in options([original(15.0)], LLAMA_8B, nodes, 8192) if o.gpu_class == "h100-80g"]
        return o.need_gb, o.margin

    (current, said), (unreported, unsaid) = option([node("570.195.03")]), option([node()])
    assert current == unreported and said == "" and unsaid == GRAPHS_ERROR
    # one node of the class that does not say is enough: any node of the class may be chosen
    assert option([node("570.195.03"), node(node_id="gpu-b")])[1] == GRAPHS_ERROR
    # the deployment naming the driver is the driver known
    named = options(
        [original(15.0)], LLAMA_8B, [node()], 8192, settings=Settings(vllm=VllmSettings(nvidia_driver="570"))
    )
    assert [o.margin for o in named if o.gpu_class == "h100-80g"] == [""]
