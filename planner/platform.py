"""The cards' vendor and driver as a node reports them (``planner.pool.NodeReport``: ``gpu_vendor``,
``gpu_driver``), and what the measured estimate reads of them: how much memory vLLM's graphs take on the
node's cards (``planner.vllmcost.vllm_graphs``).

A card class is planned at the platform of its nodes that takes the most (``worst``): an option names a
class, not a node, and any node of the class may be chosen for it, so one old driver in a class sizes the
class's vLLM options. A node that reports neither (an agent from before they were published, or a pool
file that leaves them out) is taken for a current NVIDIA driver's, as the estimate always took it; a
deployment that knows better says so in its settings (``VllmSettings.nvidia_driver``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, get_args

GpuVendor = Literal["nvidia", "amd"]
"""Who made the node's cards: NVIDIA (CUDA) or AMD (ROCm)."""

VENDORS: tuple[GpuVendor, ...] = get_args(GpuVendor)

DRIVER_VERSION_REGEX = r"^[0-9]{1,4}(\.[0-9]{1,6}){0,3}$"
"""A driver's version as its tools print it: NVIDIA's ``535.230.02`` (``nvidia-smi --query-gpu=
driver_version``, NVML's ``nvmlSystemGetDriverVersion``), AMD's ``6.8.5`` or a ROCm release ``6.2.4``.
Digits and dots only: it is part of a node's stored record, which holds no quote."""

Graphs = Literal["current", "unreported", "old-driver", "rocm"]
"""What a node's graphs take, in order of how much: a current NVIDIA driver's (what the estimate was
fitted on); a driver the node did not report, counted as a current one's with the estimate's measured
error said beside it (``GRAPHS_ERROR``); an NVIDIA driver before the 550 branch's
(``planner.vllmrelease.OLD_DRIVER_GRAPHS``); or HIP graphs on an AMD card under ROCm
(``planner.vllmrelease.ROCM_GRAPHS``)."""

GRAPHS_ORDER: tuple[Graphs, ...] = get_args(Graphs)

CURRENT_NVIDIA_BRANCH = 550
"""The first NVIDIA driver branch whose CUDA graphs take what the estimate was fitted on (CUDA 12.4's);
``planner.vllmrelease.CURRENT_DRIVER_FROM`` is the same figure, where a setting names the driver."""


def graphs_of(vendor: str, driver: str) -> Graphs:
    """What the graphs of a node with cards of ``vendor`` under ``driver`` take (either may be ``""``,
    unknown: then ``unreported``, counted as a current NVIDIA driver's)."""
    if vendor == "amd":
        return "rocm"
    if not driver:
        return "unreported"
    if int(driver.split(".")[0]) < CURRENT_NVIDIA_BRANCH:
        return "old-driver"
    return "current"


GRAPHS_ERROR = "CUDA graphs at an unreported driver (0.1-2.9x the term on published logs)"
"""The graph term's own error where the plan cannot know the driver, as an option says it (its
``margin``), measured on the independent tables (``python -m tests.planner.published_margin``): where a
log's driver is current or not printed, the capture took 0.08 to 1.34 times the term, and 2.85 times on one
A100 whose log does not print its driver (what a driver before the 550 branch takes). Counted as a current
driver's: the estimate stays within 10% where the driver is current, and a start that runs out of memory
is the correction where it is not."""


def worst(platforms: Iterable[str]) -> Graphs:
    """Of the platforms present (``Graphs``, or a mapping of them to counts), the one whose graphs take the
    most; ``current`` where there is none."""
    present = set(platforms)
    for g in reversed(GRAPHS_ORDER):
        if g in present:
            return g
    return "current"
