"""Every repository of the corpus (``tests/planner/corpus/``, sources in its ``SOURCES.md``) planned, and
its KV cache per token, parameter count, bits per weight, context limit and artifacts checked against
the arithmetic written out by hand in ``corpus_cases.py``, within 2%.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from planner import InvalidInput, Repository, options, plan, repository_from_listing
from planner.parallel import llamacpp_kv_bytes, vllm_kv_bytes
from tests.planner.corpus_cases import CASES, REFUSED
from tests.planner.corpus_registry import ENTRIES
from tests.planner.helpers import cpu_node, gpu_node

CORPUS = Path(__file__).resolve().parent / "corpus"
TOLERANCE = 0.02

POOL = [
    *(gpu_node(f"h100-{i}", "h100-80g", gpus=8, fabric="ib", host=1024) for i in range(2)),
    gpu_node("h200", "h200-141g", gpus=8, host=2048),
    gpu_node("l40s", "l40s-48g", gpus=4, host=256),
    cpu_node("cpu", 512),
]
"""Two 8 x H100 nodes on one fabric, an 8 x H200 node, a 4 x L40S node and a CPU node."""


def _json(folder: Path, name: str) -> Any:
    path = folder / name
    return json.loads(path.read_text()) if path.exists() else None


def load(name: str) -> Repository:
    """A corpus repository as a user would hand it to the planner."""
    folder = CORPUS / name
    case = CASES.get(name)
    config = _json(CORPUS / case.config_from if case and case.config_from else folder, "config.json")
    index = _json(folder, "model.safetensors.index.json") or _json(folder, "pytorch_model.bin.index.json")
    files = _json(folder, "files.json")
    if files is None:
        # no listing in the sources: one file of the case's bytes, else of the hand count at 16 bits (the
        # planner checks a config's count against its files' bytes)
        entry = ENTRIES.get(name)
        size = case.weights if case else 2 * entry.params if entry and entry.params else 1
        files = [{"path": "model.safetensors", "size": size}]
    unknown = [f for f in files if f.get("size") is None]
    if unknown:
        # sizes the sources did not tell: the index's total spread over its shards, else a placeholder
        total = (index or {}).get("metadata", {}).get("total_size", len(unknown))
        files = [{**f, "size": f["size"] if f.get("size") is not None else total // len(unknown)} for f in files]
    return repository_from_listing(
        files,
        config,
        index,
        hf_quant=_json(folder, "hf_quant_config.json"),
        adapter=_json(folder, "adapter_config.json"),
    )


def test_every_corpus_repository_has_a_case() -> None:
    folders = sorted(p.name for p in CORPUS.iterdir() if p.is_dir())
    assert len(folders) >= 30
    # the rest are in corpus_registry.py, checked by test_corpus_registry.py
    assert set(CASES) | set(REFUSED) <= set(folders)


def near(got: float, want: float) -> bool:
    return abs(got - want) <= TOLERANCE * abs(want)


@pytest.mark.parametrize("name", sorted(CASES))
def test_corpus_repository(name: str) -> None:
    case = CASES[name]
    repo = load(name)
    shape = repo.shape
    assert near(shape.kv_bytes_per_token, case.kv), (shape.kv_bytes_per_token, case.kv)
    assert near(shape.params, case.params), (shape.params, case.params, shape.params / case.params - 1)
    assert shape.max_context == case.context
    assert tuple(a.name for a in repo.artifacts) == case.artifacts
    planned = [a for a in repo.artifacts if a.name == case.artifacts[0]]
    assert planned[0].quant == case.quant
    context = min(4096, shape.max_context)
    [best, *_] = plan(repo, POOL, context)
    assert best.artifact == case.artifacts[0] and not best.cpu
    [bits] = {o.bits_per_weight for o in options(planned, shape, POOL, context)}
    assert near(bits, case.bits), (bits, case.bits)


@pytest.mark.parametrize(("name", "line"), sorted(REFUSED.items()))
def test_corpus_repository_refused(name: str, line: str) -> None:
    with pytest.raises(InvalidInput, match=line.replace("(", r"\(").replace(")", r"\)")):
        load(name)


def test_window_layers_of_real_models() -> None:
    """Gemma 3 27B: 52 of 62 layers slide over 1024 tokens; gpt-oss-120b: 18 of 36 over 128."""
    gemma = load("google--gemma-3-27b-it").shape
    per_layer = 2 * 16 * 128 * 2
    context = 131072
    vllm_window = (-(-(1023 + 8192) // 16) + 1) * 16
    assert vllm_kv_bytes(gemma, context) == 10 * per_layer * context + 52 * per_layer * vllm_window
    assert llamacpp_kv_bytes(gemma, context) == 10 * per_layer * context + 52 * per_layer * (4 * 1024 + 512)
    oss = load("openai--gpt-oss-120b").shape
    per_layer = 2 * 8 * 64 * 2
    vllm_window = (-(-(127 + 8192) // 16) + 1) * 16
    assert vllm_kv_bytes(oss, context) == 18 * per_layer * context + 18 * per_layer * vllm_window
    assert llamacpp_kv_bytes(oss, context) == 18 * per_layer * context + 18 * per_layer * (4 * 128 + 512)


def test_qwen3_235b_in_bf16_runs_on_one_8_card_node() -> None:
    """64 heads and 4 KV heads: eight cards, each caching one replicated KV head."""
    repo = load("Qwen--Qwen3-235B-A22B")
    [o, *_] = options(repo.artifacts, repo.shape, POOL[:2], 4096)
    assert (o.gpu_class, o.gpus_per_node, o.nodes) == ("h100-80g", 8, 1)


def test_deepseek_v3_mla_cache_is_whole_on_every_card() -> None:
    repo = load("deepseek-ai--DeepSeek-V3")
    [o] = options(repo.artifacts, repo.shape, POOL[2:3], 131072, estimate="seed")  # the seed's arithmetic
    weights = repo.artifacts[0].bytes
    kv = 131072 * 61 * (512 + 64) * 2
    assert o.gpus_per_node == 8
    assert o.need_gb == pytest.approx((weights + 8 * kv) // 8 / (1 << 30) + 2 + weights // 8 // 5 / (1 << 30))
