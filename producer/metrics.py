"""``modelplan metrics``: the pool, the jobs and the workers' timings as Prometheus metrics.

Each scrape reads Redis afresh, through the same client calls and the same card count as
``modelplan status`` (``producer.render.node_cards``), so the two agree. The workers' plan and commit
times, commit conflicts and wake-up latency come from the ``stats`` hash they add to
(``worker.metrics``). Redis out of reach is ``modelplan_redis_up 0``, not a failed scrape.

=========================================  =========  =============================================
metric                                     type       what
=========================================  =========  =============================================
``modelplan_redis_up``                     gauge      1 when this scrape could read Redis
``modelplan_jobs{state}``                  gauge      jobs in each state
``modelplan_waiting_jobs{gpu_class,kind}`` gauge      waiting jobs by the class they wait for and why
                                                      (resources, priority, gone)
``modelplan_cards{gpu_class,state}``       gauge      cards by class: reserved, held, busy (outside
                                                      modelplan), free, unreadable (kept taken)
``modelplan_nodes{gpu_class}``             gauge      live nodes by class (``cpu``: no cards)
``modelplan_queue_depth``                  gauge      planning jobs on the queue
``modelplan_workers_alive``                gauge      workers running now (``worker.alive``); 0: no
                                                      queued job will be planned
``modelplan_requests_pending``             gauge      request-stream entries not yet answered
``modelplan_heartbeat_age_seconds{node}``  gauge      since each live node's last heartbeat
``modelplan_quarantined_records``          gauge      stored records that do not parse
``modelplan_node_conflicts``               gauge      node ids two agents publish under (each out of
                                                      the pool while it lasts)
``modelplan_conflict_heartbeats_total``    counter    heartbeats refused for such a conflict
``modelplan_acl_refusals``                 gauge      commands the server's ACL refused modelplan's
                                                      logins (ACL LOG, where the exporter's login may
                                                      read it; ``modelplan status`` says whose)
``modelplan_plan_seconds``                 histogram  one planning job, claim to commit
``modelplan_commit_seconds``               histogram  one commit (``transition.lua``)
``modelplan_commit_conflicts_total``       counter    commits that found their cards taken
``modelplan_wake_latency_seconds``         histogram  a heartbeat to a waiting replica placed
``modelplan_observations_refused_total``   counter    engines' footprints (or ends) refused (another
                                                      node's hold, past the card or the RAM)
``modelplan_observations_flagged_total``   counter    footprints under half or over twice the formula
``modelplan_estimate_observed_ratio``      gauge      the latest footprint over the formula's estimate,
``{engine,gpu_class}``                                by engine and card class (``cpu``: RAM)
=========================================  =========  =============================================
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import redis
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from producer.client import Client
from producer.constants import METRICS_ADDR
from producer.metrics_server import MetricsServer
from producer.refusals import refusals
from producer.render import node_cards
from worker.classes import class_of
from worker.errors import RedisFailed
from worker.keys import CPU_CLASS
from worker.metrics import CONFLICT_HEARTBEATS, COUNTERS, HISTOGRAMS, bucket_field
from worker.observations import RATIO_FIELD
from worker.records import JobState, utcnow
from worker.scripts import text

NAMESPACE = "modelplan"
CARD_STATES = ("reserved", "held", "busy", "free", "unreadable")


class PoolCollector(Collector):
    """Reads one prefix's state in Redis at each scrape."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(f"{NAMESPACE}_redis_up", "1 when this scrape could read Redis")
        try:
            metrics = list(self._read())
        except (redis.RedisError, RedisFailed, ConnectionError, PermissionError):
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from metrics

    def _read(self) -> Iterator[Metric]:
        c, k = self.client, self.client.keys
        jobs = GaugeMetricFamily(f"{NAMESPACE}_jobs", "Jobs in each state", labels=["state"])
        for state, n in c.counts().items():
            jobs.add_metric([state], n)
        yield jobs

        waiting = GaugeMetricFamily(
            f"{NAMESPACE}_waiting_jobs", "Waiting jobs by the class they wait for and why", labels=["gpu_class", "kind"]
        )
        by: Counter[tuple[str, str]] = Counter()
        for rec in c.jobs(JobState.WAITING):
            kinds = [r.wait.kind for r in rec.replicas if r.wait is not None and r.state != "placed"]
            by[(class_of(rec), kinds[0] if kinds else "resources")] += 1
        for (cls, kind), n in sorted(by.items()):
            waiting.add_metric([cls, kind], n)
        yield waiting

        snap = c.pool()
        cards = GaugeMetricFamily(
            f"{NAMESPACE}_cards", "Cards by class and what they are doing", labels=["gpu_class", "state"]
        )
        nodes = GaugeMetricFamily(f"{NAMESPACE}_nodes", "Live nodes by card class (cpu: none)", labels=["gpu_class"])
        age = GaugeMetricFamily(
            f"{NAMESPACE}_heartbeat_age_seconds", "Seconds since each live node's last heartbeat", labels=["node"]
        )
        per_class: dict[str, Counter[str]] = {}
        node_count: Counter[str] = Counter()
        now = utcnow()
        for node_id, node in sorted(snap.records.items()):
            cls = node.gpu_class or CPU_CLASS
            node_count[cls] += 1
            age.add_metric([node_id], max(0.0, (now - node.received_at).total_seconds()))
            if node.gpu_class:
                per_class.setdefault(cls, Counter()).update(node_cards(snap, node_id))
        for cls, counted in sorted(per_class.items()):
            for state in CARD_STATES:
                cards.add_metric([cls, state], counted.get(state, 0))
        for cls, n in sorted(node_count.items()):
            nodes.add_metric([cls], n)
        yield from (cards, nodes, age)

        yield GaugeMetricFamily(f"{NAMESPACE}_queue_depth", "Planning jobs on the queue", value=c.store.queue.count)
        yield GaugeMetricFamily(
            f"{NAMESPACE}_workers_alive", "Workers running now (0: queued jobs wait)", value=c.workers_alive()
        )
        yield GaugeMetricFamily(
            f"{NAMESPACE}_requests_pending", "Request-stream entries not yet answered", value=c.redis.xlen(k.requests)
        )
        yield GaugeMetricFamily(
            f"{NAMESPACE}_quarantined_records", "Stored records that do not parse", value=c.redis.hlen(k.quarantine)
        )
        conflicted = len(c.conflicts())
        yield GaugeMetricFamily(f"{NAMESPACE}_node_conflicts", "Node ids two agents publish under", value=conflicted)
        refused = refusals(c.redis, k)
        if refused is not None:  # only a login that may read the server's ACL LOG sees them; status says whose
            total = sum(f.count for f in refused)
            yield GaugeMetricFamily(
                f"{NAMESPACE}_acl_refusals", "Commands the server's ACL refused modelplan's logins", value=total
            )
        yield from _stats(c.redis.hgetall(k.stats))


def _stats(raw: Any) -> Iterator[Metric]:
    stats = {text(f): float(text(v)) for f, v in raw.items()}
    helps = {
        "plan_seconds": "One planning job, claim to commit, in seconds",
        "commit_seconds": "One commit of a planned change, in seconds",
        "wake_latency_seconds": "From a node's heartbeat to a waiting replica placed on it, in seconds",
    }
    for name, bounds in HISTOGRAMS.items():
        count = stats.get(f"{name}:count", 0.0)
        buckets = [(f"{le:g}", stats.get(bucket_field(name, le), 0.0)) for le in bounds] + [("+Inf", count)]
        yield HistogramMetricFamily(
            f"{NAMESPACE}_{name}", helps[name], buckets=buckets, sum_value=stats.get(f"{name}:sum", 0.0)
        )
    for name, help_text in COUNTERS.items():
        yield CounterMetricFamily(f"{NAMESPACE}_{name}", help_text, value=stats.get(name, 0.0))
    ratio = GaugeMetricFamily(
        f"{NAMESPACE}_{RATIO_FIELD}",
        "The latest footprint an engine was measured to hold over the formula's estimate",
        labels=["engine", "gpu_class"],
    )
    for field, value in sorted(stats.items()):
        head, _, rest = field.partition(":")
        engine, _, gpu_class = rest.partition(":")
        if head == RATIO_FIELD and engine and gpu_class:
            ratio.add_metric([engine, gpu_class], value)
    yield ratio
    yield CounterMetricFamily(
        f"{NAMESPACE}_{CONFLICT_HEARTBEATS}",
        "Heartbeats refused because two agents publish under their node id",
        value=stats.get(CONFLICT_HEARTBEATS, 0.0),
    )


def registry(client: Client) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(PoolCollector(client))
    return reg


def exposition(client: Client) -> str:
    """One scrape, as the text Prometheus reads."""
    from prometheus_client import generate_latest

    return generate_latest(registry(client)).decode()


def serve(client: Client, port: int, addr: str = METRICS_ADDR) -> None:
    """Serve ``/metrics`` on ``addr:port`` until interrupted (``producer.metrics_server``), having said on
    standard error where (the port the system picked, for port 0): standard output stays empty."""
    with MetricsServer(registry(client), addr, port) as server:
        host, bound = server.address
        host = f"[{host}]" if ":" in host else host
        print(f"serving metrics on http://{host}:{bound}/metrics", file=sys.stderr, flush=True)
        while True:
            time.sleep(3600)
