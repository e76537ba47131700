"""The published vLLM start-up logs (``tests/planner/engine_logs/vllm_published.json``) hold together: every
row names its source and quotes the lines its figures came from, every figure recorded is in that quote,
every model has a shape, and the table is wide enough (rows, cards, releases, tensor-parallel sizes) to
check a memory estimate against.
"""

from __future__ import annotations

import collections
import json
import re
from pathlib import Path
from typing import Any

import pytest

TABLE = Path(__file__).resolve().parent / "engine_logs" / "vllm_published.json"

FIGURES = ("weights_gib", "non_torch_gib", "activation_peak_gib", "cuda_graph_gib", "kv_cache_gib")
"""The memory fields a row may only fill with a number its excerpt prints."""

FIELDS = frozenset(
    (
        "model",
        "vllm",
        "engine",
        "usage",
        "card",
        "card_total_gib",
        "tp",
        "pp",
        "dtype",
        "quantization",
        "kv_cache_dtype",
        "max_model_len",
        "max_num_batched_tokens",
        "max_num_seqs",
        "gpu_memory_utilization",
        "enforce_eager",
        "limit_mm_per_prompt",
        "sampler",
        "nvidia_driver",
        "weights_gib",
        "non_torch_gib",
        "activation_peak_gib",
        "cuda_graph_gib",
        "kv_cache_gib",
        "kv_cache_tokens",
        "source",
        "excerpt",
        "inferred",
        "notes",
    )
)
REQUIRED = FIELDS - {"limit_mm_per_prompt", "sampler", "nvidia_driver"}
"""Every row carries every field (null where the log is silent); the multimodal limit only where it was set,
and the sampler only where the excerpt quotes the line that names it."""
SAMPLER_LINES = {
    "flashinfer": "Using FlashInfer for top-p & top-k sampling",
    "pytorch": "Falling back to the PyTorch-native implementation of top-p & top-k sampling",
}
"""What V1's ``topk_topp_sampler.py`` logs for each ``sampler`` a row may record."""
SHAPE = ("layers", "hidden", "vocab", "heads", "kv_heads", "head_dim", "experts")
EXCLUDED_SOURCE = "llm-d-incubation"
"""The logs the current fit was made from: this table must stay independent of them."""


def _table() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(TABLE.read_text(encoding="utf-8"))
    return data


ROWS: list[dict[str, Any]] = _table()["rows"]
MODELS: dict[str, dict[str, Any]] = _table()["models"]


def _spellings(value: float) -> set[str]:
    """The ways a log prints a GiB figure: as given, or rounded to 2 or 4 places."""
    return {repr(value), f"{value:.2f}", f"{value:.4f}", f"{value:.1f}"}


def _row_id(row: dict[str, Any]) -> str:
    return f"{row['model']}@{row['card']}x{row['tp']}/{row['vllm']}"


def _release(row: dict[str, Any]) -> str:
    """The minor release a row ran, e.g. '0.10' for '0.10.1.1' or '0.6' for '0.6.5.dev (main, ...)'."""
    found = re.match(r"(\d+\.\d+)", row["vllm"])
    assert found, f"row {_row_id(row)}: vllm {row['vllm']!r} names no release"
    return found.group(1)


@pytest.mark.parametrize("row", ROWS, ids=_row_id)
def test_a_row_has_a_source_an_excerpt_and_only_known_fields(row: dict[str, Any]) -> None:
    assert set(row) <= FIELDS, f"unknown fields {sorted(set(row) - FIELDS)}"
    assert set(row) >= REQUIRED, f"missing {sorted(REQUIRED - set(row))}"
    assert str(row["source"]).startswith("https://"), f"source {row['source']!r} is not a URL"
    assert EXCLUDED_SOURCE not in row["source"]
    assert row["excerpt"].strip(), "empty excerpt"
    assert row["engine"] in ("V0", "V1")
    assert row["usage"] in ("api_server", "llm_class", "unknown")
    assert isinstance(row["tp"], int) and row["tp"] >= 1
    assert set(row["inferred"]) <= FIELDS, f"inferred names unknown fields {sorted(set(row['inferred']) - FIELDS)}"


@pytest.mark.parametrize("row", ROWS, ids=_row_id)
def test_every_figure_a_row_records_is_printed_in_its_excerpt(row: dict[str, Any]) -> None:
    for field in FIGURES:
        value = row[field]
        if value is None:
            continue
        assert any(s in row["excerpt"] for s in _spellings(value)), f"{field}={value} not in the excerpt"
    tokens = row["kv_cache_tokens"]
    if tokens is not None:
        assert f"{tokens:,}" in row["excerpt"] or str(tokens) in row["excerpt"], f"{tokens} tokens not in the excerpt"


@pytest.mark.parametrize("row", [r for r in ROWS if "sampler" in r], ids=_row_id)
def test_a_recorded_sampler_is_the_one_its_excerpt_names(row: dict[str, Any]) -> None:
    """Lines wrapped in the file are joined before the search."""
    assert row["sampler"] in SAMPLER_LINES
    assert SAMPLER_LINES[row["sampler"]] in row["excerpt"].replace("\n", "")


@pytest.mark.parametrize("row", [r for r in ROWS if r.get("nvidia_driver")], ids=_row_id)
def test_a_recorded_driver_says_where_it_was_read(row: dict[str, Any]) -> None:
    """A start-up log does not print the driver: a row that records one says in ``inferred`` where it was
    read, naming the version."""
    assert row["nvidia_driver"] in row["inferred"]["nvidia_driver"]


@pytest.mark.parametrize("row", ROWS, ids=_row_id)
def test_every_row_has_a_memory_figure(row: dict[str, Any]) -> None:
    assert any(row[f] is not None for f in FIGURES), "a row without a single memory figure"


@pytest.mark.parametrize("name", sorted({row["model"] for row in ROWS}))
def test_every_model_has_a_shape_and_its_source(name: str) -> None:
    shape = MODELS.get(name)
    assert shape is not None, f"{name} has no shape in the models section"
    for key in SHAPE:
        assert isinstance(shape[key], int) and shape[key] >= 0, f"{name}: {key}={shape.get(key)!r}"
    assert shape["layers"] > 0 and shape["heads"] >= shape["kv_heads"] > 0
    assert str(shape["config_source"]).startswith("https://")


def test_the_table_is_wide_enough_to_check_an_estimate_against() -> None:
    assert len(ROWS) >= 40
    assert len({row["card"] for row in ROWS}) >= 5
    assert len({_release(row) for row in ROWS}) >= 4
    assert {1, 2, 4, 8} <= {row["tp"] for row in ROWS}
    assert {"V0", "V1"} <= {row["engine"] for row in ROWS}
    assert any(row["kv_cache_dtype"].startswith("fp8") for row in ROWS)
    assert any(row["enforce_eager"] for row in ROWS)
    assert {row.get("sampler") for row in ROWS} >= {"flashinfer", "pytorch"}


def test_the_readme_counts_what_the_file_holds() -> None:
    """README-vllm.md's counts are written by hand: its rows, models, cards and sources are the file's."""
    text = (Path(__file__).parent / "engine_logs" / "README-vllm.md").read_text(encoding="utf-8")
    assert f"## What is in it ({len(ROWS)} rows, {len({r['model'] for r in ROWS})} models)" in text
    cards = collections.Counter(r["card"] for r in ROWS)
    line = next(x for x in text.splitlines() if x.startswith("| cards |"))
    assert sorted(line.removeprefix("| cards |").strip(" |").split(", ")) == sorted(
        f"{c} ({n})" for c, n in cards.items()
    )
    for repo, n in collections.Counter(_source_repo(r["source"]) for r in ROWS).items():
        assert f"| {repo} | {n} |" in text, f"{repo}: {n} rows, not as the README says"


def _source_repo(url: str) -> str:
    """The source as the README's table names it: a repository, or an issue or pull request thread."""
    parts = url.split()[0].split("/")
    if "github.com" in url and len(parts) > 6 and parts[5] in ("issues", "pull"):
        return "/".join(parts[:7])
    if "github.com" in url:
        return "/".join(parts[:5])
    return url.split()[0]
