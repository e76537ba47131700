"""A real llama-server on this machine's CPU against the plan's estimate (``bench/llamacpp.py``).

The test marked ``engine`` starts the binary ``MODELPLAN_LLAMA_SERVER`` names on a small random-weight GGUF
(``bench/tinygguf.py``) with the command line the plan's CPU option names, and holds the ``measured``
estimate to be no less than the peak resident memory of the server's process tree. Without the variable it
is skipped. The others need no engine: the GGUF is what the planner (and so llama.cpp) reads it as, and
the measuring script refuses bad input in one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import llamacpp, tinygguf
from planner import repository_from_folder

ROOT = Path(__file__).resolve().parents[1]
SERVER = os.environ.get("MODELPLAN_LLAMA_SERVER", "")
SMALL = tinygguf.TinyShape(layers=4, width=512, heads=8, kv_heads=2, ffn=1408, vocab=32000, context=32768)


def has_prompt_cache(server: str) -> bool:
    """Whether the server has a prompt cache in RAM (``--cache-ram``; releases before it refuse the option)."""
    r = subprocess.run([server, "--help"], capture_output=True, text=True, timeout=60, check=False)
    return "--cache-ram" in r.stdout + r.stderr


@pytest.fixture(scope="module")
def small_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    tinygguf.write(path, SMALL)
    return path


def test_the_planner_reads_the_shape_it_was_written_with(small_gguf: Path) -> None:
    repo = repository_from_folder(small_gguf.parent)
    (artifact,) = repo.artifacts
    assert artifact.name == "tiny.gguf" and artifact.bytes == small_gguf.stat().st_size
    params = SMALL.vocab * SMALL.width * 2 + SMALL.layers * (
        2 * SMALL.width * SMALL.width  # q and output
        + 2 * SMALL.kv_heads * (SMALL.width // SMALL.heads) * SMALL.width  # k and v
        + 3 * SMALL.ffn * SMALL.width
        + 2 * SMALL.width  # norms
    )
    assert repo.shape.params == params + SMALL.width
    assert repo.shape.max_context == SMALL.context
    # keys and values for one token: layers × (k + v) × kv heads × head size × 2 bytes (f16)
    assert repo.shape.kv_bytes_per_token == SMALL.layers * 2 * SMALL.kv_heads * (SMALL.width // SMALL.heads) * 2


def test_the_command_is_the_cpu_option_s(small_gguf: Path) -> None:
    option, command = llamacpp.cpu_option(small_gguf, 4096, "measured")
    assert option.cpu and option.engine == "llamacpp" and option.artifact == "tiny.gguf"
    assert command[:3] == ["llama-server", "-m", str(small_gguf.resolve())]
    assert command[command.index("-c") + 1] == "4096" and command[-2:] == ["-ngl", "0"]


def test_q8_0_is_about_half_of_f16(tmp_path: Path) -> None:
    f16 = tinygguf.write(tmp_path / "a.gguf", tinygguf.TinyShape(layers=2, width=256, heads=4, kv_heads=2, ffn=512))
    q8 = tinygguf.write(
        tmp_path / "b.gguf", tinygguf.TinyShape(layers=2, width=256, heads=4, kv_heads=2, ffn=512, type="q8_0")
    )
    assert 0.5 < q8 / f16 < 0.56  # 8.5 bits a weight against 16


@pytest.mark.parametrize(
    ("shape", "words"),
    [
        (tinygguf.TinyShape(width=1000, heads=16), "not whole"),
        (tinygguf.TinyShape(vocab=100), "--vocab 100"),
        (tinygguf.TinyShape(type="q4_0"), "--type 'q4_0'"),
    ],
)
def test_a_shape_llama_cpp_cannot_load_is_refused(tmp_path: Path, shape: tinygguf.TinyShape, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        tinygguf.write(tmp_path / "x.gguf", shape)
    assert not (tmp_path / "x.gguf").exists()


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--server", "/nonexistent/llama-server", "--model", "{gguf}"], "--server /nonexistent/llama-server"),
        (["--server", "/bin/sh", "--model", "/nonexistent.gguf"], "--model /nonexistent.gguf: no such file"),
        (["--server", "/bin/sh", "--model", "{gguf}", "--context", "0"], "--context 0: must be at least 1"),
    ],
)
def test_bad_input_is_one_line(small_gguf: Path, args: list[str], line: str) -> None:
    argv = [a.replace("{gguf}", str(small_gguf)) for a in args]
    r = subprocess.run([str(ROOT / "scripts" / "measure-llamacpp"), *argv], capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and line in r.stderr


def test_the_tree_s_memory_is_read_from_proc() -> None:
    code = "import sys, time; b = bytearray(64 << 20); print(flush=True); time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"\n"  # its 64 MiB are written
        assert child.pid in llamacpp.tree(os.getpid())
        own = llamacpp.proc_status(child.pid)
        assert own["VmRSS"] > 64 << 20 and own["RssAnon"] > 64 << 20 and own["VmHWM"] >= own["VmRSS"]
        assert llamacpp.tree_memory(os.getpid())["VmRSS"] > own["VmRSS"]
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    assert llamacpp.proc_status(child.pid) == {}  # gone: nothing to read


@pytest.mark.engine
@pytest.mark.timeout(600)
@pytest.mark.skipif(not SERVER, reason="MODELPLAN_LLAMA_SERVER names no llama-server binary")
@pytest.mark.parametrize("context", [4096, 16384])
def test_the_estimate_is_not_under_a_real_llama_server(small_gguf: Path, context: int) -> None:
    run = llamacpp.measure(SERVER, small_gguf, context, timeout=300.0)
    print(json.dumps(run))
    assert run["completion_tokens"] and run["rss_steady_bytes"] > 0
    # the weights are resident (mapped from the file and read to answer): the measurement saw the model
    assert run["rss_peak_bytes"] > small_gguf.stat().st_size
    assert run["measured_need_bytes"] >= run["rss_peak_bytes"], run


@pytest.mark.engine
@pytest.mark.timeout(600)
@pytest.mark.skipif(not SERVER, reason="MODELPLAN_LLAMA_SERVER names no llama-server binary")
def test_distinct_prompts_leave_the_server_within_the_estimate(small_gguf: Path) -> None:
    """llama-server keeps each idle slot's prompt state in a RAM cache (``--cache-ram``, 8,192 MiB by
    default) that no figure counts: the plan starts it with ``--cache-ram 0``, and 16 different prompts
    leave it where one did."""
    if not has_prompt_cache(SERVER):
        pytest.skip("this llama-server has no --cache-ram (plan it with cache_ram_mib -1)")
    run = llamacpp.measure(SERVER, small_gguf, 4096, 300.0, None, 3000, 16)
    assert "--cache-ram" in run["command"], run
    grown = run["rss_after_each_completion_bytes"]
    assert grown[-1] - grown[0] < 8 << 20, run  # 15 more prompts: the cached prompts would be ~90 MiB
    assert run["measured_need_bytes"] >= run["rss_peak_bytes"], run
