"""The published llama.cpp start-up logs (``engine_logs/llamacpp_published.json``) through the measured
estimate.

The logs print llama.cpp's buffers, not the process's peak: each row is held to the two the estimate sizes
beyond the weights, the KV cache and the compute buffer of the device that holds every layer (a card, or
the CPU), against the estimate's KV cache and compute buffer at the run's own settings (micro-batch, flash
attention, slots, cache types) and at llama-server's defaults. A row whose buffers the planner never plans
(layers or experts split between a card and the host, a split over cards with pipeline copies, an NPU, an
encoder-only embedding model with no logits) is listed with why.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.constants import LLAMACPP_FA_HIDDEN_BYTES, LLAMACPP_NO_FA_HIDDEN_BYTES, MIB
from planner.estimate import EngineShape, llamacpp_compute
from planner.model import Shape
from planner.options import gguf_kv_bytes
from planner.settings import LlamacppSettings, Settings, llamacpp_run

LOGS = Path(__file__).parent / "engine_logs"

HYBRID_FIT = (
    "-fit moved experts to the host, a split the planner does not plan (its compute buffer grows with the "
    "graph's splits); its KV cache and recurrent state are checked on their own (test_published.py)"
)

NOT_PLANNED = {
    3: "experts on the host (-ngl 48 with blk.14-47 experts on the CPU): a split the planner does not plan",
    4: "a Hexagon NPU with repacked buffers: not a card the planner plans for",
    5: "two cards with pipeline parallelism (4 copies of the compute graph) and an uneven -ts 10,6 split",
    6: "two ROCm cards, no settings printed (context, micro-batch, flash attention unknown)",
    9: "10 of 33 layers on the card, the rest on the host: a split the planner does not plan",
    10: "10 of 33 layers on the card, the rest on the host: a split the planner does not plan",
    17: "an encoder-only embedding model (BERT): no logits, which llama-server serving generation has",
    18: "an encoder-only embedding model (BERT): no logits, which llama-server serving generation has",
    19: "half the layers (and their KV) on the host: a split the planner does not plan",
    22: HYBRID_FIT,
    23: HYBRID_FIT,
    24: HYBRID_FIT,
}
"""Rows kept in the file but not held to the estimate, by index, with why."""


@functools.cache
def load() -> Any:
    return json.loads((LOGS / "llamacpp_published.json").read_text(encoding="utf-8"))


@dataclass(frozen=True, slots=True)
class PublishedBuffers:
    """One published start-up: the KV and compute buffers it printed, and the estimate's, in bytes."""

    index: int
    label: str
    took: int
    own: int
    """The estimate's KV cache and compute buffer at the run's own settings."""
    default: int
    """The same at llama-server's defaults for the run's context per slot."""
    why_not: str = ""

    @property
    def ratio(self) -> float:
        return self.own / self.took

    @property
    def default_ratio(self) -> float:
        return self.default / self.took


def shapes(model: str) -> tuple[EngineShape, Shape]:
    m = load()["models"][model]
    per_token = m["layers"] * m["kv_heads"] * m["head_dim"] * 2 * 2  # K and V in f16
    engine = EngineShape(layers=m["layers"], hidden=m["hidden"], vocab=m["vocab"] or 0, heads=m["heads"])
    return engine, Shape(kv_bytes_per_token=per_token, kv_heads=m["kv_heads"], heads=m["heads"])


def own_settings(r: dict[str, Any]) -> tuple[LlamacppSettings, int]:
    """The run's settings and the context a request would name for it: each slot's cells (where the log
    prints slots, the cache is every slot's)."""
    slots = r["n_seq_max"] or 1
    s = LlamacppSettings(
        flash_attn=bool(r["flash_attn"]),
        parallel=slots,
        batch=max(r["n_batch"] or r["n_ubatch"], r["n_ubatch"]),
        ubatch=r["n_ubatch"],
        cache_type_k=r["type_k"],
        cache_type_v=r["type_v"],
    )
    return s, r["n_ctx"] // slots


def buffers(engine: EngineShape, shape: Shape, s: LlamacppSettings, context: int, **fit: int) -> int:
    run = llamacpp_run(s)
    kv = gguf_kv_bytes(shape, context, Settings(llamacpp=s))
    cells = run.cache_tokens(context)
    return kv + llamacpp_compute(engine, cells, ubatch=run.ubatch, flash_attn=run.flash_attn, **fit)


def took_bytes(r: dict[str, Any]) -> int:
    """The KV and compute buffers of the device with the largest compute buffer (every layer's)."""
    compute = r["compute_buffers_mib"]
    device = max((d for d in compute if not d.endswith("_Host")), key=lambda d: compute[d])
    mib: float = r["kv_buffers_mib"][device] + compute[device]
    return round(mib * MIB)


def rows(
    *, fa_hidden_bytes: int = LLAMACPP_FA_HIDDEN_BYTES, no_fa_hidden_bytes: int = LLAMACPP_NO_FA_HIDDEN_BYTES
) -> Iterator[PublishedBuffers]:
    """Every row; each estimated with the compute buffer's fitted parts given (a hold-out refits them)."""
    fit = {"fa_hidden_bytes": fa_hidden_bytes, "no_fa_hidden_bytes": no_fa_hidden_bytes}
    for i, r in enumerate(load()["rows"]):
        label = f"{r['model'].split('/')[-1]} {r['gguf_type']} {r['device'].split(' (')[0][:28]} ctx {r['n_ctx']}"
        if i in NOT_PLANNED:
            yield PublishedBuffers(i, label, 1, 0, 0, NOT_PLANNED[i])
            continue
        engine, shape = shapes(r["model"])
        s, context = own_settings(r)
        label += f" ub {r['n_ubatch']} fa {'on' if r['flash_attn'] else 'off'}" + (
            f" np {r['n_seq_max']}" if (r["n_seq_max"] or 1) > 1 else ""
        )
        default = buffers(engine, shape, LlamacppSettings(), context, **fit)
        yield PublishedBuffers(i, label, took_bytes(r), buffers(engine, shape, s, context, **fit), default)
