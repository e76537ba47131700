"""``modelplan worker`` in a process that can show its mirror of the pool, for the reliability suite.

    python -m tests.reliability.mirror_view DIR NAME worker --redis-url URL

runs the worker, and answers each ``DIR/NAME.ask`` (a token) with ``DIR/NAME.view.json``: the pool as the
worker's next plan would see it. That is its planning mirror as it stands, brought up to date on a copy
exactly as ``MirroredStore.snapshot`` would (the changes on ``pool:changes`` since, or the whole pool read
again when it cannot catch up), so that the worker's own mirror is not touched. A test compares it with a fresh
read of the pool at a quiet point.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import redis
import structlog

from producer import cli
from worker import jobs
from worker.mirrored import MirroredStore
from worker.pool import Snapshot

ASK_POLL_S = 0.02
COPY_TRIES = 20
"""A copy taken while the worker changes its mirror (mid-plan) fails; it is taken again."""


def pool_view(pool: Snapshot) -> dict[str, Any]:
    """What a plan reads of a pool: each node as plans see it, its stored heartbeat, the holds on it. A
    heartbeat's ``seq`` and arrival are left out: a refresh (nothing else new) reaches a mirror as its TTL
    alone, so a mirror keeps the last record that changed something."""
    return {
        "nodes": sorted(
            [n.id, n.gpu_class, n.fabric, n.gpus, n.free_gpus, n.host_mem_gb, n.host_free_gb] for n in pool.nodes
        ),
        "records": {
            n: r.model_dump(mode="json", exclude={"seq", "received_at"}) for n, r in sorted(pool.records.items())
        },
        "held": {
            n: {hid: [h.gpus, h.host_gb, h.boot_id, h.nominated] for hid, h in sorted(hs.items())}
            for n, hs in sorted(pool.held.items())
            if hs
        },
    }


def next_view(conn: redis.Redis) -> dict[str, Any] | None:
    """The pool as this worker's next plan would see it; None before its first plan."""
    stores = [s for _, s in list(jobs._stores.values()) if s._mirror is not None]
    if not stores:
        return None
    store = max(stores, key=lambda s: s._mirror.read_at if s._mirror else 0.0)
    mirror = store._mirror
    assert mirror is not None
    for attempt in range(COPY_TRIES):
        try:
            copy = mirror.copy()
            break
        except RuntimeError:  # a dict changed size while copied
            if attempt == COPY_TRIES - 1:
                raise
            time.sleep(0.01)
    reader = MirroredStore(conn, store.keys)
    reader._mirror = copy
    pool = reader.snapshot()
    return {"continued": reader.whole_reads == 0, "pool": pool_view(pool)}


def answer(folder: Path, name: str, url: str) -> None:
    """Answer asks until the process ends."""
    structlog.contextvars.bind_contextvars(mirror_view=True)  # this thread's lines, told from the worker's
    conn = redis.Redis.from_url(url)
    ask, out = folder / f"{name}.ask", folder / f"{name}.view.json"
    while True:
        time.sleep(ASK_POLL_S)
        if not ask.exists():
            continue
        token = ask.read_text()
        try:
            reply: dict[str, Any] = {"token": token, "view": next_view(conn)}
        except Exception as e:  # said to the test, which fails on it
            reply = {"token": token, "error": f"{type(e).__name__}: {e}"}
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(reply))
        tmp.replace(out)
        ask.unlink()


def main(argv: list[str]) -> int:
    folder, name, rest = Path(argv[0]), argv[1], argv[2:]
    url = rest[rest.index("--redis-url") + 1]
    threading.Thread(target=answer, args=(folder, name, url), name="mirror-view", daemon=True).start()
    return cli.main(rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
