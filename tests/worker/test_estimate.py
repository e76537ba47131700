"""A request's estimate, and the deployment's default for requests that name none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from planner import InvalidInput, Settings, VllmSettings
from producer import Client
from tests.worker.helpers import drain, hb, request
from worker import config
from worker.config import ESTIMATE_ENV
from worker.records import JobState, parse_request


def placed_estimate(client: Client, **kw: Any) -> str:
    job = client.submit(request(context=16_384, **kw))
    drain(client)
    rec = client.get(job)
    assert rec.state is JobState.PLACED and rec.option is not None
    return f"{rec.option.estimate} {rec.option.label}"


def test_a_request_names_its_estimate_and_the_rest_take_the_deployments(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    client.heartbeat(hb("l4-1", "l4-24g", gpus=2))
    monkeypatch.delenv(ESTIMATE_ENV, raising=False)
    assert placed_estimate(client, estimate="seed") == "seed 2 × l4-24g"
    client.heartbeat(hb("l4-2", "l4-24g", gpus=2))
    assert placed_estimate(client) == "measured 1 × l4-24g"
    client.heartbeat(hb("l4-3", "l4-24g", gpus=2))
    monkeypatch.setenv(ESTIMATE_ENV, "seed")
    assert placed_estimate(client) == "seed 2 × l4-24g"


def test_an_unknown_estimate_is_refused_where_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    data = request().model_dump(mode="json") | {"estimate": "guess"}
    with pytest.raises(InvalidInput, match="estimate"):
        parse_request(data)
    monkeypatch.setenv(ESTIMATE_ENV, "guess")
    with pytest.raises(InvalidInput, match="MODELPLAN_ESTIMATE: \\(setting\\): must be one of measured, seed"):
        config.estimate()
    assert config.estimate("seed") == "seed"


def test_a_requests_settings_reach_the_placed_option_and_the_deployment_fills_the_rest(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    client.heartbeat(hb("h-1", "h100-80g", gpus=1))
    monkeypatch.setenv(config.SETTINGS_ENV, '{"vllm": {"kv_cache_dtype": "fp8", "max_num_seqs": 128}}')
    job = client.submit(request(context=16_384, settings=Settings(vllm=VllmSettings(max_num_seqs=512))))
    drain(client)
    rec = client.get(job)
    assert rec.state is JobState.PLACED and rec.option is not None
    assert rec.request.settings is not None and rec.request.settings.vllm.max_num_seqs == 512
    assert rec.option.settings == (
        "--max-num-batched-tokens", "8192", "--max-num-seqs", "512", "--gpu-memory-utilization", "0.9",
        "--kv-cache-dtype", "fp8",
    )  # fmt: skip


def test_bad_settings_are_refused_naming_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    data = request().model_dump(mode="json") | {"settings": {"llamacpp": {"ubatch": 0}}}
    with pytest.raises(InvalidInput, match=r"request: settings\.llamacpp\.ubatch: "):
        parse_request(data)
    monkeypatch.setenv(config.SETTINGS_ENV, '{"vllm": {"kv_cache_dtype": "int2"}}')
    with pytest.raises(InvalidInput, match=r"MODELPLAN_SETTINGS: settings\.vllm\.kv_cache_dtype: "):
        config.settings()


def test_settings_on_the_submit_command_line_reach_the_request_and_the_job_text(
    redis_url: str, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    from producer.cli import main
    from producer.render import job_text

    client.heartbeat(hb("h-1", "h100-80g", gpus=1))
    models = Path(__file__).parents[2] / "examples" / "models" / "llama-3-8b-gguf"
    args = ["submit", "--redis-url", redis_url, "--files", str(models / "files.json")]
    args += ["--config", str(models / "config.json"), "--job-id", "slots", "--artifact"]
    args += ["Meta-Llama-3-8B-Instruct-Q4_K_M.gguf", "--parallel", "2", "--flash-attn", "off"]
    assert main(args) == 0 and capsys.readouterr().out == "slots\n"
    drain(client)
    rec = client.get("slots")
    assert rec.request.settings is not None and rec.request.settings.llamacpp.parallel == 2
    assert rec.option is not None and rec.option.settings[:6] == ("-c", "8192", "-np", "2", "-fa", "off")
    # the whole command line, the settings in it, shown as a shell takes it
    whole = "llama-server -m MODELS_DIR/llama-3-8b-gguf/Meta-Llama-3-8B-Instruct-Q4_K_M.gguf --alias llama-3-8b-gguf "
    whole += " ".join(rec.option.settings) + " -ngl 999 --split-mode layer"
    assert job_text(rec).splitlines()[-2:] == [
        "  engine:  " + whole,
        "  (MODELS_DIR: the node agent's --models-dir (the request names no --model-path and its model is no Hub id))",
    ]
    assert main(["status", "--redis-url", redis_url]) == 0
    assert "slots: " + whole in capsys.readouterr().out.splitlines()
