"""What waiting for replicas costs: a submit's latency with ``MODELPLAN_WAIT_REPLICAS`` 0 and 1, against a
master and one replica (``redis-server`` processes of its own, on loopback). One JSON line per figure.

    python -m bench.wait [--jobs N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import redis

from producer.client import Client
from tests.redis_server import RedisServer
from tests.worker.helpers import hb, request


def latencies(client: Client, jobs: int, tag: str) -> list[float]:
    out = []
    req = request()
    for i in range(jobs):
        start = time.perf_counter()
        client.submit(req, job_id=f"{tag}-{i}")
        out.append((time.perf_counter() - start) * 1000)
    return out


def emit(name: str, value: float, unit: str) -> None:
    print(json.dumps({"name": name, "value": round(value, 3), "unit": unit}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.wait")
    parser.add_argument("--jobs", type=int, default=500)
    args = parser.parse_args(argv)
    master = RedisServer()
    master.start()
    replica = RedisServer("--replicaof", "127.0.0.1", str(master.port))
    replica.start()
    try:
        probe = redis.Redis(port=replica.port)
        while probe.info("replication")["master_link_status"] != "up":
            time.sleep(0.05)
        probe.close()
        Client.from_url(master.url).heartbeat(hb("n1"))
        for wait in (0, 1):
            client = Client.from_url(master.url, wait_replicas=wait)
            ms = latencies(client, args.jobs, f"w{wait}")
            q = statistics.quantiles(ms, n=100)
            emit(f"submit_ms_p50_wait{wait}", q[49], "ms")
            emit(f"submit_ms_p99_wait{wait}", q[98], "ms")
            client.redis.close()
    finally:
        replica.cleanup()
        master.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
