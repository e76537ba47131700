"""Bad input, fuzzed: serve requests, heartbeats, file listings, configs and node pools.

Each input is accepted or refused with ``InvalidInput`` (one line, naming the field): never another exception.
A refused request or heartbeat changes nothing stored (a DUMP of every key before and after). Requests and
heartbeats that were accepted are then planned by a worker in this process: every job ends placed, waiting or
failed, RQ's failed-job registry stays empty, and no key lies outside ``modelplan:`` and ``rq:``.

``MODELPLAN_FUZZ_EXAMPLES`` sets hypothesis's examples per fuzz (default 200); runs are derandomized. The
counts go to standard output and, as a JSON line ``{"suite": "bad_input", ...}``, to the file named by
``MODELPLAN_RELIABILITY_OUT`` when set.
"""

from __future__ import annotations

import copy
import json
import math
import os
from collections import Counter
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from rq.registry import FailedJobRegistry

from planner import InvalidInput, parse_pool, plan, pool_nodes, repository_from_listing
from planner.repository import Repository, parse_listing, shape_from_config
from producer import Client, request_from_repository
from tests.reliability.sec_servers import dump, foreign_keys
from tests.worker.helpers import hb
from worker import constants as C
from worker import runner
from worker.records import JobState, parse_request
from worker.reports import parse_heartbeat

EXAMPLES = int(os.environ.get("MODELPLAN_FUZZ_EXAMPLES", "200"))
OUT_ENV = "MODELPLAN_RELIABILITY_OUT"
FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
MODELS = Path(__file__).resolve().parents[2] / "examples" / "models"
KINDS = ("requests", "heartbeats", "listings", "configs", "pools")

COUNTS: Counter[str] = Counter()
"""What the fuzz tried, accepted, refused; written out once the module's tests are done."""


@pytest.fixture(scope="module", autouse=True)
def summary() -> Iterator[None]:
    COUNTS.clear()
    yield
    counts = {k: COUNTS[k] for k in (*KINDS, "accepted", "refused", "crashed")}
    counts |= {f"{k}_accepted": COUNTS[f"{k}_accepted"] for k in KINDS}
    line = (
        f"bad_input: {counts['requests']} requests, {counts['heartbeats']} heartbeats, {counts['listings']} "
        f"listings, {counts['configs']} configs, {counts['pools']} pools tried; {counts['accepted']} accepted, "
        f"{counts['refused']} refused, {counts['crashed']} crashed"
    )
    print(f"\n{line}")
    out = os.environ.get(OUT_ENV)
    if out:
        with open(out, "a", encoding="utf-8") as f:
            f.write(json.dumps({"suite": "bad_input", "examples": EXAMPLES, **counts}) + "\n")


# --- what to fuzz with ----------------------------------------------------------------------------------------

EDGE_NUMBERS: list[Any] = [
    0,
    1,
    -1,
    255,
    256,
    257,
    1000,
    1001,
    1024,
    1025,
    2**20,
    2**24,
    2**31,
    2**32,
    2**50,
    2**50 + 1,
    2**53,
    2**53 + 1,
    2**63 - 1,
    2**63,
    2**64,
    -(2**63) - 1,
    10**400,
    0.5,
    1.0,
    -0.0,
    1e308,
    -1e308,
    5e-324,
    math.nan,
    math.inf,
    -math.inf,
    True,
    False,
]
NASTY_TEXT: list[str] = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "\n",
    "a\nb",
    "a\r\n",
    "\t",
    "\x7f",
    "\u2028",
    "\u202eabc",
    "abc\u200f",
    "🙂",
    "👩‍👩‍👧",
    "\ud800",
    "a\udfff",
    "é",
    "Ａ",
    "*",
    "a*",
    "a:b",
    "job:x",
    "{a}",
    "..",
    "../x",
    "/etc/passwd",
    "a b",
    "NaN",
    "Infinity",
    "null",
    "-1",
    "1e308",
    "h100-80g",
    "original",
    "x" * 129,
    "x" * 2000,
]
numbers = st.one_of(
    st.sampled_from(EDGE_NUMBERS),
    st.integers(min_value=-(2**65), max_value=2**65),
    st.floats(allow_nan=True, allow_infinity=True),
)
texts = st.one_of(st.sampled_from(NASTY_TEXT), st.text(max_size=40))
keys = st.one_of(st.sampled_from(NASTY_TEXT), st.text(max_size=12))
json_values = st.recursive(
    st.none() | st.booleans() | numbers | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=12,
)


def _paths(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place inside a JSON value: dict keys and list indexes, the value itself as ``()``."""
    out = [at]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*at, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*at, i))
    return out


def _near(value: Any) -> st.SearchStrategy[Any]:
    """A replacement for ``value``: of its own kind, near its bounds or far past them, or anything."""
    if isinstance(value, bool):
        return st.one_of(st.booleans(), json_values)
    if isinstance(value, int):
        return st.one_of(numbers, st.integers(min_value=-2, max_value=2**51), numbers)
    if isinstance(value, str):
        return st.one_of(texts, st.text(max_size=200), texts)
    return json_values


@st.composite
def mutated(draw: st.DrawFn, base: Any) -> Any:
    """``base`` (a valid record) with up to three changes: a value replaced, a field dropped or one added. No
    change at all is drawn too, so that valid records are tried beside broken ones."""
    data = copy.deepcopy(base)
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 1, 2, 3]))):
        path = draw(st.sampled_from(_paths(data)))
        if not path:
            return draw(json_values)
        *up, last = path
        parent = data
        for p in up:
            parent = parent[p]
        action = draw(st.sampled_from(["replace", "replace", "replace", "drop", "add"]))
        if action == "replace":
            parent[last] = draw(_near(parent[last]))
        elif action == "drop":
            del parent[last]
        elif isinstance(parent[last], dict):
            parent[last][draw(keys)] = draw(json_values)
        elif isinstance(parent, dict):
            parent[draw(keys)] = draw(json_values)
    return data


def _example(model: str) -> tuple[Any, Any, Any]:
    d = MODELS / model
    index = d / "model.safetensors.index.json"
    return (
        json.loads((d / "files.json").read_text()),
        json.loads((d / "config.json").read_text()),
        json.loads(index.read_text()) if index.exists() else None,
    )


EXAMPLE_REPOS = {m: _example(m) for m in ("llama-3.1-8b-instruct", "llama-3-8b-gguf", "qwen2.5-7b-instruct")}


def _request_base(model: str, **kw: Any) -> dict[str, Any]:
    files, config, index = EXAMPLE_REPOS[model]
    repo = repository_from_listing(files, config, index)
    data: dict[str, Any] = json.loads(request_from_repository(repo, model=model, **kw).model_dump_json())
    return data


REQUEST_BASES = [
    _request_base("llama-3.1-8b-instruct", context=8192),
    _request_base("llama-3-8b-gguf", context=4096, priority=500, replicas=2, fallback=True),
    _request_base("qwen2.5-7b-instruct", context=32768, artifact="original", priority=1000),
]
NODE_IDS = ["fz-gpu-1", "fz-gpu-2", "fz-cpu-1", "fz-l40s"]
HEARTBEAT_BASES = [
    hb("fz-gpu-1", "h100-80g", gpus=8, free=6, fabric="ib-east"),
    hb("fz-gpu-2", "a100-40g", gpus=4, fabric="ib-east", host=512, host_free=100),
    hb("fz-cpu-1", "", host=1024, host_free=900),
    {**hb("fz-l40s", "l40s", gpus=2, free=1), "gpu_mem_gb": 48},
]
POOL_BASE: list[dict[str, Any]] = json.loads((MODELS.parent / "pool.json").read_text())
CONFIG_BASES = [EXAMPLE_REPOS[m][1] for m in EXAMPLE_REPOS] + [
    {"text_config": {"num_hidden_layers": 4, "num_attention_heads": 8, "hidden_size": 512}},
    {"num_hidden_layers": 61, "num_attention_heads": 128, "kv_lora_rank": 512, "qk_rope_head_dim": 64},
]
LISTING_NAMES = [
    "model.safetensors",
    "model-00001-of-00002.safetensors",
    "model-00002-of-00002.safetensors",
    "consolidated.safetensors",
    "original/consolidated.00.pth",
    "x.Q4_K_M.gguf",
    "x-Q8_0-00001-of-00002.gguf",
    "x-Q8_0-00002-of-00002.gguf",
    "mmproj-x-f16.gguf",
    "sub/dir/y.IQ2_XS.gguf",
    "config.json",
    "README.md",
]
listing_entries = st.fixed_dictionaries(
    {"path": st.one_of(st.sampled_from(LISTING_NAMES), texts, texts.map(lambda t: t + ".gguf")), "size": numbers},
    optional={"type": st.sampled_from(["file", "directory", "", "blob"]) | texts, "oid": json_values},
)
listings = st.one_of(
    st.lists(listing_entries, max_size=8),
    st.sampled_from([r[0] for r in EXAMPLE_REPOS.values()]).flatmap(mutated),
    json_values,
)
finite_index = st.one_of(
    st.none(),
    st.builds(
        lambda total: {"metadata": {"total_size": total}},
        st.one_of(
            st.integers(min_value=-(2**64), max_value=2**64),
            st.floats(allow_nan=False, allow_infinity=False),
            texts,
        ),
    ),
    json_values,
)
"""Index data; ``total_size`` is never NaN or infinite, the crash pinned by test_index_total_size_nan_inf."""


# --- the check every input goes through -----------------------------------------------------------------------


def attempt(kind: str, call: Callable[[], object]) -> bool:
    """Run ``call`` on one fuzzed input of ``kind``: True when accepted, False when refused as it must be
    (``InvalidInput``, one line, a field named). Anything else raised is a crash: counted, then raised, and
    hypothesis shows the input."""
    COUNTS[kind] += 1
    try:
        call()
    except InvalidInput as e:
        COUNTS["refused"] += 1
        text = str(e)
        assert e.field, text
        assert f"{e.field}: " in text and "Traceback" not in text
        assert not any(ch in text for ch in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"), text
        assert len(text) < 1000, text
        return False
    except BaseException:
        COUNTS["crashed"] += 1
        raise
    COUNTS["accepted"] += 1
    COUNTS[f"{kind}_accepted"] += 1
    return True


def _quietly(call: Callable[[], object]) -> bool:
    """Whether ``call`` accepts (True) or refuses with ``InvalidInput`` (False); not counted."""
    try:
        call()
    except InvalidInput:
        return False
    return True


def _as_text(data: Any, ascii_only: bool) -> str | None:
    try:
        return json.dumps(data, ensure_ascii=ascii_only)
    except (TypeError, ValueError):
        return None


# --- requests and heartbeats, against Redis, then planned ----------------------------------------------------


def test_fuzzed_requests_and_heartbeats_are_refused_cleanly_or_planned(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Heartbeats, then serve requests, then heartbeats again (restarts among them), each given as parsed
    data to ``Client`` and as JSON text to the parsers (which must agree); a worker plans everything
    accepted."""
    # the fuzz outlives a node's 15 s TTL on a slow machine; a node lapsing mid-run would change the state
    # a refused input is compared against
    monkeypatch.setattr(C, "NODE_TTL_MS", 3_600_000)
    client = Client.from_url(redis_url)
    state = [dump(client.redis)]
    submitted: list[str] = []
    serial = iter(range(10**9))

    def checked(
        kind: str, call: Callable[[], object], parse: Callable[[Any], object], data: Any, ascii_only: bool
    ) -> None:
        accepted = attempt(kind, call)
        after = dump(client.redis)
        if not accepted:
            assert after == state[0], "a refused input changed what is stored"
        state[0] = after
        text = _as_text(data, ascii_only)
        if text is not None:
            assert attempt(kind, lambda: parse(text)) == _quietly(lambda: parse(data)), (
                "data and its JSON text disagree"
            )

    @FUZZ
    @given(
        data=st.sampled_from(HEARTBEAT_BASES).flatmap(mutated),
        node_id=st.sampled_from(NODE_IDS) | texts | st.none(),
        seq=st.integers(min_value=0, max_value=50) | st.none(),
        boot=st.sampled_from(["boot-1", "boot-2"]) | st.none(),
        ascii_only=st.booleans(),
    )
    def heartbeats(data: Any, node_id: str | None, seq: int | None, boot: str | None, ascii_only: bool) -> None:
        if isinstance(data, dict):
            for field, value in (("node_id", node_id), ("seq", seq), ("boot_id", boot)):
                if value is not None:
                    data[field] = value
        checked("heartbeats", lambda: client.heartbeat(data), parse_heartbeat, data, ascii_only)

    @FUZZ
    @given(
        data=st.sampled_from(REQUEST_BASES).flatmap(mutated),
        job_id=st.one_of(st.just("serial"), st.just("serial"), st.just("none"), texts),
        ascii_only=st.booleans(),
    )
    def requests(data: Any, job_id: str, ascii_only: bool) -> None:
        jid: str | None = {"serial": f"fz-{next(serial)}", "none": None}.get(job_id, job_id)
        if jid in submitted:  # a drawn id already taken: JobExists is right, but not what is fuzzed here
            jid = f"fz-{next(serial)}"

        def submit() -> None:
            submitted.append(client.submit(data, job_id=jid))

        checked("requests", submit, parse_request, data, ascii_only)

    heartbeats()
    requests()
    runner.drain(client.store)
    heartbeats()
    runner.drain(client.store)

    records = client.records(submitted)
    assert len(set(submitted)) == len(submitted) and all(r is not None for r in records)
    states = Counter(r.state for r in records if r is not None)
    assert set(states) <= {JobState.PLACED, JobState.WAITING, JobState.FAILED}, states
    assert FailedJobRegistry(queue=client.store.queue).get_job_ids() == []
    assert client.store.queue.count == 0
    assert foreign_keys(client.redis) == []
    print(
        f"\nbad_input: planned {len(submitted)} accepted requests: " + ", ".join(f"{n} {s}" for s, n in states.items())
    )


# --- listings, configs and pools: pure ------------------------------------------------------------------------


@FUZZ
@given(files=listings, config=st.sampled_from(CONFIG_BASES).flatmap(mutated) | json_values, index=finite_index)
def test_fuzzed_listings_and_configs_are_refused_cleanly(files: Any, config: Any, index: Any) -> None:
    """``parse_listing``, ``shape_from_config`` and ``repository_from_listing`` on fuzzed data; a repository
    accepted becomes a serve request, which is accepted or refused cleanly too."""
    attempt("listings", lambda: parse_listing(files))
    attempt("configs", lambda: shape_from_config(config))
    repo: list[Repository] = []
    if attempt("listings", lambda: repo.append(repository_from_listing(files, config, index))):
        attempt("requests", lambda: request_from_repository(repo[0], model="fuzzed", context=2048))


@FUZZ
@given(
    nodes=st.one_of(
        st.lists(st.sampled_from(POOL_BASE).flatmap(mutated), max_size=6),
        st.lists(st.sampled_from(POOL_BASE), max_size=5, unique_by=lambda n: str(n["node_id"])).flatmap(
            lambda pool: st.tuples(*(mutated(n) if i == 0 else st.just(n) for i, n in enumerate(pool))).map(list)
        ),
        json_values,
    ),
    as_text=st.one_of(st.none(), texts),
)
def test_fuzzed_pools_are_refused_cleanly_or_planned_on(nodes: Any, as_text: str | None) -> None:
    """``parse_pool`` on the JSON text of fuzzed node lists (and on stray text); an accepted pool is planned
    on without error."""
    text = as_text if as_text is not None else _as_text(nodes, ascii_only=True)
    assume(text is not None)
    assert text is not None
    reports: list[Any] = []
    if attempt("pools", lambda: reports.extend(parse_pool(text))):
        files, config, index = EXAMPLE_REPOS["llama-3-8b-gguf"]
        assert isinstance(plan(repository_from_listing(files, config, index), pool_nodes(reports), 4096), list)


# --- the extremes the issue names, whatever hypothesis draws ---------------------------------------------------

EXTREMES: list[Any] = [2**63, 2**64, -(2**63) - 1, 10**400, 1e308, -1e308, math.nan, math.inf, -math.inf]
UNICODE: list[str] = ["\u202eabc", "🙂", "\x00", "a\x00b", "\ud800", "a\udfff", "a*b", "a:b", "a b", "a\nb", "*:* \n"]


def _each_field(base: dict[str, Any], values: list[Any]) -> Iterator[dict[str, Any]]:
    """``base`` with each top-level field (and each field of its first nested record) set to each value."""
    for field in base:
        for v in values:
            yield {**base, field: v}
    for field, inner in base.items():
        record = inner[0] if isinstance(inner, list) and inner and isinstance(inner[0], dict) else inner
        if isinstance(record, dict):
            for key in record:
                for v in values:
                    changed = {**record, key: v}
                    yield {**base, field: [changed, *inner[1:]] if isinstance(inner, list) else changed}


def test_the_extremes_are_refused_cleanly(redis_url: str) -> None:
    """Oversized numbers, NaN and infinities, RTL, emoji, NUL, lone surrogates and ids full of ``*``, ``:``,
    spaces and newlines, in every field of a request, a heartbeat, a listing entry, a config and a node. A
    refused request or heartbeat changes nothing; one accepted is planned (beside a valid heartbeat or
    request) to placed, waiting or failed; an accepted pool is planned on."""
    client = Client.from_url(redis_url)

    def planned(extra: Callable[[], object]) -> None:
        extra()
        runner.drain(client.store)
        jobs = [r for s in JobState for r in client.jobs(s)]
        assert jobs and {r.state for r in jobs} <= {JobState.PLACED, JobState.WAITING, JobState.FAILED}
        assert FailedJobRegistry(queue=client.store.queue).get_job_ids() == []
        client.redis.flushdb()

    def tried(kind: str, call: Callable[[], object], then: Callable[[], object]) -> None:
        before = dump(client.redis)
        if attempt(kind, call):
            planned(then)
        else:
            assert dump(client.redis) == before

    values = EXTREMES + UNICODE
    for data in _each_field(REQUEST_BASES[1], values):
        tried(
            "requests", partial(client.submit, data, job_id="fz-extreme"), partial(client.heartbeat, HEARTBEAT_BASES[0])
        )
    for data in _each_field(HEARTBEAT_BASES[0], values):
        tried("heartbeats", partial(client.heartbeat, data), partial(client.submit, REQUEST_BASES[0]))
    for bad in UNICODE:
        tried("requests", partial(client.submit, REQUEST_BASES[0], job_id=bad), lambda: None)
    files, config, _ = EXAMPLE_REPOS["llama-3-8b-gguf"]
    for entry in _each_field({"path": "x.Q4_K_M.gguf", "size": 5, "type": "file"}, values):
        attempt("listings", partial(repository_from_listing, [entry], config))
    for cfg in _each_field(config, values):
        attempt("configs", partial(shape_from_config, cfg))
    for node in _each_field(POOL_BASE[0], values):
        text = _as_text([node], ascii_only=False)
        if text is not None and attempt("pools", partial(parse_pool, text)):
            assert isinstance(plan(repository_from_listing(files, config), pool_nodes(parse_pool(text)), 4096), list)


# --- bugs found here, pinned: each passes while the bug is there and fails once it is fixed -------------------


def _refused(call: Callable[[], object]) -> InvalidInput:
    with pytest.raises(InvalidInput) as e:
        call()
    return e.value


def _deep(depth: int = 100_000) -> list[Any]:
    root: list[Any] = []
    node = root
    for _ in range(depth):
        child: list[Any] = []
        node.append(child)
        node = child
    return root


def test_request_bytes_not_utf8() -> None:
    _refused(lambda: parse_request(b"\xff\xfe{}"))
    _refused(lambda: parse_heartbeat(b"\x80"))


def test_request_deeply_nested() -> None:
    _refused(lambda: parse_request({"model": _deep()}))


def test_pool_deeply_nested_text() -> None:
    _refused(lambda: parse_pool("[" * 100_000))


def test_pool_huge_integer_text() -> None:
    e = _refused(lambda: parse_pool('[{"node_id": "a", "host_mem_gb": ' + "9" * 5000 + ', "host_free_gb": 1}]'))
    assert type(e) is InvalidInput


def test_listing_entry_deeply_nested() -> None:
    _refused(lambda: parse_listing([_deep()]))


@pytest.mark.parametrize("total", [math.inf, math.nan, 1e300], ids=["inf", "nan", "huge"])
def test_index_total_size_nan_inf(total: float) -> None:
    """An index whose total_size is no number of bytes tells no parameter count: the config's shapes do."""
    files, config, _ = EXAMPLE_REPOS["llama-3.1-8b-instruct"]
    unread = repository_from_listing(files, config, {"metadata": {"total_size": total}}).shape.params
    assert unread == repository_from_listing(files, config).shape.params == 8_030_261_248


def test_an_unknown_field_with_a_newline_is_named_on_one_line() -> None:
    e = _refused(lambda: parse_request({**REQUEST_BASES[0], "bad\nfield": 1}))
    assert "\n" not in str(e)


def test_a_pinned_artifact_not_found_lists_names_on_one_line() -> None:
    base = REQUEST_BASES[0]
    artifacts = [{**base["artifacts"][0], "name": f"line\nbreak-{i}" + "x" * 1000} for i in range(50)]
    e = _refused(lambda: parse_request({**base, "artifacts": artifacts, "artifact": "missing"}))
    assert "\n" not in str(e) and len(str(e)) < 1000
