"""The class label the agent derives names the card's marketed size, as the examples and docs do
(``l40s-48g``, ``h100-80g``), while the heartbeat carries the GiB the card reports, which is what plans
count; a ``--gpu-class`` naming more than the cards could be sold as is refused in one line."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.errors import InvalidInput
from planner.pool import ID_REGEX, LABELLED_SHARE, parse_node
from planner.quant import mem_from_class
from producer.agent import Agent, Card, CardsMissing, LabelPastCard, class_label, heartbeat_dict, run_from_args
from producer.agent.loop import Agent as LoopAgent
from tests.producer.agent.test_agent import IDLE, MEMORY, FakeReader, agent_args, beat

ROOT = Path(__file__).resolve().parents[3]

# The cards as nvidia-smi reports them (memory.total, MiB), the label each is sold (and named) as, and the
# GiB a plan counts: the reported MiB rounded down
REFERENCE_CARDS = [
    ("NVIDIA H200", 143771, "h200-140g", 140),
    ("NVIDIA H100 80GB HBM3", 81559, "h100-80g", 79),
    ("NVIDIA A100-SXM4-80GB", 81920, "a100-80g", 80),
    ("NVIDIA A100-PCIE-40GB", 40960, "a100-40g", 40),
    ("NVIDIA A100 80GB PCIe", 81920, "a100-80g", 80),
    ("NVIDIA L40S", 46068, "l40s-48g", 44),
    ("NVIDIA A40", 46068, "a40-48g", 44),
    ("NVIDIA RTX 6000 Ada Generation", 46068, "rtx-6000-ada-48g", 44),
    ("NVIDIA RTX 6000 Ada Generation", 49140, "rtx-6000-ada-48g", 47),
    ("NVIDIA GeForce RTX 4090", 24564, "rtx-4090-24g", 23),
    ("NVIDIA A10G", 23028, "a10g-24g", 22),
    ("NVIDIA A10", 23028, "a10-24g", 22),
    ("NVIDIA L4", 23034, "l4-24g", 22),
    ("Tesla V100-SXM2-16GB", 16160, "v100-16g", 15),
    ("NVIDIA B9000", 100000, "b9000-97g", 97),  # a card the agent does not know: the GiB it has
]


def cards_of(name: str, mib: int, n: int = 2) -> list[Card]:
    return [Card(i, name, f"GPU-{i}", mib, 0, 0) for i in range(n)]


def l40s_beat(**kw: Any) -> dict[str, Any]:
    return heartbeat_dict("l40s-a", cards_of("NVIDIA L40S", 46068), MEMORY, seq=1, boot_id="boot-1", **kw)


@pytest.mark.parametrize(("name", "mib", "label", "has_gb"), REFERENCE_CARDS)
def test_the_label_names_the_marketed_size_and_the_beat_what_the_card_has(
    name: str, mib: int, label: str, has_gb: int
) -> None:
    assert class_label(name, mib) == label
    assert re.fullmatch(ID_REGEX, label)
    hb = heartbeat_dict("n", cards_of(name, mib), MEMORY, seq=1, boot_id="b")
    assert (hb["gpu_class"], hb["gpu_mem_gb"]) == (label, has_gb)
    assert parse_node({k: hb[k] for k in hb if k not in ("seq", "boot_id", "started")}).card_gb == has_gb


def test_the_agent_names_the_classes_the_examples_and_docs_use() -> None:
    derived = {label for _, _, label, _ in REFERENCE_CARDS}
    used: set[str] = set()
    for pool in sorted((ROOT / "examples").glob("pool*.json")):
        used |= {n["gpu_class"] for n in json.loads(pool.read_text()) if n["gpu_class"]}
    assert used and used <= derived, used - derived
    docs = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    for name, mib, label, _ in REFERENCE_CARDS[:2]:  # the docs' own examples of what the agent derives
        assert f'"{name}" of {mib} MiB is `{label}`' in docs.replace("\n  ", " "), label


@given(st.text(max_size=300), st.integers(min_value=1024, max_value=1 << 24))
def test_every_class_label_is_an_id_whose_size_the_card_could_be_sold_as(name: str, mib: int) -> None:
    label = class_label(name, mib)
    assert re.fullmatch(ID_REGEX, label)
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*-\d+g", label)
    size = mem_from_class(label)
    assert size * LABELLED_SHARE <= mib / 1024 < size + 1


def test_plans_count_what_the_card_has_whatever_the_label_says() -> None:
    hb = l40s_beat(gpu_class="l40s-48g")
    assert (hb["gpu_class"], hb["gpu_mem_gb"]) == ("l40s-48g", 44)
    assert beat(IDLE, gpu_class="h200")["gpu_mem_gb"] == 140  # a label without a size
    assert beat(IDLE, gpu_class="h200-141g")["gpu_mem_gb"] == 140  # not 141: the card has 140.4 GiB
    assert beat(IDLE, gpu_class="h200-100g")["gpu_mem_gb"] == 100  # a label naming less: less is counted
    assert beat(IDLE, gpu_class="")["gpus"] == 0  # "": reported as a CPU node
    with pytest.raises(CardsMissing, match="--gpu-class 'h200-140g' is given but no card was found"):
        beat([], gpu_class="h200-140g")


def test_a_label_past_the_card_is_refused_in_one_line() -> None:
    with pytest.raises(LabelPastCard) as e:
        l40s_beat(gpu_class="h100-80g")
    assert str(e.value) == (
        "node 'l40s-a': --gpu-class 'h100-80g' names cards of 80 GiB, but card 0 (NVIDIA L40S) has 46068 MiB "
        "(45.0 GiB), and a card has at least 90% of the size its class names: name a class of at most 49 GiB "
        "(this card's own is l40s-48g), or leave --gpu-class out"
    )
    assert "\n" not in str(e.value)
    l40s_beat(gpu_class="l40s-49g")  # within what a card of 45 GiB could be sold as


def test_the_agent_refuses_such_a_label_before_it_starts(
    monkeypatch: pytest.MonkeyPatch, logging_restored: None
) -> None:
    def ran(*_: Any, **__: Any) -> None:
        raise AssertionError("the agent started")

    monkeypatch.setattr(LoopAgent, "run", ran)
    reader = FakeReader(cards_of("NVIDIA L40S", 46068))
    for once in ((), ("--once",)):
        args = agent_args(*once, "--dry-run", "--node-id", "l40s-a", "--gpu-class", "h100-80g")
        with pytest.raises(LabelPastCard, match=r"^node 'l40s-a': --gpu-class 'h100-80g' names cards of 80 GiB"):
            run_from_args(args, reader=reader)
    assert Agent("l40s-a", reader, gpu_class="l40s-48g").tick().gpu_mem_gb == 44


@pytest.mark.parametrize(
    ("mem", "said"),
    [
        (44, None),  # an L40S as its agent reports it
        (48, None),
        (49, "gpu_mem_gb 49 is more than the 48 GiB the class label 'l40s-48g' names"),
        (40, "gpu_mem_gb 40 disagrees with the class label 'l40s-48g'"),
    ],
)
def test_a_node_record_may_count_less_than_its_label_names(mem: int, said: str | None) -> None:
    node = {"node_id": "n", "gpu_class": "l40s-48g", "gpu_mem_gb": mem, "gpus": 1, "host_mem_gb": 1, "host_free_gb": 1}
    if said is None:
        assert parse_node(node).card_gb == mem
    else:
        with pytest.raises(InvalidInput, match=re.escape(said)):
            parse_node(node)
