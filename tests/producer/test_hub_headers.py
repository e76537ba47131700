"""A Hub repository's safetensors headers: read where the client can, cached with the rest, and planned."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis

from planner.constants import KV_BYTES_PER_ELEMENT
from producer.hub import resolve
from tests.planner.test_weighing import hybrid, hybrid_config
from tests.producer.test_hub import COMMIT, REPO, FakeHubServer, StubHub
from worker.keys import Keys

TINY = Path(__file__).resolve().parents[2] / "examples" / "models" / "tiny-llama-safetensors"
FILES = [{"path": "config.json", "size": 400}, {"path": "model.safetensors", "size": 600_000}]


class HeadersHub(StubHub):
    """A stubbed Hub that also reads safetensors headers, as ``get_safetensors_metadata`` gives them."""

    def __init__(self, headers: Mapping[str, Any] | None, **kw: Any) -> None:
        super().__init__(FILES, {"config.json": hybrid_config()}, **kw)
        self.headers = headers

    def safetensors_headers(self, repo_id: str, revision: str, filenames: Sequence[str]) -> Any:
        self.calls.append(("safetensors_headers", repo_id, revision, *filenames))
        return self.headers


def hub_shaped(head: Mapping[str, Any]) -> dict[str, Any]:
    """Headers in the shape of ``get_safetensors_metadata``'s answer, as JSON."""
    tensors = {k: v for k, v in head.items() if k != "__metadata__"}
    return {
        "metadata": None,
        "sharded": False,
        "weight_map": dict.fromkeys(tensors, "model.safetensors"),
        "files_metadata": {"model.safetensors": {"metadata": head.get("__metadata__"), "tensors": tensors}},
    }


@pytest.mark.parametrize("shape", ["by file", "hub"])
def test_headers_the_hub_gives_are_read_cached_and_win(r: redis.Redis, shape: str) -> None:
    headers = {"model.safetensors": hybrid()} if shape == "by file" else hub_shaped(hybrid())
    hub = HeadersHub(headers)
    repo = resolve(REPO, cache=r, keys=Keys(), hub_client=hub)
    assert repo.shape.kv_bytes_per_token == 2 * 64 * KV_BYTES_PER_ELEMENT
    assert "2 of 8 layers hold key/value projections" in repo.notes[0]
    assert ("safetensors_headers", REPO, COMMIT, "model.safetensors") in hub.calls
    entry = json.loads(r.get(Keys().hub(REPO, "main")) or b"")
    assert entry["weights"]["kv_layers"] == [3, 7]
    # from the cache, the Hub not asked again: the same repository
    again = HeadersHub(None, fail_listing=OSError("offline"))
    assert resolve(REPO, cache=r, keys=Keys(), hub_client=again) == repo and again.calls == []


@pytest.mark.parametrize("headers", [None, {"model.safetensors": {"x": {"dtype": "BF16", "shape": "4"}}}, {}])
def test_headers_that_cannot_be_read_leave_the_configs_arithmetic(r: redis.Redis, headers: Any) -> None:
    repo = resolve(REPO, cache=r, keys=Keys(), hub_client=HeadersHub(headers))
    assert repo.shape.kv_bytes_per_token == 8 * 64 * KV_BYTES_PER_ELEMENT and repo.notes == ()
    assert "weights" not in json.loads(r.get(Keys().hub(REPO, "main")) or b"")


def test_the_real_client_reads_a_header_by_its_first_bytes(r: redis.Redis, tmp_path: Path, monkeypatch: Any) -> None:
    pytest.importorskip("huggingface_hub")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    from producer.hub import HfHubClient

    weights = (TINY / "model.safetensors").read_bytes()
    config = json.loads((TINY / "config.json").read_text())
    files = [{"path": "config.json", "size": 400}, {"path": "model.safetensors", "size": len(weights)}]
    server = FakeHubServer({"files": files, "config.json": config, "model.safetensors": weights})
    try:
        client = HfHubClient(endpoint=server.url, cache_dir=str(tmp_path))
        repo = resolve(REPO, cache=r, keys=Keys(), hub_client=client)
    finally:
        server.close()
    assert repo.shape.params == 205_120 and repo.notes == ()
    entry = json.loads(r.get(Keys().hub(REPO, "main")) or b"")
    assert entry["weights"]["params_by_dtype"] == {"BF16": 205_120}


def test_a_damaged_reading_in_the_cache_is_asked_for_again(r: redis.Redis) -> None:
    key = Keys().hub(REPO, "main")
    repo = resolve(REPO, cache=r, keys=Keys(), hub_client=HeadersHub({"model.safetensors": hybrid()}))
    entry = json.loads(r.get(key) or b"")
    entry["weights"]["params_by_dtype"] = ["BF16"]
    r.set(key, json.dumps(entry))
    hub = HeadersHub({"model.safetensors": hybrid()})
    assert resolve(REPO, cache=r, keys=Keys(), hub_client=hub) == repo
    assert hub.listings() == 1
