"""``modelplan plan``: the dry run, on a listing and on a folder, as a table and as JSON."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from producer.cli import main, parser
from producer.named import load_repository

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
POOL = str(EXAMPLES / "pool.json")


def listing(model: str) -> list[str]:
    d = EXAMPLES / "models" / model
    return ["--files", str(d / "files.json"), "--config", str(d / "config.json")]


def test_table_on_a_listing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--pool", POOL, *listing("llama-3-8b-gguf"), "--context", "8192"]) == 0
    table, both, started = capsys.readouterr().out.split("\n\n")
    lines = table.splitlines()
    assert lines[0].split() == ["#", "artifact", "bits", "engine", "where", "need", "/", "have", "GiB", "hosts", "now"]
    first = lines[1].split()
    assert first[:6] == ["1", "Meta-Llama-3-8B-Instruct-BF16.gguf", "16.0", "llamacpp", "1", "×"]
    assert first[6] == "h100-80g" and first[-1] == "free"
    assert lines[-1].split()[4:6] == ["CPU", "RAM"]
    assert len(lines) == 1 + 8
    # then the best option by each estimate, the one the table counted with first
    assert [line.split()[:2] for line in both.splitlines()[1:]] == [
        ["*", "measured"],
        ["seed", "Meta-Llama-3-8B-Instruct-BF16.gguf"],
    ]
    # then each option's whole command line, with the settings it was sized for: llama-server's defaults,
    # the same on every card
    commands = started.splitlines()[1:]
    sized = "-c 8192 -fa on -b 2048 -ub 512 -ctk f16 -ctv f16 --cache-ram 0"
    assert commands[0] == (
        "#1 llama-server -m MODELS_DIR/llama-3-8b-gguf/Meta-Llama-3-8B-Instruct-BF16.gguf --alias llama-3-8b-gguf "
        f"{sized} -ngl 999 --split-mode layer"
    )
    assert commands[7] == (
        "#8 llama-server -m MODELS_DIR/llama-3-8b-gguf/Meta-Llama-3-8B-Instruct-BF16.gguf --alias llama-3-8b-gguf "
        f"{sized} -ngl 0"
    )
    assert all(f" {sized} -ngl " in c for c in commands[:8])
    assert commands[8:] == [
        "MODELS_DIR: the node agent's --models-dir (the request names no --model-path and its model is no Hub id)"
    ]


def test_the_commands_name_the_model_where_the_nodes_have_it(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", "--pool", POOL, *listing("llama-3.1-70b-instruct"), "--context", "8k"]
    assert main([*args, "--model-path", "/srv/models/Llama 3.1 70B", "--model", "llama-70b"]) == 0
    commands = capsys.readouterr().out.split("\n\n")[-1].splitlines()[1:]
    one, two = (shlex.split(c.partition(" ")[2]) for c in commands[:2])
    assert one[:12] == [
        "vllm", "serve", "/srv/models/Llama 3.1 70B", "--served-model-name", "llama-70b",
        "--tensor-parallel-size", "4", "--pipeline-parallel-size", "1", "--max-model-len", "8192",
        "--max-num-batched-tokens",
    ]  # fmt: skip
    # over two nodes: the head's part, the head named by a placeholder said below
    assert two[two.index("--pipeline-parallel-size") + 1] == "2"
    assert two[-10:] == [
        "--distributed-executor-backend", "mp", "--nnodes", "2", "--node-rank", "0", "--master-addr", "HEAD_NODE",
        "--master-port", "29501",
    ]  # fmt: skip
    assert commands[2:] == [
        "HEAD_NODE: the replica's first node; each other node runs the same line with its own --node-rank and "
        "--headless"
    ]
    # a Hub id names itself
    assert main([*args, "--model-path", "meta-llama/Llama-3.1-70B-Instruct"]) == 0
    assert "#1 vllm serve meta-llama/Llama-3.1-70B-Instruct --served-model-name llama-3.1-70b-instruct " in (
        capsys.readouterr().out
    )


def test_json_on_a_listing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--pool", POOL, *listing("llama-3.1-70b-instruct"), "--context", "8192", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [(o["gpu_class"], o["gpus_per_node"], o["nodes"], o.get("fabric"), o["free_now"]) for o in got] == [
        ("h100-80g", 4, 1, None, True),
        ("a100-40g", 4, 2, "ib-west", False),  # a100-b's cards are all in use
    ]
    assert set(got[0]) == {
        "artifact",
        "format",
        "engine",
        "gpu_class",
        "gpus_per_node",
        "nodes",
        "need_gb",
        "have_gb",
        "hosts",
        "free_now",
        "bits_per_weight",
        "estimate",
        "settings",
    }
    # vLLM's API-server defaults: the larger on an H100, the smaller on an A100 (vllm/engine/arg_utils.py)
    assert [o["settings"][:4] for o in got] == [
        ["--max-num-batched-tokens", "8192", "--max-num-seqs", "1024"],
        ["--max-num-batched-tokens", "2048", "--max-num-seqs", "256"],
    ]
    assert got[0]["bits_per_weight"] == pytest.approx(16.0)
    assert got[0]["estimate"] == "measured"


def test_json_is_an_empty_list_when_nothing_fits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pool = tmp_path / "pool.json"
    pool.write_text(
        json.dumps(
            [
                {
                    "node_id": "small",
                    "gpu_class": "rtx4090-24g",
                    "gpus": 1,
                    "free_gpus": 1,
                    "host_mem_gb": 16,
                    "host_free_gb": 16,
                }
            ]
        )
    )
    assert main(["plan", "--pool", str(pool), *listing("llama-3.1-70b-instruct"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["plan", "--pool", str(pool), *listing("llama-3.1-70b-instruct")]) == 0
    assert capsys.readouterr().out.startswith("no option")


def test_on_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_text((EXAMPLES / "models" / "llama-3-8b-gguf" / "config.json").read_text())
    with (tmp_path / "tiny-Q4_K_M.gguf").open("wb") as f:
        f.truncate(3 << 30)  # sparse: 3 GiB on paper, nothing on disk
    assert main(["plan", "--pool", POOL, "--repo", str(tmp_path), "--json", "--estimate", "seed"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert {o["artifact"] for o in got} == {"tiny-Q4_K_M.gguf"}
    assert got[0]["need_gb"] == pytest.approx(3 + 0.5 + 1 + 3 / 20)  # 4096 tokens of 128 KiB: 0.5 GiB
    assert main(["plan", "--pool", POOL, "--repo", str(tmp_path), "--json"]) == 0
    [best, *_] = json.loads(capsys.readouterr().out)
    # measured: the CUDA context, the logits of 512 tokens over 128,256 entries, 1 KiB a token of context
    # and 10 bytes a unit of the 4,096 width, and pools
    engine_mib = 518 + 512 * (4 * 128_256 + 2 * 4096 + 10 * 4096) / (1 << 20) + 80
    assert (best["estimate"], best["need_gb"]) == ("measured", pytest.approx(3 + 0.5 + engine_mib / 1024))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--context", "0"], "context: must be a whole number of tokens"),
        (["--context", "9000"], "context: 9000 is more than the model's max_position_embeddings 8192"),
        (["--pool", "/nonexistent.json"], "/nonexistent.json: --pool: cannot be read"),
    ],
)
def test_bad_input_exits_non_zero_with_the_message(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["plan", "--pool", POOL, *listing("llama-3-8b-gguf"), *args]
    if "--pool" in args:
        argv = ["plan", *args, *listing("llama-3-8b-gguf")]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ({"gpu_class": "h100-80g", "gpus": 1, "free_gpus": 2}, "free_gpus 2 is more than gpus 1"),
        ({"gpus": -1}, "gpus: must be at least 0 (given -1)"),
        ({"gpu_class": "mystery", "gpus": 1}, "gpu_mem_gb is needed"),
        ({"gpu_class": "h100-80g", "gpus": 1, "gpu_mem_gb": 40}, "gpu_mem_gb 40 disagrees with the class label"),
        ({"node_id": "a b"}, "node_id: only letters, digits"),
        ({"colour": "red"}, "colour: unknown field"),
        ({"host_free_gb": 999}, "host_free_gb 999 is more than host_mem_gb 64"),
    ],
)
def test_a_bad_pool_names_the_node_and_field(
    tmp_path: Path, node: dict[str, object], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    good = {"node_id": "n1", "host_mem_gb": 64, "host_free_gb": 64}
    pool = tmp_path / "pool.json"
    pool.write_text(json.dumps([good, {**good, "node_id": "n2", **node}]))
    assert main(["plan", "--pool", str(pool), *listing("llama-3-8b-gguf")]) == 2
    err = capsys.readouterr().err
    assert f"{pool}[1] (--pool): " in err and message in err


def test_the_console_script_runs(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "producer.cli", "plan", "--pool", POOL, *listing("qwen2.5-7b-instruct"), "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)[0]["gpu_class"] == "h100-80g"
    bad = subprocess.run(
        [sys.executable, "-m", "producer.cli", "plan", "--pool", POOL, "--files", "x.json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert bad.returncode == 2 and "give both --files and --config, or --repo DIR" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_a_modelopt_quant_config_names_the_originals_quant(tmp_path: Path) -> None:
    quant = tmp_path / "hf_quant_config.json"
    quant.write_text(json.dumps({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8"}}))
    args = ["plan", "--pool", POOL, *listing("llama-3.1-70b-instruct"), "--quant-config", str(quant)]
    repo = load_repository(parser().parse_args(args))
    assert repo.artifacts[-1].quant == "fp8"
    # the index's total is no 16-bit count then: the parameters come from the config's shapes
    assert repo.shape.params == 70_553_706_496


def write_hybrid(tmp_path: Path) -> list[str]:
    """A listing, a config read as a Llama's (every layer caching keys and values) and the headers of a
    hybrid whose layers 3 and 7 alone hold attention."""
    from tests.planner.test_weighing import hybrid, hybrid_config

    (tmp_path / "files.json").write_text(json.dumps([{"path": "model.safetensors", "size": 600_000}]))
    (tmp_path / "config.json").write_text(json.dumps(hybrid_config()))
    (tmp_path / "headers.json").write_text(json.dumps({"model.safetensors": hybrid()}))
    return ["--files", str(tmp_path / "files.json"), "--config", str(tmp_path / "config.json")]


def test_headers_on_a_listing_correct_the_kv_layers_and_say_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["plan", "--pool", POOL, *write_hybrid(tmp_path), "--context", "2048"]
    repo = load_repository(parser().parse_args([*args, "--headers", str(tmp_path / "headers.json")]))
    assert repo.shape.kv_bytes_per_token == 256  # 2 layers of 64 values, 2 bytes each: not the config's 8
    assert load_repository(parser().parse_args(args)).shape.kv_bytes_per_token == 1024
    assert main([*args, "--headers", str(tmp_path / "headers.json")]) == 0
    out = capsys.readouterr().out
    assert "note: KV cache from the weights' headers: 256 bytes a token (2 of 8 layers" in out


def test_headers_past_their_bound_or_beside_a_repo_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["plan", "--pool", POOL, *write_hybrid(tmp_path), "--headers", str(tmp_path / "headers.json")]
    monkeypatch.setenv("MODELPLAN_LIMIT_HEADERS_BYTES", "100")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--headers: is " in err and "MODELPLAN_LIMIT_HEADERS_BYTES" in err and err.count("\n") == 1
    monkeypatch.delenv("MODELPLAN_LIMIT_HEADERS_BYTES")
    repo = ["--repo", str(EXAMPLES / "models" / "tiny-llama-safetensors")]
    assert main(["plan", "--pool", POOL, *repo, "--headers", str(tmp_path / "headers.json")]) == 2
    assert "give either --repo or --files with --config" in capsys.readouterr().err


def test_an_fp8_listing_at_half_size_plans_at_eight_bits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = EXAMPLES / "models" / "llama-3.1-8b-instruct"
    files = json.loads((d / "files.json").read_text())
    half = [{**f, "size": f["size"] // 2} if f["path"].endswith(".safetensors") else f for f in files]
    (tmp_path / "files.json").write_text(json.dumps(half))
    index = json.loads((d / "model.safetensors.index.json").read_text())
    index["metadata"]["total_size"] //= 2
    (tmp_path / "index.json").write_text(json.dumps(index))
    args = ["--files", str(tmp_path / "files.json"), "--config", str(d / "config.json")]
    assert main(["plan", "--pool", POOL, *args, "--index", str(tmp_path / "index.json"), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got and all(o["bits_per_weight"] == pytest.approx(8.0, abs=0.05) for o in got)


def test_a_serve_request_carries_the_shape_the_headers_correct() -> None:
    from producer.client import request_from_listing
    from tests.planner.test_weighing import hybrid, hybrid_config

    files = [{"path": "model.safetensors", "size": 600_000}]
    request = request_from_listing(
        files, hybrid_config(), model="hybrid", context=2048, headers={"model.safetensors": hybrid()}
    )
    assert request.shape.kv_bytes_per_token == 256
    assert request_from_listing(files, hybrid_config(), model="hybrid", context=2048).shape.kv_bytes_per_token == 1024


def test_settings_on_the_command_line_size_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["plan", "--pool", POOL, *listing("llama-3.1-8b-instruct"), "--context", "32768", "--json"]
    assert main(base) == 0
    plain = json.loads(capsys.readouterr().out)[0]
    assert main([*base, "--kv-cache-dtype", "fp8", "--max-num-seqs", "64", "--enforce-eager"]) == 0
    small = json.loads(capsys.readouterr().out)[0]
    assert (plain["gpu_class"], small["gpu_class"]) == ("h100-80g", "h100-80g")
    assert small["settings"][2:4] == ["--max-num-seqs", "64"] and small["settings"][-1] == "--enforce-eager"
    assert small["need_gb"] < plain["need_gb"] - 2.0  # half the KV cache's 4 GiB, and no CUDA graphs


def test_bad_settings_on_the_command_line_name_the_field(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", "--pool", POOL, *listing("llama-3-8b-gguf"), "--batch", "256", "--ubatch", "1024"]
    assert main(args) == 2
    assert "arguments: settings.llamacpp.ubatch: 1024 is more than batch 256" in capsys.readouterr().err


def test_the_vllm_release_on_the_command_line_sizes_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    """``--vllm-version 0.11``: that release sorts 1,024 sequences' logits in its profile on an H100, more
    than the default release holds; a version that is not a release is refused naming the field."""
    base = ["plan", "--pool", POOL, *listing("llama-3.1-8b-instruct"), "--context", "8192", "--json"]
    assert main(base) == 0
    plain = json.loads(capsys.readouterr().out)[0]
    assert main([*base, "--vllm-version", "0.11"]) == 0
    older = json.loads(capsys.readouterr().out)[0]
    assert older["gpu_class"] == plain["gpu_class"] == "h100-80g"
    assert older["need_gb"] > plain["need_gb"] + 2.0
    assert main([*base, "--vllm-version", "latest"]) == 2
    assert "arguments: settings.vllm.vllm_version" in capsys.readouterr().err


def test_flashinfers_sampler_on_the_command_line_drops_the_sort(capsys: pytest.CaptureFixture[str]) -> None:
    """``--flashinfer-sampler``: 0.11 samples with FlashInfer and sorts nothing, so it needs what 0.19 does."""
    base = ["plan", "--pool", POOL, *listing("llama-3.1-8b-instruct"), "--context", "8192", "--json"]
    assert main(base) == 0
    plain = json.loads(capsys.readouterr().out)[0]
    assert main([*base, "--vllm-version", "0.11", "--flashinfer-sampler"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["need_gb"] == plain["need_gb"]


def test_cards_without_peer_access_on_the_command_line_hold_less_outside_pytorch(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--no-gpu-p2p``: Llama-3.1-70B on cards whose driver reports no peer access, so NCCL goes through the
    host and each card of a tensor-parallel group holds what one card does outside PyTorch: on four A100s,
    1.75 GiB less a card; on H100s, two cards then hold it where four did."""
    base = ["plan", "--pool", POOL, *listing("llama-3.1-70b-instruct"), "--context", "8192", "--json"]
    assert main(base) == 0
    h100, a100 = json.loads(capsys.readouterr().out)
    assert main([*base, "--no-gpu-p2p"]) == 0
    h100_lacking, a100_lacking = json.loads(capsys.readouterr().out)
    assert (a100["gpu_class"], a100["gpus_per_node"]) == (a100_lacking["gpu_class"], 4) == ("a100-40g", 4)
    assert a100["need_gb"] - a100_lacking["need_gb"] == pytest.approx(1.75, abs=0.01)
    assert (h100["gpus_per_node"], h100_lacking["gpus_per_node"]) == (4, 2)


def test_the_cpu_row_says_the_ram_of_the_node_without_cards_it_goes_to(capsys: pytest.CaptureFixture[str]) -> None:
    """examples/pool.json has cpu-a (128 GiB, no cards) beside GPU nodes of up to 2,048 GiB: a replica on
    the CPU goes to cpu-a, and its row says cpu-a's 85%."""
    assert main(["plan", "--pool", POOL, *listing("llama-3-8b-gguf"), "--context", "8192"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if " CPU RAM " in line]
    assert len(rows) == 2  # the Q4_K_M and the BF16 file
    for row in rows:
        need, slash, have = row[6:9]
        assert slash == "/" and have == f"{128 * 0.85:.1f}" and float(need) < float(have)
