"""What an engine's start-up log says of itself, read from the published logs in tests/planner/engine_logs/
(their quoted lines, as the engines printed them): the KV cache it allocated, per card, and its release."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from producer.agent.engine_log import engine_version, kv_per_card, llamacpp_kv, ram_kv, vllm_kv

LOGS = Path(__file__).resolve().parents[2] / "planner" / "engine_logs"
MIB = 1 << 20
GIB = 1 << 30


def _rows(name: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads((LOGS / name).read_text())["rows"]
    return rows


LLAMACPP = _rows("llamacpp_published.json")
VLLM = _rows("vllm_published.json")


def gib(figure: float) -> int:
    """Bytes of a GiB figure as printed (two decimals)."""
    return int(Decimal(str(figure)) * GIB)


def _is_diff(excerpt: str) -> bool:
    # two rows quote a unified diff of two logs ('-' and '+' lines): no single run to read
    return any(line.startswith(("-llama", "+llama")) for line in excerpt.splitlines())


@pytest.mark.parametrize(
    "row", [r for r in LLAMACPP if r["kv_buffers_mib"] and not _is_diff(r["excerpt"])], ids=lambda r: r["source"]
)
def test_llamacpp_kv_buffers_as_printed(row: dict[str, Any]) -> None:
    expected = {dev: round(mib * MIB) for dev, mib in row["kv_buffers_mib"].items()}
    assert llamacpp_kv(row["excerpt"]) == expected


@pytest.mark.parametrize(
    "row", [r for r in LLAMACPP if r["build"] and r["build"].split()[0] in r["excerpt"]], ids=lambda r: r["source"]
)
def test_llamacpp_release_as_printed(row: dict[str, Any]) -> None:
    number = re.match(r"(\d+) \(", row["build"])
    # a build number is the release tag (b6895); a log that prints only a commit says no release
    assert engine_version("llamacpp", row["excerpt"]) == (f"b{number.group(1)}" if number else "")


# vllm#13061 quotes its rank's figure in the author's words ("... is only 8.69GiB"), not as logged
@pytest.mark.parametrize(
    "row",
    [r for r in VLLM if r["kv_cache_gib"] is not None and "issues/13061" not in r["source"]],
    ids=lambda r: r["source"],
)
def test_vllm_kv_per_card_is_the_smallest_rank(row: dict[str, Any]) -> None:
    """Each rank prints what it may give its cache; the engine sizes every rank's cache to the smallest
    (the row's ``kv_cache_gib``), so that is each card's KV part."""
    ranks = vllm_kv(row["excerpt"])
    assert ranks, row["excerpt"]
    assert min(ranks) == gib(row["kv_cache_gib"])
    assert kv_per_card("vllm", row["excerpt"], row["tp"]) == gib(row["kv_cache_gib"])


def test_vllm_tensor_parallel_ranks_each_print_their_share() -> None:
    row = next(r for r in VLLM if r["vllm"] == "0.10.0" and r["tp"] == 4 and r["kv_cache_gib"] == 52.11)
    assert sorted(vllm_kv(row["excerpt"])) == [gib(g) for g in (52.11, 52.21, 52.58)]


@pytest.mark.parametrize(
    "row",
    [r for r in VLLM if re.fullmatch(r"[0-9][0-9A-Za-z.+]*", r["vllm"]) and "version" in r["excerpt"]],
    ids=lambda r: r["source"],
)
def test_vllm_release_as_printed(row: dict[str, Any]) -> None:
    # a development build prints a local date suffix (.d20260731) the row leaves out
    assert re.fullmatch(re.escape(row["vllm"]) + r"(\.d\d{8})?", engine_version("vllm", row["excerpt"]))


def test_llamacpp_kv_per_card_in_the_holds_card_order() -> None:
    """CUDA0 is the first card the hold was given (``CUDA_VISIBLE_DEVICES`` in its order): each card's KV
    part is the smallest over the hold's cards, and a card with no KV line has none."""
    row = next(r for r in LLAMACPP if r["kv_buffers_mib"] == {"CUDA0": 2788.0, "CUDA1": 1564.0})
    assert kv_per_card("llamacpp", row["excerpt"], 2) == 1564 * MIB
    assert kv_per_card("llamacpp", row["excerpt"], 1) == 2788 * MIB
    assert kv_per_card("llamacpp", row["excerpt"], 3) == 0


def test_llamacpp_kv_in_ram_on_a_cpu_node() -> None:
    row = next(r for r in LLAMACPP if r["kv_buffers_mib"] == {"CPU": 7000.0})
    assert ram_kv("llamacpp", row["excerpt"]) == 7000 * MIB
    assert kv_per_card("llamacpp", row["excerpt"], 0) == 0
    partial = next(r for r in LLAMACPP if r["kv_buffers_mib"] == {"CUDA0": 200.0, "CPU": 440.0})
    assert ram_kv("llamacpp", partial["excerpt"]) == 440 * MIB


def test_llamacpp_two_caches_of_one_context_add_up_and_a_later_context_replaces() -> None:
    """A model with sliding-window layers has two caches in one context (both count); a context made again
    (a trial before the real one) replaces what the earlier one printed."""
    iswa = """llama_context: n_ctx         = 8192
llama_kv_cache_iswa: creating non-SWA KV cache, size = 8192 cells
llama_kv_cache:      CUDA0 KV buffer size =   256.00 MiB
llama_kv_cache_iswa: creating     SWA KV cache, size = 1024 cells
llama_kv_cache:      CUDA0 KV buffer size =    32.00 MiB
"""
    assert llamacpp_kv(iswa) == {"CUDA0": 288 * MIB}
    again = "llama_context: n_ctx         = 4096\nllama_kv_cache:      CUDA0 KV buffer size =   128.00 MiB\n" + iswa
    assert llamacpp_kv(again) == {"CUDA0": 288 * MIB}


def test_nothing_printed_yet() -> None:
    assert engine_version("vllm", "") == ""
    assert engine_version("llamacpp", "loading model\n") == ""
    assert kv_per_card("vllm", "INFO starting\n", 2) == 0
    assert llamacpp_kv("") == {}
    # a build without its git description prints build 0: no release to name
    assert engine_version("llamacpp", "build: 0 (unknown) with cc (GCC) 12.2.0 for x86_64-linux-gnu\n") == ""


def test_llamacpp_release_in_later_builds() -> None:
    """From 2026 the build line is ``common_init``'s (no colon), and ``--version`` prints the build number
    after the library's version."""
    log = "cmn   common_init: build 7412 (0c1e570) with GNU 12.2.0 for Linux x86_64\n"
    assert engine_version("llamacpp", log) == "b7412"
    assert engine_version("llamacpp", "version: 0.5.0-dev (build 7412, commit 0c1e570)\n") == "b7412"


def test_a_version_that_is_not_one_is_left_out() -> None:
    assert engine_version("vllm", "vLLM API server version 0.11.0'\"; rm\n") == ""


def test_unknown_engine_is_named() -> None:
    with pytest.raises(ValueError, match="engine 'tgi'"):
        engine_version("tgi", "")


RECORDED = Path(__file__).resolve().parents[2] / "data" / "llamacpp"


def test_recorded_llama_server_logs() -> None:
    """A 2026 llama-server says its build and buffers only from ``-lv 4``; at its default, nothing."""
    verbose = (RECORDED / "server_cpu_lv4.log").read_text()
    assert engine_version("llamacpp", verbose) == "b1"
    assert llamacpp_kv(verbose) == {"CPU": 16 * MIB}
    assert ram_kv("llamacpp", verbose) == 16 * MIB
    default = (RECORDED / "server_cpu_default.log").read_text()
    assert (engine_version("llamacpp", default), llamacpp_kv(default)) == ("", {})
