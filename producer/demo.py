"""``modelplan demo``: the whole flow on a small mixed cluster, step by step.

With no Redis URL it runs on an embedded Redis (fakeredis, in this process); with ``--redis-url`` or
``MODELPLAN_REDIS_URL`` it runs on that Redis under its own prefix, which it clears when it starts and
removes again when it ends (its events stream and job records have no expiry of their own). A worker plans
in this process.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from typing import Any

import redis

from planner import Option, quant_of
from planner.constants import CPU_QUALITY_CAP, QUALITY_CAP
from producer.client import Client
from producer.examples import example_request
from producer.render import pool_picture, status_text
from worker.config import REDIS_URL_ENV, connect
from worker.errors import RedisUnavailable
from worker.records import JobState
from worker.runner import drain

DEMO_PREFIX = "modelplan-demo"
"""The demo's keys on a real Redis: apart from a live cluster's, cleared when the demo starts and removed
when it ends."""


def _heartbeat(node_id: str, gpu_class: str, gpus: int, free: int, host: int, seq: int, **kw: Any) -> dict[str, Any]:
    return {
        "node_id": node_id,
        "gpu_class": gpu_class,
        "gpus": gpus,
        "free_gpus": free,
        "host_mem_gb": host,
        "host_free_gb": host,
        "seq": seq,
        "boot_id": "demo",
        **kw,
    }


def _clear(client: Client) -> None:
    """Remove every key under the demo's prefix, and its RQ queue (named after the prefix, outside it)."""
    for key in client.redis.scan_iter(match=f"{DEMO_PREFIX}:*"):
        client.redis.delete(key)
    client.redis.delete(client.keys.rq_queue_namespace + client.keys.queue_name)


def _client(url: str | None) -> tuple[Client, str]:
    given = "--redis-url" if url else REDIS_URL_ENV
    url = url or os.environ.get(REDIS_URL_ENV)
    if not url:
        import fakeredis

        return Client(fakeredis.FakeRedis(), DEMO_PREFIX), "an embedded Redis (fakeredis, in this process)"
    client = Client(connect(url), DEMO_PREFIX, url=url)
    try:
        _clear(client)
    except (redis.ConnectionError, redis.TimeoutError) as e:
        # the demo is meant to need nothing: say where the URL came from, and how to run without it
        hint = f"unset {REDIS_URL_ENV}" if given == REDIS_URL_ENV else "leave out --redis-url"
        raise RedisUnavailable(
            f"{client._url} (from {given})", e, stored=False, hint=f"{hint} to run on an embedded Redis"
        ) from e
    return client, f"Redis at {client._url}, prefix {DEMO_PREFIX}"


def running(client: Client, job_id: str) -> Option | None:
    """What a job's first replica runs on now, if anything."""
    rec = client.get(job_id)
    return rec.replicas[0].option if rec.replicas else None


def artifact_changed(name: str, was: Option, now: Option) -> str:
    """What a person is told when a job's replica moved to another artifact: which file it ran and runs,
    that another quantisation is another model to its users, why the planner chose each, and how to
    keep one."""

    def where(o: Option) -> str:
        return f"{o.artifact} ({o.bits_per_weight:.1f} bits a weight) on {o.label}"

    if was.cpu and not now.cpu:
        why = (
            f"the planner ranks a file by where it runs: on a card the more precise the better, up to {QUALITY_CAP} "
            f"bits a weight (and slowly less past it), on a CPU up to {CPU_QUALITY_CAP} (each bit is read for "
            f"every token); so {now.artifact} on a card was the job's best option all along, and {was.artifact} "
            "the best the CPU could run while that card was busy"
        )
    else:
        why = f"{now.artifact} on {now.label} ranks first, and {was.artifact} was the best free while it was busy"
    pin = quant_of(was.artifact) or was.artifact
    return (
        f"{name} changed artifact: it ran {where(was)}, and runs {where(now)} now;\n"
        f"a different quantisation is a different model to its users. Why: {why}.\n"
        f"To keep one file, pin it: modelplan submit --artifact {pin}."
    )


def run(url: str | None = None, say: Callable[[str], None] = print) -> dict[str, str]:
    """Run the demo; returns each job's final state by name. On a Redis of the caller's, the demo's keys
    are removed at the end, whether it finished or not."""
    client, where = _client(url)
    if not client._url:
        return _steps(client, where, say)
    try:
        return _steps(client, where, say)
    finally:
        client._call(partial(_clear, client))  # a Redis gone meanwhile: one line, as for any command
        say(f"\nThe demo removed its keys ({DEMO_PREFIX}:*) from Redis at {client._url}.")


def _steps(client: Client, where: str, say: Callable[[str], None]) -> dict[str, str]:
    def work() -> None:
        drain(client.store)

    def show(title: str) -> None:
        jobs = [rec for s in JobState for rec in client.jobs(s)]
        say(f"\n== {title}\n{status_text(client.pool(), client.counts(), jobs)}")

    say(f"modelplan demo on {where}")
    client.heartbeat(_heartbeat("gpu-a", "h100-80g", 1, 1, 256, 1))
    client.heartbeat(_heartbeat("gpu-b", "h100-80g", 1, 0, 256, 1))  # its card is in use outside modelplan
    client.heartbeat(_heartbeat("cpu-a", "", 0, 0, 128, 1))
    say("\n== 1. Three nodes report: gpu-a's card is free, gpu-b's is in use by something else, cpu-a has RAM")
    say(pool_picture(client.pool()))

    jobs = {
        "llama-8b": client.submit(example_request("llama-3.1-8b-instruct", name="Llama-3.1-8B-Instruct", context=8192)),
        "qwen-7b": client.submit(example_request("qwen2.5-7b-instruct", name="Qwen2.5-7B-Instruct", context=8192)),
        "llama-8b-gguf": client.submit(
            example_request("llama-3-8b-gguf", name="Llama-3-8B-GGUF", context=8192, fallback=True)
        ),
    }
    work()
    show(
        "2. Three serve requests are planned: Llama on gpu-a's free card; Qwen waits for a card (not the "
        "CPU); the GGUF asked for a fallback, so it runs on the CPU while it waits"
    )
    on_fallback = running(client, jobs["llama-8b-gguf"])
    client.heartbeat(_heartbeat("gpu-b", "h100-80g", 1, 1, 256, 2))
    work()
    show("3. gpu-b's card frees: its heartbeat wakes the waiting jobs, and Qwen (first in line) is placed there")
    client.release(jobs["llama-8b"])
    work()
    show("4. Llama is released: the GGUF moves from the CPU onto gpu-a's card in one step")
    now = running(client, jobs["llama-8b-gguf"])
    if on_fallback is not None and now is not None and now.artifact != on_fallback.artifact:
        say("\n" + artifact_changed(client.get(jobs["llama-8b-gguf"]).request.model, on_fallback, now))
    return {name: client.get(job_id).state.value for name, job_id in jobs.items()}
