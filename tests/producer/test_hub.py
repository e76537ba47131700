"""Resolving a Hub repository: through the Redis cache, with a stubbed Hub (no network)."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from planner.errors import InvalidInput
from planner.repository import Repository, repository_from_listing
from producer.errors import HubClientMissing, HubRepoNotFound, HubUnavailable
from producer.hub import HUB_CACHE_TTL_S, HubListing, looks_like_repo_id, resolve
from tests.redis_server import free_port
from worker.errors import RedisUnavailable
from worker.keys import Keys
from worker.records import utcnow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "models"
REPO = "meta-llama/Llama-3.1-8B-Instruct"
COMMIT = "0e9e39f249a16976918f6564b8830bc894c89659"
ALTERNATIVES = ("--files FILES.json --config CONFIG.json", "--repo DIR")


def example(name: str) -> dict[str, Any]:
    """An example repository's listing and JSON files, as the Hub would hold them."""
    folder = EXAMPLES / name
    data: dict[str, Any] = {"files": json.loads((folder / "files.json").read_text())}
    for filename in ("config.json", "model.safetensors.index.json"):
        if (folder / filename).exists():
            data[filename] = json.loads((folder / filename).read_text())
    return data


LLAMA = example("llama-3.1-8b-instruct")


class StubHub:
    """A Hub that serves one repository from memory and counts what it was asked."""

    def __init__(
        self,
        files: Sequence[Mapping[str, Any]] = LLAMA["files"],
        documents: Mapping[str, Any] | None = None,
        *,
        fail_listing: Exception | None = None,
        fail_reading: Exception | None = None,
        delay: float = 0.0,
    ) -> None:
        self.files = files
        self.documents = dict(LLAMA if documents is None else documents)
        self.fail_listing = fail_listing
        self.fail_reading = fail_reading
        self.delay = delay
        self.calls: list[tuple[str, ...]] = []
        self._lock = threading.Lock()

    def list_files(self, repo_id: str, revision: str) -> HubListing:
        with self._lock:
            self.calls.append(("list_files", repo_id, revision))
        time.sleep(self.delay)
        if self.fail_listing is not None:
            raise self.fail_listing
        return HubListing(commit=COMMIT, files=self.files)

    def read_json(self, repo_id: str, filename: str, revision: str) -> Any:
        with self._lock:
            self.calls.append(("read_json", repo_id, filename, revision))
        if self.fail_reading is not None:
            raise self.fail_reading
        return self.documents.get(filename)

    def listings(self) -> int:
        return sum(1 for c in self.calls if c[0] == "list_files")


def expected(data: Mapping[str, Any] = LLAMA) -> Repository:
    return repository_from_listing(data["files"], data["config.json"], data.get("model.safetensors.index.json"))


def test_a_first_resolve_asks_the_hub_once_and_caches_what_it_said(r: redis.Redis) -> None:
    keys = Keys()
    hub = StubHub()
    before = utcnow()

    repo = resolve(REPO, cache=r, keys=keys, hub_client=hub)

    assert repo == expected()
    assert hub.calls == [
        ("list_files", REPO, "main"),
        ("read_json", REPO, "config.json", COMMIT),
        ("read_json", REPO, "model.safetensors.index.json", COMMIT),
    ]
    key = keys.hub(REPO, "main")
    assert key == "modelplan:hub:meta-llama/Llama-3.1-8B-Instruct@main"
    assert r.keys("*") == [key.encode()]  # the entry, and no lock left behind
    assert 0 < r.ttl(key) <= HUB_CACHE_TTL_S
    entry = json.loads(r.get(key) or b"")
    fetched_at = datetime.fromisoformat(entry.pop("fetched_at"))
    assert before <= fetched_at <= utcnow() and fetched_at.utcoffset() == timedelta(0)
    assert entry == {
        "schema_version": 1,
        "repo_id": REPO,
        "revision": "main",
        "commit": COMMIT,
        "listing": [{"path": f["path"], "size": f["size"]} for f in LLAMA["files"]],
        "config": LLAMA["config.json"],
        "index": {"metadata": LLAMA["model.safetensors.index.json"]["metadata"]},
    }


def test_a_thousand_resolves_ask_the_hub_once(r: redis.Redis) -> None:
    hub = StubHub()
    repos = {resolve(REPO, cache=r, keys=Keys(), hub_client=hub) for _ in range(1000)}
    assert repos == {expected()}
    assert hub.listings() == 1 and len(hub.calls) == 3


def test_revisions_and_prefixes_are_cached_apart(r: redis.Redis) -> None:
    hub = StubHub()
    resolve(REPO, cache=r, keys=Keys(), hub_client=hub)
    resolve(REPO, "v1.0", cache=r, keys=Keys(), hub_client=hub)
    resolve(REPO, cache=r, keys=Keys("other"), hub_client=hub)
    resolve(REPO, "v1.0", cache=r, keys=Keys(), hub_client=hub)
    assert hub.listings() == 3
    assert sorted(r.keys("*")) == sorted(
        k.encode() for k in (Keys().hub(REPO, "main"), Keys().hub(REPO, "v1.0"), Keys("other").hub(REPO, "main"))
    )


def test_an_expired_entry_is_asked_for_again(r: redis.Redis) -> None:
    hub = StubHub()
    key = Keys().hub(REPO, "main")
    resolve(REPO, cache=r, keys=Keys(), hub_client=hub, ttl=1)
    assert 0 < r.pttl(key) <= 1000
    r.pexpire(key, 1)  # let Redis's own expiry take it, without waiting out the second
    deadline = time.monotonic() + 5
    while r.exists(key) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert not r.exists(key)

    assert resolve(REPO, cache=r, keys=Keys(), hub_client=hub) == expected()
    assert hub.listings() == 2
    assert 1000 < r.pttl(key) <= HUB_CACHE_TTL_S * 1000


def test_the_repository_is_what_the_listing_gives_fresh_and_cached(r: redis.Redis) -> None:
    fresh = resolve(REPO, cache=r, keys=Keys(), hub_client=StubHub())
    cached = resolve(REPO, cache=r, keys=Keys(), hub_client=StubHub(fail_listing=AssertionError("asked")))
    want = expected()
    assert fresh == cached == want
    assert [a.name for a in want.artifacts] == ["original"]
    assert want.artifacts[0].bytes == 16_060_522_496 and want.artifacts[0].shards == 4
    assert want.shape.params == 16_060_522_496 // 2  # from the index's total size, in bf16
    assert want.shape.max_context == 131072


def test_without_a_cache_the_hub_is_asked_every_time() -> None:
    hub = StubHub()
    assert resolve(REPO, cache=None, keys=Keys(), hub_client=hub) == expected()
    assert resolve(REPO, cache=None, keys=Keys(), hub_client=hub) == expected()
    assert hub.listings() == 2


def test_a_repository_without_an_index_has_no_parameter_count_from_it(r: redis.Redis) -> None:
    data = {**LLAMA, "files": [f for f in LLAMA["files"] if f["path"] != "model.safetensors.index.json"]}
    hub = StubHub(data["files"])
    repo = resolve(REPO, cache=r, keys=Keys(), hub_client=hub)
    assert repo == repository_from_listing(data["files"], data["config.json"])
    assert ("read_json", REPO, "model.safetensors.index.json", COMMIT) not in hub.calls
    assert json.loads(r.get(Keys().hub(REPO, "main")) or b"")["index"] is None


def test_many_callers_at_once_ask_the_hub_once(redis_url: str) -> None:
    hub = StubHub(delay=0.3)
    results: list[Repository] = []
    errors: list[BaseException] = []

    def call() -> None:
        client = redis.Redis.from_url(redis_url)
        try:
            results.append(resolve(REPO, cache=client, keys=Keys(), hub_client=hub))
        except BaseException as e:
            errors.append(e)
        finally:
            client.close()

    threads = [threading.Thread(target=call) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == []
    assert results == [expected()] * 16
    assert hub.listings() == 1
    r = redis.Redis.from_url(redis_url)
    assert r.keys("*") == [Keys().hub(REPO, "main").encode()]
    r.close()


@pytest.mark.parametrize(
    "error", [ConnectionError("[Errno 111] Connection refused"), TimeoutError("timed out"), OSError("no route")]
)
@pytest.mark.parametrize("where", ["listing", "reading"])
def test_offline_is_one_clear_error_and_nothing_is_cached(r: redis.Redis, error: OSError, where: str) -> None:
    hub = StubHub(fail_listing=error) if where == "listing" else StubHub(fail_reading=error)
    with pytest.raises(HubUnavailable) as caught:
        resolve(REPO, cache=r, keys=Keys(), hub_client=hub)
    message = str(caught.value)
    assert message.startswith(f"{REPO}@main: cannot ask the Hugging Face Hub ({type(error).__name__}: {error})")
    assert all(alternative in message for alternative in ALTERNATIVES)
    assert caught.value.__cause__ is error
    assert (caught.value.repo_id, caught.value.revision) == (REPO, "main")
    assert r.keys("*") == []  # no entry, and the lock was let go at once


def test_after_a_failure_the_next_caller_asks_the_hub_itself(r: redis.Redis) -> None:
    with pytest.raises(HubUnavailable):
        resolve(REPO, cache=r, keys=Keys(), hub_client=StubHub(fail_listing=ConnectionError("down")))
    hub = StubHub()
    assert resolve(REPO, cache=r, keys=Keys(), hub_client=hub) == expected()
    assert hub.listings() == 1


@pytest.mark.parametrize("problem", ["missing", "gated", "revision", "disabled"])
def test_a_repository_the_hub_will_not_give_is_not_found_and_not_cached(r: redis.Redis, problem: Any) -> None:
    error = HubRepoNotFound(REPO, "main", problem)
    # A gated repository lists its files to anyone; only reading them needs access.
    hub = StubHub(fail_reading=error) if problem == "gated" else StubHub(fail_listing=error)
    with pytest.raises(HubRepoNotFound) as caught:
        resolve(REPO, cache=r, keys=Keys(), hub_client=hub)
    assert caught.value is error
    assert r.keys("*") == []


def test_an_error_about_the_commit_read_names_the_revision_asked_for(r: redis.Redis) -> None:
    # The JSON files are read at the commit the listing came from; the person asked for the branch.
    for error in (HubUnavailable(REPO, COMMIT, "timed out"), HubRepoNotFound(REPO, COMMIT, "gated")):
        with pytest.raises(type(error)) as caught:
            resolve(REPO, cache=r, keys=Keys(), hub_client=StubHub(fail_reading=error))
        assert caught.value.revision == "main" and caught.value.__cause__ is error
        assert str(caught.value) == str(error).replace(COMMIT, "main") and COMMIT not in str(caught.value)
    assert r.keys("*") == []


def test_the_not_found_messages_say_what_to_do() -> None:
    gated = str(HubRepoNotFound(REPO, "main", "gated"))
    assert "gated" in gated and "HF_TOKEN" in gated and f"https://huggingface.co/{REPO}" in gated
    assert all(alternative in gated for alternative in ALTERNATIVES)
    missing = str(HubRepoNotFound(REPO, "main", "missing"))
    assert missing.startswith(f"{REPO}: no such model repository") and "private" in missing and "HF_TOKEN" in missing
    assert "'v9'" in str(HubRepoNotFound(REPO, "v9", "revision"))


@pytest.mark.parametrize(
    "repo_id",
    ["a", "a/b/c", "a:b/c", "../x", "x/..", "a/..b", "", "/b", "a/", "a/b c", "a/b\n", "-a/b", "a/.b", "a/" + "b" * 97],
)
def test_a_bad_repository_id_is_refused_before_anything_is_asked(r: redis.Redis, repo_id: str) -> None:
    hub = StubHub()
    with pytest.raises(InvalidInput) as caught:
        resolve(repo_id, cache=r, keys=Keys(), hub_client=hub)
    assert caught.value.field == "repo_id"
    assert "org/name" in str(caught.value)
    assert not looks_like_repo_id(repo_id)
    assert hub.calls == [] and r.keys("*") == []


@pytest.mark.parametrize("revision", ["refs/pr/1", "", "main:x", "a b", ".hidden", "x" * 129])
def test_a_bad_revision_is_refused_before_anything_is_asked(r: redis.Redis, revision: str) -> None:
    hub = StubHub()
    with pytest.raises(InvalidInput) as caught:
        resolve(REPO, revision, cache=r, keys=Keys(), hub_client=hub)
    assert caught.value.field == "revision"
    assert hub.calls == [] and r.keys("*") == []


def test_good_ids_pass(r: redis.Redis) -> None:
    hub = StubHub()
    for repo_id in ("Qwen/Qwen2.5-7B-Instruct", "a/b", "org_1/name.v2-x", "a" * 96 + "/" + "b" * 96):
        assert looks_like_repo_id(repo_id)
        resolve(repo_id, COMMIT, cache=r, keys=Keys(), hub_client=hub)
    assert hub.listings() == 4


def test_a_repository_without_config_json_is_refused_and_not_cached(r: redis.Redis) -> None:
    gguf = example("llama-3-8b-gguf")  # as on the Hub: GGUF files, no config.json
    hub = StubHub(gguf["files"], gguf)
    with pytest.raises(InvalidInput) as caught:
        resolve("bartowski/Meta-Llama-3-8B-Instruct-GGUF", cache=r, keys=Keys(), hub_client=hub)
    assert caught.value.source == "bartowski/Meta-Llama-3-8B-Instruct-GGUF@main"
    assert caught.value.field == "config.json"
    assert "--files FILES.json --config CONFIG.json" in str(caught.value)
    assert [c[0] for c in hub.calls] == ["list_files"]
    assert r.keys("*") == []


def test_a_repository_the_planner_cannot_read_is_refused_and_not_cached(r: redis.Redis) -> None:
    files = [f for f in LLAMA["files"] if not f["path"].endswith(".safetensors")]
    with pytest.raises(InvalidInput, match="no weights"):
        resolve(REPO, cache=r, keys=Keys(), hub_client=StubHub(files))
    with pytest.raises(InvalidInput, match="num_hidden_layers"):
        # with a model_type, a missing field takes its config class's default; without one it is refused
        config = {k: v for k, v in LLAMA["config.json"].items() if k not in ("num_hidden_layers", "model_type")}
        resolve(REPO, cache=r, keys=Keys(), hub_client=StubHub(documents={**LLAMA, "config.json": config}))
    assert r.keys("*") == []


def test_a_damaged_entry_is_asked_for_again_and_replaced(r: redis.Redis) -> None:
    key = Keys().hub(REPO, "main")
    r.set(key, b'{"schema_version": 99}')
    hub = StubHub()
    assert resolve(REPO, cache=r, keys=Keys(), hub_client=hub) == expected()
    assert hub.listings() == 1
    assert json.loads(r.get(key) or b"")["schema_version"] == 1


def test_without_huggingface_hub_a_miss_names_the_alternatives(r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import huggingface_hub now fails
    with pytest.raises(HubClientMissing) as caught:
        resolve(REPO, cache=r, keys=Keys())
    message = str(caught.value)
    assert isinstance(caught.value, HubUnavailable)
    assert message.startswith(f"{REPO}@main: ")
    assert "pip install huggingface_hub" in message
    assert all(alternative in message for alternative in ALTERNATIVES)
    assert isinstance(caught.value.__cause__, ImportError)
    assert r.keys("*") == []


def test_without_huggingface_hub_a_cached_entry_still_resolves(r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    resolve(REPO, cache=r, keys=Keys(), hub_client=StubHub())
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    assert resolve(REPO, cache=r, keys=Keys()) == expected()


def test_an_unreachable_cache_is_redis_unavailable() -> None:
    cache = redis.Redis(port=free_port(), socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
    hub = StubHub()
    with pytest.raises(RedisUnavailable, match=r"redis://localhost:\d+/0"):
        resolve(REPO, cache=cache, keys=Keys(), hub_client=hub)
    assert hub.calls == []
    cache.close()


# --- the real client, against a local stand-in for the Hub (only where huggingface_hub is installed) ----


class FakeHubServer:
    """A local HTTP server answering the two requests ``HfHubClient`` makes, as the Hub does: the model's
    info with its files, and a file by its path. ``fail`` maps a path fragment to a status and the Hub's
    ``X-Error-Code`` for it."""

    def __init__(self, data: Mapping[str, Any] = LLAMA) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.data = data
        self.fail: dict[str, tuple[int, str | None]] = {}
        self.requests: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_HEAD(self) -> None:
                self.answer(body=False)

            def do_GET(self) -> None:
                self.answer(body=True)

            def answer(self, *, body: bool) -> None:
                server.requests.append(f"{self.command} {self.path}")
                for fragment, (status, code) in server.fail.items():
                    if fragment in self.path:
                        self.send(status, b"{}", {"X-Error-Code": code} if code else {}, body)
                        return
                prefix = f"/api/models/{REPO}/revision/"
                if self.path.startswith(prefix):
                    siblings = [{"rfilename": f["path"], "size": f["size"]} for f in server.data["files"]]
                    info = {"id": REPO, "sha": COMMIT, "siblings": siblings}
                    self.send(200, json.dumps(info).encode(), {}, body)
                    return
                filename = self.path.rpartition("/")[2]
                if self.path.startswith(f"/{REPO}/resolve/{COMMIT}/") and filename in server.data:
                    held = server.data[filename]
                    # a weights file whole (the client's range reads its head); any other as JSON
                    content = held if isinstance(held, bytes) else json.dumps(held).encode()
                    headers = {"X-Repo-Commit": COMMIT, "ETag": f'"{hash(content) & 0xFFFFFFFF:08x}"'}
                    self.send(200, content, headers, body)
                    return
                self.send(404, b"{}", {"X-Error-Code": "EntryNotFound"}, body)

            def send(self, status: int, content: bytes, headers: dict[str, str], body: bool) -> None:
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                if body:
                    self.wfile.write(content)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake_hub(monkeypatch: pytest.MonkeyPatch) -> Any:
    pytest.importorskip("huggingface_hub")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    server = FakeHubServer()
    yield server
    server.close()


def test_the_real_client_reads_a_repository_from_the_hub(r: redis.Redis, fake_hub: Any, tmp_path: Path) -> None:
    from producer.hub import HfHubClient

    client = HfHubClient(endpoint=fake_hub.url, cache_dir=str(tmp_path))
    assert resolve(REPO, cache=r, keys=Keys(), hub_client=client) == expected()
    assert resolve(REPO, cache=r, keys=Keys(), hub_client=client) == expected()
    asked = [line.partition("?")[0] for line in fake_hub.requests if not line.startswith("HEAD")]
    assert asked[:3] == [
        f"GET /api/models/{REPO}/revision/main",
        f"GET /{REPO}/resolve/{COMMIT}/config.json",
        f"GET /{REPO}/resolve/{COMMIT}/model.safetensors.index.json",
    ]
    # the shards' headers, which this stand-in does not hold: planned without them, as before. The reads
    # run a few at a time and the first that fails cancels those not yet started, so some of the four may
    # never be asked; none is asked twice (the second resolve comes from the cache)
    shards = [f"GET /{REPO}/resolve/{COMMIT}/model-0000{i}-of-00004.safetensors" for i in range(1, 5)]
    assert asked[3:] and set(asked[3:]) <= set(shards) and len(set(asked[3:])) == len(asked[3:]), asked


@pytest.mark.parametrize(
    ("fragment", "status", "code", "raised", "says"),
    [
        ("/api/models/", 404, "RepoNotFound", HubRepoNotFound, "no such model repository"),
        ("/api/models/", 401, "RepoNotFound", HubRepoNotFound, "no such model repository"),
        ("/api/models/", 404, "RevisionNotFound", HubRepoNotFound, "no revision 'main'"),
        ("/resolve/", 403, "GatedRepo", HubRepoNotFound, "gated"),
        ("/api/models/", 503, None, HubUnavailable, "the Hub answered 503"),
        ("/api/models/", 429, None, HubUnavailable, "the Hub answered 429"),
        ("config.json", 400, None, HubUnavailable, f"{REPO}@main: .*the Hub answered 400"),
        ("config.json", 401, None, HubUnavailable, "the Hub answered 401: .*; check HF_TOKEN"),
    ],
)
def test_the_real_clients_errors_become_ours(
    r: redis.Redis,
    fake_hub: Any,
    tmp_path: Path,
    fragment: str,
    status: int,
    code: str | None,
    raised: type[Exception],
    says: str,
) -> None:
    from producer.hub import HfHubClient

    fake_hub.fail[fragment] = (status, code)
    with pytest.raises(raised, match=says):
        resolve(REPO, cache=r, keys=Keys(), hub_client=HfHubClient(endpoint=fake_hub.url, cache_dir=str(tmp_path)))
    assert r.keys("*") == []


def test_the_real_client_unreachable_is_hub_unavailable(r: redis.Redis, fake_hub: Any, tmp_path: Path) -> None:
    from producer.hub import HfHubClient

    closed = HfHubClient(endpoint=f"http://127.0.0.1:{free_port()}", cache_dir=str(tmp_path), timeout=2)
    with pytest.raises(HubUnavailable, match=r"ConnectError|ConnectionError") as caught:
        resolve(REPO, cache=r, keys=Keys(), hub_client=closed)
    assert all(alternative in str(caught.value) for alternative in ALTERNATIVES)
    assert r.keys("*") == []


def test_the_real_client_offline_is_hub_unavailable(
    r: redis.Redis, fake_hub: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from producer.hub import HfHubClient

    constants = pytest.importorskip("huggingface_hub.constants")
    utils = pytest.importorskip("huggingface_hub.utils")

    # Before huggingface_hub 1.0 the flag is read when a thread's HTTP session is made, so sessions are
    # made again on the way in and out.
    reset = getattr(utils, "reset_sessions", lambda: None)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    reset()
    try:
        with pytest.raises(HubUnavailable, match="HF_HUB_OFFLINE is set"):
            client = HfHubClient(endpoint=fake_hub.url, cache_dir=str(tmp_path))
            resolve(REPO, cache=r, keys=Keys(), hub_client=client)
    finally:
        monkeypatch.undo()
        reset()
    assert fake_hub.requests == [] and r.keys("*") == []


def test_the_real_client_takes_a_listed_index_that_is_gone_as_none(
    r: redis.Redis, fake_hub: Any, tmp_path: Path
) -> None:
    from producer.hub import HfHubClient

    fake_hub.data = {k: v for k, v in LLAMA.items() if k != "model.safetensors.index.json"}
    repo = resolve(REPO, cache=r, keys=Keys(), hub_client=HfHubClient(endpoint=fake_hub.url, cache_dir=str(tmp_path)))
    assert repo == repository_from_listing(LLAMA["files"], LLAMA["config.json"])


def test_an_adapter_repository_is_refused_naming_its_base_model(r: redis.Redis) -> None:
    files = [{"path": "adapter_config.json", "size": 700}, {"path": "adapter_model.safetensors", "size": 9_000_000}]
    adapter = {"base_model_name_or_path": "meta-llama/Llama-3.2-3B", "peft_type": "LORA"}
    hub = StubHub(files, {"adapter_config.json": adapter})
    with pytest.raises(InvalidInput, match=r"an adapter, not a model: serve its base model 'meta-llama/Llama-3.2-3B'"):
        resolve("someone/llama-lora", cache=r, keys=Keys(), hub_client=hub)
    assert r.keys("*") == []


def test_a_modelopt_quant_config_is_read_and_cached(r: redis.Redis) -> None:
    quant = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8"}}
    files = [*LLAMA["files"], {"path": "hf_quant_config.json", "size": 200}]
    hub = StubHub(files, {**LLAMA, "hf_quant_config.json": quant})
    repo = resolve(REPO, cache=r, keys=Keys(), hub_client=hub)
    assert repo.artifacts[-1].quant == "fp8"
    cached = resolve(REPO, cache=r, keys=Keys(), hub_client=StubHub(fail_listing=OSError("down")))
    assert cached == repo
