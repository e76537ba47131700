"""The published vLLM start-up logs (``engine_logs/vllm_published.json``) through the measured estimate.

What a run took beyond its KV cache is what its logs leave no doubt of: vLLM sizes the cache as its share
of the card (``total × gpu_memory_utilization``) less everything else it holds at the profile (weights,
memory outside PyTorch, the activation peak and, from 0.21, CUDA graphs), so ``share − KV cache`` is that
everything else, however the release words it. Before 0.21 the graphs were captured after the cache was
sized, outside the share: their printed figure is added (none where it is negative, the capture having
freed more than it took), as the planner counts them in what a card must hold; where the log prints no
figure, the estimate's graphs are left out of the comparison too. Each row is estimated at the run's own
settings, its release among them, and again at that release's defaults for its card (``planner.settings``,
``planner.vllmrelease``). Development builds and the GB10's unified memory are out of scope, with why
(``out_of_scope``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.constants import GIB
from planner.estimate import EngineShape, Need
from planner.platform import Graphs
from planner.settings import VllmSettings, vllm_run
from planner.vllmcost import VLLM_FIT, VllmFit, vllm_card
from planner.vllmrelease import GRAPHS_IN_SHARE_FROM, is_v0, v0_batched_tokens

LOGS = Path(__file__).parent / "engine_logs"

DEV_BUILD = (
    "a development build: its profile is whatever vLLM's main branch held that day, and the planner's "
    "vllm_version names releases"
)
ACROSS_NODES = (
    "tensor parallel across nodes (its log: custom all-reduce off, 'this process group spans across nodes'), "
    "a layout the planner never makes: it plans tensor parallel on one node's cards, pipeline parallel "
    "across nodes"
)
P2P_LACKING = "lacks GPU P2P capability"
"""What vLLM's custom all-reduce logs where the driver reports no peer access between the group's cards
(its own test, or with ``VLLM_SKIP_P2P_CHECK`` "trusting the driver's P2P report"): the run's ``gpu_p2p``
is off. A log line the excerpt wraps is read joined."""
UNIFIED = (
    "a GB10 (DGX Spark), whose card has no memory of its own: NVML and nvidia-smi report none for it, so no "
    "node agent can publish it, and the planner counts a card's memory apart from its host's, where here "
    "the system's use of the one pool counts against vLLM's share"
)


@functools.cache
def load() -> Any:
    return json.loads((LOGS / "vllm_published.json").read_text(encoding="utf-8"))


def release(text: str) -> tuple[int, int]:
    """``(0, 10)`` of ``0.10.1.1``, ``0.6.5.dev (main ...)`` and the like."""
    major, minor = text.split()[0].split(".")[:2]
    return int(major), int(minor)


@dataclass(frozen=True, slots=True)
class Published:
    """One published start-up and what the measured estimate says of it, in bytes."""

    index: int
    label: str
    release: tuple[int, int]
    took: int
    own: Need
    """At the run's own settings."""
    default: Need
    """At vLLM's defaults for the card, at the run's release."""
    why_not: str = ""
    """Why a row has no estimate (a figure the log did not print); empty where it has one."""

    @property
    def ratio(self) -> float:
        return self.own.total / self.took

    @property
    def default_ratio(self) -> float:
        return self.default.total / self.took


def shape_of(model: str) -> EngineShape:
    s = load()["models"][model]
    vision = s.get("vision") or {}
    return EngineShape(
        layers=s["layers"],
        hidden=s["hidden"],
        vocab=s["vocab"],
        moe=(s["experts"] or 0) > 0,
        multimodal=bool(vision),
        vision_hidden=vision.get("vision_hidden") or 0,
        mlp_width=s.get("mlp_width") or 0,
    )


def card_class(r: dict[str, Any]) -> tuple[str, float]:
    """The card as the planner would know it: a class label (``a100`` in it for an A100) and its GiB."""
    return r["card"].lower().replace(" ", "-"), r["card_total_gib"]


def own_settings(r: dict[str, Any]) -> VllmSettings:
    """The run's settings as its log gives them (or the row infers them; a pooling runner where the row's
    notes say so), its release among them; the rest at the defaults. A run of the V0 engine on a release
    whose default is V1 (``VLLM_USE_V1=0``) profiles as V0 does, which its release alone does not say:
    its tokens are V0's (``planner.vllmrelease.v0_batched_tokens``). The NVIDIA driver where the source
    gives it (``nvidia_driver``), else a current one, as a plan not told takes it."""
    tokens = r["max_num_batched_tokens"]
    version = ".".join(map(str, release(r["vllm"])))
    if tokens is None and r["engine"] == "V0" and not is_v0(release(r["vllm"])) and r["max_model_len"]:
        tokens = v0_batched_tokens(r["max_model_len"])
    images = (r.get("limit_mm_per_prompt") or {}).get("image")
    return VllmSettings(
        max_num_batched_tokens=tokens,
        max_num_seqs=r["max_num_seqs"],
        enforce_eager=r["enforce_eager"],
        images_per_prompt=images,
        runner="pooling" if "pooling" in r["notes"] else None,
        vllm_version=version,
        flashinfer_sampler=True if r.get("sampler") == "flashinfer" else None,
        gpu_p2p=False if P2P_LACKING in r["excerpt"].replace("\n", "") else None,
        nvidia_driver=r.get("nvidia_driver"),
    )


def out_of_scope(r: dict[str, Any]) -> str:
    """Why the planner cannot plan this run, or ``""``."""
    if ".dev" in r["vllm"].split()[0]:
        return DEV_BUILD
    if r["card"].startswith("GB10"):
        return UNIFIED
    if "this process group spans across nodes" in r["excerpt"].replace("\n", ""):
        return ACROSS_NODES
    return ""


TORCH_TOTAL_GIB = {"H100 80GB": 79.22, "A100 40GB": 39.38, "A100 80GB": 79.25, "A800 80GB": 79.25}
"""A card's total as PyTorch reports it, which vLLM's share is of, for rows whose total is inferred from
nvidia-smi's MiB (81,559 MiB is 79.65 GiB, 81,920 is 80.0): the H100's and the A100 40 GB's as rows of
the same file print them (``total_gpu_memory (79.22GiB)``, 39.38), the A100 80 GB's from PyTorch's
out-of-memory message on one ("79.25 GiB total capacity", levihsu/OOTDiffusion issue 235). The A800 80GB,
the A100 80GB's export variant, reports the same 81,920 MiB to nvidia-smi, so the A100's figure is taken
for it (inferred: no log here prints an A800's PyTorch total)."""


def card_total(r: dict[str, Any]) -> float:
    if "card_total_gib" in (r.get("inferred") or {}):
        return float(TORCH_TOTAL_GIB.get(r["card"], r["card_total_gib"]))
    return float(r["card_total_gib"])


def graphs_unlogged(r: dict[str, Any]) -> bool:
    """The graphs were taken outside the share and the log prints no figure for them."""
    return release(r["vllm"]) < GRAPHS_IN_SHARE_FROM and r["cuda_graph_gib"] is None and not r["enforce_eager"]


def took_bytes(r: dict[str, Any]) -> int:
    share: float = card_total(r) * r["gpu_memory_utilization"] - r["kv_cache_gib"]
    graphs = r["cuda_graph_gib"] or 0.0
    if release(r["vllm"]) < GRAPHS_IN_SHARE_FROM and graphs > 0:
        share += graphs
    return round(share * GIB)


def need(r: dict[str, Any], s: VllmSettings, fit: VllmFit = VLLM_FIT) -> Need:
    gpu_class, gib = card_class(r)
    # a row on an AMD card (``"gpu_vendor": "amd"``) is read with ROCm's graphs; every other at its
    # printed driver (``nvidia_driver``, in its settings) or a current one
    graphs: Graphs = "rocm" if r.get("gpu_vendor") == "amd" else "current"
    run = vllm_run(s, gpu_class, gib, r["max_model_len"] or 0, graphs)
    got = vllm_card(
        round(r["weights_gib"] * GIB),
        0,
        shape_of(r["model"]),
        tp=r["tp"],
        pp=r["pp"],
        batched_tokens=run.batched_tokens,
        max_seqs=run.max_seqs,
        enforce_eager=run.enforce_eager or graphs_unlogged(r),
        images=run.images_per_prompt,
        pooling=run.pooling,
        pcie=run.pcie,
        p2p=run.p2p,
        release=run.release,
        flashinfer_sampler=run.flashinfer_sampler,
        old_driver=run.old_driver,
        rocm=run.rocm,
        dequantised=r["quantization"] == "bitsandbytes" and "4bit" in r["model"].lower(),
        fit=fit,
    )
    return got


def rows(fit: VllmFit = VLLM_FIT) -> Iterator[Published]:
    """Every row; each estimated with ``fit`` (a hold-out refits it on part of the rows)."""
    for i, r in enumerate(load()["rows"]):
        label = f"{r['model'].split('/')[-1]} TP{r['tp']} {r['card']} vLLM {r['vllm'].split()[0]}"
        missing = [f for f in ("weights_gib", "kv_cache_gib", "gpu_memory_utilization") if r[f] is None]
        if r["model"] not in load()["models"]:
            missing.append("the model's shape (no config in the file)")
        empty = Need(0, 0, 0, ())
        if missing:
            yield Published(i, label, release(r["vllm"]), 1, empty, empty, f"not printed: {', '.join(missing)}")
            continue
        if out_of_scope(r):
            yield Published(i, label, release(r["vllm"]), 1, empty, empty, f"out of scope: {out_of_scope(r)}")
            continue
        if graphs_unlogged(r):
            label += " (graphs not logged)"
        s = own_settings(r)
        own, default = need(r, s, fit), need(r, VllmSettings(vllm_version=s.vllm_version), fit)
        yield Published(i, label, release(r["vllm"]), took_bytes(r), own, default)
