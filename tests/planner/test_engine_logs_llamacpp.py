"""Integrity of the published llama.cpp start-up logs in engine_logs/llamacpp_published.json.

The rows are the independent check on the llama.cpp memory estimate, so every figure must be traceable: each row
names its source and quotes the log lines, every buffer size recorded appears in those lines, and every model has
a shape to estimate from.
"""

import json
import re
from pathlib import Path
from typing import Any

import pytest

LOGS = Path(__file__).parent / "engine_logs" / "llamacpp_published.json"

# Enough rows to fit against, and the settings that move llama.cpp's buffers the most must each be seen.
MIN_ROWS = 20
BUFFER_FIELDS = ("kv_buffers_mib", "compute_buffers_mib", "model_buffers_mib")
BREAKDOWN_KEYS = {"total", "free", "self", "model", "context", "compute", "unaccounted"}
SHAPE_KEYS = ("layers", "hidden", "vocab", "heads", "kv_heads", "head_dim", "experts", "source")


def _load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(LOGS.read_text(encoding="utf-8"))
    return data


def _rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = _load()["rows"]
    return rows


def _row_id(row: dict[str, Any]) -> str:
    return f"{row['model']} n_ctx={row.get('n_ctx')} ub={row.get('n_ubatch')}"


def _mib(value: float) -> str:
    # llama.cpp prints buffer sizes with two decimals ("%8.2f MiB")
    return f"{value:.2f}"


def test_enough_rows() -> None:
    assert len(_rows()) >= MIN_ROWS


@pytest.mark.parametrize("row", _rows(), ids=_row_id)
def test_row_names_source_and_quotes_log(row: dict[str, Any]) -> None:
    assert row["source"].startswith("https://"), row["source"]
    assert row["excerpt"].strip(), "empty excerpt"
    assert isinstance(row.get("inferred", {}), dict)


@pytest.mark.parametrize("row", _rows(), ids=_row_id)
def test_every_buffer_figure_is_in_the_excerpt(row: dict[str, Any]) -> None:
    excerpt = row["excerpt"]
    for field in BUFFER_FIELDS:
        for device, mib in (row.get(field) or {}).items():
            assert _mib(mib) in excerpt, f"{field}[{device}] = {mib} not in excerpt"
            assert device.split("-")[0].split("_")[0] in excerpt, f"{field} device {device} not in excerpt"
    if row.get("output_buffer_mib") is not None:
        assert _mib(row["output_buffer_mib"]) in excerpt


@pytest.mark.parametrize("row", _rows(), ids=_row_id)
def test_breakdown_figures_are_in_the_excerpt(row: dict[str, Any]) -> None:
    for device, figures in (row.get("breakdown") or {}).items():
        assert set(figures) <= BREAKDOWN_KEYS, f"{device}: unknown keys {set(figures) - BREAKDOWN_KEYS}"
        line = next((ln for ln in row["excerpt"].splitlines() if "breakdown_print" in ln and f" {device} " in ln), None)
        assert line is not None, f"no breakdown line for {device}"
        numbers = {int(n) for n in re.findall(r"-?\d+", line.split("|", 2)[-1])}
        for key, value in figures.items():
            assert value in numbers, f"{device}.{key} = {value} not on its breakdown line"
        if {"self", "model", "context", "compute"} <= set(figures):
            # each column is rounded to whole MiB on its own, so the parts may miss the sum by a MiB or two
            parts = figures["model"] + figures["context"] + figures["compute"]
            assert abs(figures["self"] - parts) <= 2, device


@pytest.mark.parametrize("row", _rows(), ids=_row_id)
def test_settings_are_typed(row: dict[str, Any]) -> None:
    assert row.get("flash_attn") in (True, False, None)
    for field in ("n_ctx", "n_ctx_per_seq", "n_seq_max", "n_batch", "n_ubatch"):
        assert row.get(field) is None or (isinstance(row[field], int) and row[field] > 0), field
    if row.get("n_ctx_per_seq") and row.get("n_seq_max") and row.get("n_ctx"):
        assert row["n_ctx_per_seq"] * row["n_seq_max"] >= row["n_ctx"] or row["n_ctx_per_seq"] == row["n_ctx"]


def test_every_model_has_a_shape() -> None:
    data = _load()
    for row in data["rows"]:
        shape = data["models"].get(row["model"])
        assert shape is not None, f"no shape for {row['model']}"
        for key in SHAPE_KEYS:
            assert key in shape, f"{row['model']}: shape lacks {key}"
        assert shape["layers"] > 0 and shape["heads"] > 0 and shape["kv_heads"] > 0


def test_covers_the_settings_the_estimate_is_pinned_on() -> None:
    rows = _rows()
    assert {True, False} <= {r.get("flash_attn") for r in rows}, "need rows with flash attention on and off"
    assert len({r["type_k"] for r in rows if r.get("type_k")}) >= 2, "need at least two KV cache types"
    assert len({r["n_ubatch"] for r in rows if r.get("n_ubatch")}) >= 2, "need at least two ubatch sizes"
    assert any(r.get("n_ubatch") == 8192 for r in rows), "need a -ub 8192 row"
    assert any(
        r.get("flash_attn") is False and r.get("n_ctx") == 32768 and r.get("compute_buffers_mib") for r in rows
    ), "need a flash-attention-off row at 32k context with its compute buffer"
