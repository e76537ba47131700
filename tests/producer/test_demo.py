"""``modelplan demo``: on the embedded Redis, and on a real one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import redis

from producer import demo
from worker.scripts import text

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = {"llama-8b": "released", "qwen-7b": "placed", "llama-8b-gguf": "placed"}


def test_the_demo_on_the_embedded_redis() -> None:
    said: list[str] = []
    assert demo.run(None, said.append) == EXPECTED
    text = "\n".join(said)
    assert said[0] == "modelplan demo on an embedded Redis (fakeredis, in this process)"
    # step 2: one placed, one waiting on a busy card, one on a fallback
    step2 = text.split("== 2.")[1].split("== 3.")[0]
    assert "gpu-b  1 × h100-80g  ▒" in step2 and "gpu-a  1 × h100-80g  █" in step2
    assert "waiting  Qwen2.5-7B-Instruct" in step2 and "waits for 1 × h100-80g [resources]" in step2
    assert "on CPU at cpu-a (fallback)" in step2
    step4 = text.split("== 4.")[1]
    assert "runs Meta-Llama-3-8B-Instruct-BF16.gguf on 1 × h100-80g at gpu-a" in step4
    # the file changed with the move, and the demo says so and why: another quantisation is another model
    assert (
        "Llama-3-8B-GGUF changed artifact: it ran Meta-Llama-3-8B-Instruct-Q4_K_M.gguf (4.9 bits a weight) on CPU, "
        "and runs Meta-Llama-3-8B-Instruct-BF16.gguf (16.0 bits a weight) on 1 × h100-80g now;\n" in step4
    )
    assert "a different quantisation is a different model to its users" in step4
    assert "up to 8.6 bits a weight" in step4 and "up to 5.8" in step4
    assert "modelplan submit --artifact Q4_K_M" in step4


def test_the_demo_on_a_real_redis_keeps_to_its_prefix(redis_url: str, r: redis.Redis) -> None:
    r.set("someone-else:key", "kept")
    assert demo.run(redis_url, lambda _: None) == EXPECTED
    assert demo.run(redis_url, lambda _: None) == EXPECTED  # again: it starts from a clean slate
    names = {text(k) for k in r.keys("*")}
    assert "someone-else:key" in names
    assert all(n.startswith((f"{demo.DEMO_PREFIX}:", "rq:", "someone-else:")) for n in names)


def test_the_demo_leaves_none_of_its_keys_behind(redis_url: str, r: redis.Redis) -> None:
    """Its events stream and job records have no expiry: the demo removes what it wrote once it is done,
    and says so; what another prefix holds stays."""
    r.set("modelplan:job:x", "kept")
    said: list[str] = []
    assert demo.run(redis_url, said.append) == EXPECTED
    left = sorted(text(k) for k in r.keys("*") if text(k).startswith(f"{demo.DEMO_PREFIX}:"))
    assert left == [], left
    assert not r.exists(f"rq:queue:{demo.DEMO_PREFIX}") and r.get("modelplan:job:x") == b"kept"
    assert said[-1].lstrip().startswith(f"The demo removed its keys ({demo.DEMO_PREFIX}:*) from Redis at "), said[-1]


def test_the_command_runs_with_nothing_but_the_package() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "producer.cli", "demo"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    assert "== 4. Llama is released" in out.stdout and out.stderr == ""
