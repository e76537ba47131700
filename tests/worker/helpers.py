"""Builders and whole-state readers for worker tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from producer import Client
from producer.examples import example_request
from worker import runner
from worker.records import JobState, ServeRequest
from worker.scripts import text

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "models"


def hb(
    node_id: str,
    gpu_class: str = "h100-80g",
    gpus: int = 1,
    free: int | None = None,
    *,
    seq: int = 1,
    boot: str = "boot-1",
    host: int = 256,
    host_free: int | None = None,
    fabric: str = "",
    started: tuple[str, ...] = (),
) -> dict[str, Any]:
    return {
        "node_id": node_id,
        "gpu_class": gpu_class,
        "fabric": fabric,
        "gpus": gpus if gpu_class else 0,
        "free_gpus": (gpus if free is None else free) if gpu_class else 0,
        "host_mem_gb": host,
        "host_free_gb": host if host_free is None else host_free,
        "seq": seq,
        "boot_id": boot,
        "started": list(started),
    }


def request(model: str = "llama-3.1-8b-instruct", context: int = 8192, **kw: Any) -> ServeRequest:
    return example_request(model, context=context, **kw)


def drain(client: Client) -> None:
    """Run every queued RQ job in this process, as ``modelplan worker --burst`` does."""
    runner.drain(client.store)


def queued_functions(client: Client) -> list[str]:
    """The function of each RQ job waiting on the planning queue, in order."""
    return [str(job.func_name) for job in client.store.queue.get_jobs()]


def signalled(client: Client) -> bool:
    """Whether a wake-up pass is signalled: a token on ``wake:signal`` that no waker has taken yet."""
    return bool(client.redis.llen(client.keys.wake_signal))


def empty_queue(client: Client) -> None:
    """Drop the queued RQ jobs, to drive planning by hand."""
    client.store.queue.empty()  # type: ignore[no-untyped-call]


def event_reasons(client: Client, job_id: str) -> list[str]:
    """The reasons on a job's own stream, oldest first."""
    entries: Any = client.redis.xrange(client.keys.job_events(job_id))
    return [text(fields[b"reason"]) for _, fields in entries]


def whole_state(client: Client) -> dict[str, Any]:
    """Everything a scenario leaves: each job's state (from its record and from the indexes), and what is
    held on each node."""
    r, k = client.redis, client.keys
    index = {s.value: sorted(text(j) for j in r.zrange(k.jobs(s), 0, -1)) for s in JobState}
    records = {}
    for key in r.scan_iter(match=f"{k.prefix}:job:*"):
        name = text(key)
        if name.count(":") > 2:  # a job's events: an id holds no colon
            continue
        rec = client.get(name.split(":", 2)[2])
        records[rec.job_id] = rec.state.value
    held: dict[str, dict[str, int]] = {}
    nominated: dict[str, dict[str, int]] = {}
    for key in r.scan_iter(match=f"{k.prefix}:held:*"):
        name = text(key)
        if name == k.held_nodes:
            continue
        node = name.split(":", 2)[2]
        for hold, value in r.hgetall(key).items():
            v = json.loads(value)
            into = nominated if v["nominated"] else held
            job = text(hold).split(":", 1)[0]
            into.setdefault(node, {})[job] = into.get(node, {}).get(job, 0) + v["gpus"]
    extra = {"nominated": nominated} if nominated else {}
    return {
        **extra,
        "index": {s: ids for s, ids in index.items() if ids},
        "records": records,
        "held": held,
        "held_nodes": sorted(text(n) for n in r.smembers(k.held_nodes)),
    }
