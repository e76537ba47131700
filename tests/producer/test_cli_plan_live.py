"""``modelplan plan --redis-url``: a dry run on the live pool, read as a worker reads it, with what the
model's engines were observed to hold; nothing written. And ``submit --model-path``: where the nodes load
the model from, carried by the request."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest
import redis

from producer import Client
from producer.cli import main, model_path_of
from tests.producer.test_cli_plan import EXAMPLES, POOL
from tests.worker.helpers import hb
from tests.worker.test_observed import placed, report, vllm
from worker import observed
from worker.reports import FOOTPRINTS

MODEL = EXAMPLES / "models" / "llama-3.1-8b-instruct"
LISTING = ["--files", str(MODEL / "files.json"), "--config", str(MODEL / "config.json")]
LISTING += ["--index", str(MODEL / "model.safetensors.index.json")]


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    FOOTPRINTS.take()
    observed.forget()
    yield
    observed.forget()


def every_key(r: redis.Redis) -> dict[bytes, bytes | None]:
    """Every key with its value as ``DUMP`` gives it: what a write would change."""
    return {k: r.dump(k) for k in r.scan_iter(count=1000)}


def test_the_live_pool_is_planned_on_and_said(
    client: Client, r: redis.Redis, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    client.heartbeat(hb("g1", "h100-80g", gpus=2, free=1))
    client.heartbeat(hb("g2", "h100-80g", gpus=2, free=0))
    before = every_key(r)
    assert main(["plan", "--redis-url", redis_url, *LISTING, "--context", "8k"]) == 0
    out = capsys.readouterr().out
    first, table = out.split("\n\n")[:2]
    assert first == (
        f"planned on the live pool at {redis_url} (prefix 'modelplan', $MODELPLAN_PREFIX): 2 nodes; "
        "0 observed runs of this model; nothing written"
    )
    rows = table.splitlines()[1:]
    assert rows[0].split()[3:7] == ["vllm", "1", "×", "h100-80g"] and rows[0].split()[-2:] == ["2", "free"]
    assert every_key(r) == before
    # JSON stays JSON; which pool it read goes to standard error
    assert main(["plan", "--redis-url", redis_url, *LISTING, "--json"]) == 0
    said = capsys.readouterr()
    assert said.out.startswith("[") and said.err.startswith("planned on the live pool at ")


def test_an_observed_estimate_shows_before_a_job(
    client: Client, r: redis.Redis, redis_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(observed.QUORUM_ENV, "1")
    client.heartbeat(hb("g1", "h100-80g", gpus=2, seq=0))  # the report's heartbeats come after it
    _, first, hold = placed(client)
    over = first.need_gb * 1.3
    report(client, "g1", {hold: vllm(over)})
    client.heartbeat(hb("g2", "h100-80g", gpus=2, seq=1))
    observed.forget()  # as another process would: read from Redis
    before = every_key(r)
    assert main(["plan", "--redis-url", redis_url, *LISTING, "--context", "8192"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"planned on the live pool at {redis_url} (prefix 'modelplan', $MODELPLAN_PREFIX): 2 nodes; ")
    assert "1 observed run of this model; nothing written\n" in out
    [line] = [ln for ln in out.splitlines() if ln.startswith("#1 ") and "observed" in ln]
    assert line.startswith(f"#1 {over * 1.05:.1f} GiB, observed (1 run since ")
    assert line.endswith(f"; the formula {first.need_gb:.1f})")
    assert every_key(r) == before
    # the same model on a file: no observation, and no line saying which Redis
    assert main(["plan", "--pool", POOL, *LISTING, "--context", "8192"]) == 0
    assert "observed" not in capsys.readouterr().out


def test_a_pool_is_asked_for(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("MODELPLAN_REDIS_URL", raising=False)
    assert main(["plan", *LISTING]) == 2
    assert "give a pool: a file of node records (--pool) or a Redis (--redis-url" in capsys.readouterr().err
    assert main(["plan", "--pool", POOL, "--redis-url", "redis://x", *LISTING]) == 2
    assert "give one pool" in capsys.readouterr().err


def test_submit_carries_where_the_nodes_load_the_model(
    client: Client, redis_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["submit", "--redis-url", redis_url, *LISTING, "--context", "8k"]
    assert main([*args, "--model-path", "/srv/models/llama-8b", "--job-id", "pathed"]) == 0
    assert main([*args, "--job-id", "plain"]) == 0
    capsys.readouterr()
    assert client.get("pathed").request.model_path == "/srv/models/llama-8b"
    assert client.get("plain").request.model_path is None
    # a record that names none is stored as before, without the field
    stored = client.redis.get(client.keys.job("plain"))
    assert stored is not None and b"model_path" not in stored
    assert main([*args, "--model-path", "models/llama-8b/x/y", "--job-id", "bad"]) == 2
    assert "model_path 'models/llama-8b/x/y' is neither a Hub id (org/name) nor an absolute path" in (
        capsys.readouterr().err
    )


def test_a_hub_repository_is_loaded_by_its_id() -> None:
    hub = argparse.Namespace(model_path=None, repo="meta-llama/Llama-3.1-8B-Instruct")
    assert model_path_of(hub) == "meta-llama/Llama-3.1-8B-Instruct"
    assert model_path_of(argparse.Namespace(model_path="/m", repo="meta-llama/Llama-3.1-8B-Instruct")) == "/m"
    assert model_path_of(argparse.Namespace(model_path=None, repo=str(MODEL))) is None  # a folder here
    assert model_path_of(argparse.Namespace(model_path=None, repo=None)) is None
