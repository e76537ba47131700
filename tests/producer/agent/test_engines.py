"""The engine command a node runs, whole: the model as the engine loads it, every parallel and context
flag, and each node's part of a replica over several nodes."""

from __future__ import annotations

import shlex
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from planner.model import Artifact, Option
from producer.agent.engines import (
    MASTER_PORT_BASE,
    MASTER_PORT_SPAN,
    NodePart,
    engine_command,
    master_port,
    model_source,
    node_command,
    node_part,
    replica_commands,
    shown,
)
from tests.worker.helpers import request
from worker.records import JobRecord, JobState, Replica, Reservation, ServeRequest, parse_request

Q4 = "Meta-Llama-3-8B-Instruct-Q4_K_M.gguf"
GGUF_CPU = Option(artifact=Q4, format="gguf", engine="llamacpp", cpu=True)
GGUF_2 = Option(artifact=Q4, format="gguf", engine="llamacpp", gpu_class="l40s-48g", gpus_per_node=2, nodes=1)
TP = Option(artifact="original", format="safetensors", engine="vllm", gpu_class="h100-80g", gpus_per_node=4, nodes=1)
PP = replace(TP, gpus_per_node=8, nodes=2, fabric="ib")
VLLM_SET = ("--max-num-batched-tokens", "8192", "--max-num-seqs", "256", "--gpu-memory-utilization", "0.9",
            "--kv-cache-dtype", "fp8")  # fmt: skip
LLAMA_SET = ("-c", "16384", "-np", "2", "-fa", "on", "-b", "2048", "-ub", "512", "-ctk", "f16", "-ctv", "f16")


def gguf(**kw: object) -> ServeRequest:
    return request("llama-3-8b-gguf", context=8192, **kw)


def with_path(req: ServeRequest, path: str | None) -> ServeRequest:
    return parse_request({**req.model_dump(mode="json"), "model_path": path})


def test_vllm_tensor_parallel_on_one_node() -> None:
    req = with_path(request("llama-3.1-70b-instruct", context=32768), "/models/llama-3.1-70b-instruct")
    assert engine_command(req, replace(TP, settings=VLLM_SET)) == [
        "vllm", "serve", "/models/llama-3.1-70b-instruct", "--served-model-name", "llama-3.1-70b-instruct",
        "--tensor-parallel-size", "4", "--pipeline-parallel-size", "1", "--max-model-len", "32768", *VLLM_SET,
    ]  # fmt: skip


def test_vllm_pipeline_parallel_across_nodes_each_part() -> None:
    req = with_path(request("llama-3.1-70b-instruct", context=32768), "meta-llama/Llama-3.1-70B-Instruct")
    common = [
        "vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct", "--served-model-name", "llama-3.1-70b-instruct",
        "--tensor-parallel-size", "8", "--pipeline-parallel-size", "2", "--max-model-len", "32768", *VLLM_SET,
        "--distributed-executor-backend", "mp", "--nnodes", "2",
    ]  # fmt: skip
    head = engine_command(req, replace(PP, settings=VLLM_SET), part=NodePart(0, 2, "gpu-a", 29777))
    assert head == [*common, "--node-rank", "0", "--master-addr", "gpu-a", "--master-port", "29777"]
    other = engine_command(req, replace(PP, settings=VLLM_SET), part=NodePart(1, 2, "gpu-a", 29777))
    assert other == [*common, "--node-rank", "1", "--master-addr", "gpu-a", "--master-port", "29777", "--headless"]
    # shown away from the nodes (plan): the head's part, its address a placeholder
    assert engine_command(req, replace(PP, settings=VLLM_SET))[-6:] == [
        "--node-rank", "0", "--master-addr", "HEAD_NODE", "--master-port", str(MASTER_PORT_BASE)
    ]  # fmt: skip


def test_llamacpp_on_the_cpu() -> None:
    req = with_path(gguf(), "/srv/models/llama-3-8b-gguf")
    assert engine_command(req, replace(GGUF_CPU, settings=LLAMA_SET)) == [
        "llama-server", "-m", f"/srv/models/llama-3-8b-gguf/{Q4}", "--alias", "llama-3-8b-gguf", *LLAMA_SET,
        "-ngl", "0",
    ]  # fmt: skip


def test_llamacpp_split_over_a_nodes_cards() -> None:
    req = with_path(gguf(), "/srv/models/llama-3-8b-gguf")
    assert engine_command(req, replace(GGUF_2, settings=LLAMA_SET)) == [
        "llama-server", "-m", f"/srv/models/llama-3-8b-gguf/{Q4}", "--alias", "llama-3-8b-gguf", *LLAMA_SET,
        "-ngl", "999", "--split-mode", "layer", "--tensor-split", "1,1",
    ]  # fmt: skip
    one = engine_command(req, replace(GGUF_2, gpus_per_node=1))
    assert one[-4:] == ["-ngl", "999", "--split-mode", "layer"]


def test_where_the_model_is_loaded_from() -> None:
    plain = gguf()  # a folder's name: found under the agent's --models-dir
    assert model_source(plain) == "MODELS_DIR/llama-3-8b-gguf"
    assert model_source(plain, "/data/models") == "/data/models/llama-3-8b-gguf"
    assert engine_command(plain, GGUF_CPU)[1:3] == ["-m", f"MODELS_DIR/llama-3-8b-gguf/{Q4}"]
    on_node = engine_command(plain, GGUF_CPU, models_dir="/data/models")
    assert on_node[1:3] == ["-m", f"/data/models/llama-3-8b-gguf/{Q4}"]
    # a Hub id as the model's name: the engines download it
    hub = request("llama-3-8b-gguf", context=8192).model_copy(update={"model": "QuantFactory/Llama-3-8B-GGUF"})
    assert engine_command(hub, GGUF_CPU)[1:5] == ["--hf-repo", "QuantFactory/Llama-3-8B-GGUF", "--hf-file", Q4]
    assert engine_command(hub, TP, models_dir="/data/models")[2] == "QuantFactory/Llama-3-8B-GGUF"
    # a path the request names wins over both; one .gguf file is taken as it is
    assert engine_command(with_path(gguf(), "/m/x.gguf"), GGUF_CPU)[1:3] == ["-m", "/m/x.gguf"]
    # a split GGUF: its first part
    split = with_path(gguf(), "/m").model_copy(
        update={"artifacts": (Artifact("big-Q8_0", "gguf", 3 << 30, shards=3, quant="Q8_0"),)}
    )
    assert engine_command(split, replace(GGUF_CPU, artifact="big-Q8_0"))[2] == "/m/big-Q8_0-00001-of-00003.gguf"


@pytest.mark.parametrize("bad", ["./models/x", "x", "../x/y", "/a\nb", "a/b/c", "~/m"])
def test_a_model_path_is_a_hub_id_or_an_absolute_path(bad: str) -> None:
    with pytest.raises(Exception, match="model_path"):
        with_path(gguf(), bad)


def test_shown_whole_and_copyable() -> None:
    req = with_path(gguf(), "/srv/my models/llama")
    line = shown(engine_command(req, GGUF_CPU))
    assert shlex.split(line) == engine_command(req, GGUF_CPU)
    assert "'/srv/my models/llama/" in line


def _job(placement: tuple[Reservation, ...], option: Option) -> JobRecord:
    req = with_path(request("llama-3.1-70b-instruct", context=32768), "/models/llama-70b")
    rep = Replica(index=0, state="placed", option=option, placement=placement)
    at = datetime(2026, 1, 1, tzinfo=UTC)
    return JobRecord(
        job_id="j1", state=JobState.PLACED, version=3, updated_at=at, request=req, wanted=1, seq=1, created_at=at,
        option=option, replicas=(rep,),
    )  # fmt: skip


def test_each_node_computes_its_own_part_from_the_hold() -> None:
    holds = tuple(Reservation(node_id=n, hold_id="j1:0:3", gpus=8, host_gb=0) for n in ("gpu-b", "gpu-a"))
    job = _job(holds, PP)
    port = master_port("j1:0:3")
    assert MASTER_PORT_BASE <= port < MASTER_PORT_BASE + MASTER_PORT_SPAN
    # the placement's order is the pipeline's: its first node is the head
    assert node_part(job.replicas[0], "gpu-b") == NodePart(0, 2, "gpu-b", port)
    assert node_part(job.replicas[0], "gpu-a") == NodePart(1, 2, "gpu-b", port)
    assert node_part(job.replicas[0], "gpu-z") is None
    head, other = node_command(job, holds[0]), node_command(job, holds[1])
    assert head[head.index("--node-rank") + 1] == "0" and "--headless" not in head
    assert other[other.index("--node-rank") + 1] == "1" and other[-1] == "--headless"
    assert other[other.index("--master-addr") + 1] == "gpu-b"
    assert other[other.index("--master-port") + 1] == str(port)
    assert [n for n, _ in replica_commands(job, job.replicas[0])] == ["gpu-b", "gpu-a"]
    assert replica_commands(job, job.replicas[0])[1][1] == other
    # one node: no part at all
    single = _job((Reservation(node_id="gpu-a", hold_id="j1:0:3", gpus=4, host_gb=0),), TP)
    assert "--nnodes" not in node_command(single, single.replicas[0].placement[0])
