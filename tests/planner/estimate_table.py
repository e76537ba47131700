"""Every row of the engine profiles (``engine_profiles/``) through the planner's two estimates.

``python -m tests.planner.estimate_table`` prints the table that ``docs/ESTIMATES.md`` shows; the tests in
``test_estimates.py`` hold the measured estimate to it: never under what a row took, within 10% of it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.constants import GIB, MIB
from planner.estimate import ESTIMATES, EngineShape, Estimate, Need, llamacpp_card, llamacpp_host
from planner.vllmcost import vllm_card
from planner.vllmrelease import release_of

PROFILES = Path(__file__).parent / "engine_profiles"


@dataclass(frozen=True, slots=True)
class Row:
    """One measured run and what each estimate says of it, in bytes."""

    engine: str
    """``vllm``, ``llamacpp-cpu`` or ``llamacpp-gpu``."""
    label: str
    took: int
    """What the run took beyond the KV cache (vLLM) or in all (llama.cpp)."""
    estimates: dict[Estimate, Need]
    source: str

    def ratio(self, estimate: Estimate) -> float:
        return self.estimates[estimate].total / self.took


@functools.cache
def load(name: str) -> Any:
    """A profile file, parsed once (callers only read it)."""
    return json.loads((PROFILES / name).read_text(encoding="utf-8"))


def shape_of(model: str, **more: bool) -> EngineShape:
    """The model's shape as ``model_shapes.json`` records it."""
    s = load("model_shapes.json")[model]
    return EngineShape(
        layers=s["layers"] or 0,
        hidden=s["hidden"],
        vocab=s["vocab"],
        moe=s["experts"] > 0,
        multimodal=s["multimodal"],
        **more,
    )


def vllm_rows() -> Iterator[Row]:
    """vLLM's profiles: what a card held beyond its KV cache (weights, non-torch memory, activation peak,
    CUDA graphs), against each estimate for the same card with no KV cache."""
    for r in load("vllm_profiles.json"):
        shape = shape_of(r["model"], float32=r["dtype"] == "float32")
        took = r["weights_gib"] + r["non_torch_gib"] + r["activation_peak_gib"] + r["cuda_graph_gib"]
        weights = round(r["weights_gib"] * GIB)
        needs = {
            e: vllm_card(
                weights,
                0,
                shape,
                tp=r["tp"],
                pp=r["pp"],
                estimate=e,
                batched_tokens=r["max_num_batched_tokens"],
                max_seqs=r["max_num_seqs"],
            )
            for e in ESTIMATES
        }
        label = f"{r['model']} TP{r['tp']}" + (f" PP{r['pp']}" if r["pp"] > 1 else "") + f" {r['dtype']}"
        if r["quantization"] != "None":
            label += f" {r['quantization']}"
        yield Row("vllm", label, round(took * GIB), needs, r["source"])


def vllm_release_rows() -> Iterator[Row]:
    """One model (Qwen3-14B, TP 1) profiled by four vLLM releases, each estimated at its own release
    (``planner.vllmrelease``). These runs kept no CUDA graph figure before 0.18; what they took is the
    rest."""
    for r in load("vllm_versions.json"):
        shape = shape_of(r["model"])
        figures = (r["weights_gib"], r["non_torch_gib"], r["activation_peak_gib"], r["cuda_graph_gib"] or 0.0)
        weights = round(r["weights_gib"] * GIB)
        release = release_of(".".join(r["vllm"].split(".")[:2]))
        needs = {
            e: vllm_card(weights, 0, shape, tp=r["tp"], pp=r["pp"], estimate=e, release=release) for e in ESTIMATES
        }
        yield Row("vllm-release", f"{r['model']} vLLM {r['vllm']}", round(sum(figures) * GIB), needs, r["source"])


def llamacpp_cpu_rows() -> Iterator[Row]:
    """llama.cpp on a CPU: the peak RSS of the run, against each estimate of a replica in RAM."""
    for r in load("llamacpp_cpu.json"):
        shape = shape_of(f"llama.cpp synthetic {r['model']}")
        took = max(r["rss_short"], r["rss_long"])
        needs = {e: llamacpp_host(r["file"], r["kv_formula"], shape, context=r["ctx"], estimate=e) for e in ESTIMATES}
        label = f"{r['model']} {r['quant']} ctx {r['ctx']}"
        yield Row("llamacpp-cpu", label, took, needs, "llamacpp_cpu.json")


def llamacpp_gpu_rows() -> Iterator[Row]:
    """llama.cpp on an H200: the process's peak card memory, against each estimate of one card."""
    for r in load("llamacpp_h200.json")["runs"]:
        shape = shape_of(f"llama.cpp synthetic {r['model']}")
        kv = r["ctx"] * r["kv_bytes_per_token"]
        needs = {e: llamacpp_card(r["file_bytes"], kv, shape, context=r["ctx"], estimate=e) for e in ESTIMATES}
        yield Row("llamacpp-gpu", r["tag"], round(r["measured_mib"] * MIB), needs, "llamacpp_h200.json")


def rows() -> list[Row]:
    return [*vllm_rows(), *llamacpp_cpu_rows(), *llamacpp_gpu_rows()]


def table(all_rows: list[Row]) -> str:
    """The rows as a Markdown table, with a summary per engine."""
    lines = [
        "| engine | run | took GiB | measured GiB | × | seed GiB | × |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in all_rows:
        m, s = r.estimates["measured"].total, r.estimates["seed"].total
        lines.append(
            f"| {r.engine} | {r.label} | {r.took / GIB:.2f} | {m / GIB:.2f} | {r.ratio('measured'):.3f} "
            f"| {s / GIB:.2f} | {r.ratio('seed'):.3f} |"
        )
    lines += [
        "",
        "| engine | rows | estimate | under | within 10% | lowest × | highest × |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for engine in dict.fromkeys(r.engine for r in all_rows):
        group = [r for r in all_rows if r.engine == engine]
        for e in ESTIMATES:
            ratios = [r.ratio(e) for r in group]
            under = sum(x < 1 for x in ratios)
            within = sum(1 <= x <= 1.1 for x in ratios)
            lines.append(
                f"| {engine} | {len(group)} | {e} | {under} | {within} | {min(ratios):.3f} | {max(ratios):.3f} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(rows()))
    print()
    print(table(list(vllm_release_rows())))
