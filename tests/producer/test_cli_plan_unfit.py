"""``modelplan plan`` where nothing fits: the reason a worker would record for the job, the longest
context that would fit where only the context is too long, and an empty pool said as one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner import parse_pool, pool_nodes
from planner.decide import plan_job
from planner.longest import longest_context
from producer.cli import main, parser
from producer.named import load_repository

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "examples" / "models"
ONE_24G = [
    {"node_id": "g", "gpu_class": "rtx4090-24g", "gpus": 1, "free_gpus": 1, "host_mem_gb": 64, "host_free_gb": 64}
]


def listing(model: str) -> list[str]:
    d = MODELS / model
    return ["--files", str(d / "files.json"), "--config", str(d / "config.json")]


def write_pool(tmp_path: Path, nodes: list[dict[str, object]]) -> str:
    pool = tmp_path / "pool.json"
    pool.write_text(json.dumps(nodes))
    return str(pool)


def worker_reason(argv: list[str], context: int) -> str:
    """What a worker records for a job of ``argv``'s repository that nothing can hold."""
    args = parser().parse_args(argv)
    repo = load_repository(args)
    nodes = pool_nodes(parse_pool(Path(args.pool).read_text()))
    job = plan_job(repo.artifacts, repo.shape, nodes, context)
    assert job.outcome == "failed"
    return job.reason


def test_a_context_too_long_says_the_workers_reason_and_the_longest_that_fits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["plan", "--pool", write_pool(tmp_path, ONE_24G), *listing("llama-3.1-8b-instruct"), "--context", "131072"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    reason = worker_reason(argv, 131072)
    assert reason.startswith("nothing in the pool can hold it: original (15.0 GiB, KV cache 16.0 GiB at 131072 tokens)")
    assert "a card on 1 × rtx4090-24g of 21.6" in reason
    first, second = out.splitlines()[:2]
    assert first == f"no option: {reason}"
    longest = int(second.split("--context ")[1].rstrip(")"))
    assert 8192 < longest < 131072
    assert second == f"it fits at a context of up to {longest} tokens (--context {longest})"
    # that context fits, and one token more does not
    assert main([*argv[:-1], str(longest), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)
    assert main([*argv[:-1], str(longest + 1), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_a_model_too_large_at_any_context_says_the_workers_reason_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["plan", "--pool", write_pool(tmp_path, ONE_24G), *listing("llama-3.1-70b-instruct")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    reason = worker_reason(argv, 4096)
    assert "original (131.4 GiB" in reason
    assert out.splitlines()[0] == f"no option: {reason}"
    assert "fits at a context" not in out


def test_an_empty_pool_is_said_to_be_empty(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pool = write_pool(tmp_path, [])
    assert main(["plan", "--pool", pool, *listing("llama-3.1-8b-instruct")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"no option: the pool in {pool} has no node"


def test_the_longest_context_is_none_where_no_context_fits_and_below_the_one_asked() -> None:
    args = parser().parse_args(["plan", "--pool", "-", *listing("llama-3.1-8b-instruct")])
    repo = load_repository(args)
    nodes = pool_nodes(parse_pool(json.dumps(ONE_24G)))
    longest = longest_context(repo.artifacts, repo.shape, nodes, 131072)
    assert longest is not None and longest < 131072
    assert longest_context(repo.artifacts, repo.shape, [], 131072) is None
    big = load_repository(parser().parse_args(["plan", "--pool", "-", *listing("llama-3.1-70b-instruct")]))
    assert longest_context(big.artifacts, big.shape, nodes, 4096) is None
