"""The workers' mirrors of the pool under faults, each under load (worker processes, jobs arriving, nodes
taking and freeing cards so that jobs wait and are woken, releases): a worker SIGKILLed and another started,
``pool:changes`` trimmed to a few entries, to none and deleted outright, Redis restarted on its AOF and
without persistence. The invariants hold at every sample; afterwards no job is stuck or in a state it may
not end in, no card idles while a job it serves waits, and each live worker's next plan sees exactly the
pool a fresh read sees (``tests.reliability.mirror_view``)."""

from __future__ import annotations

import contextlib
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from producer import Client
from tests.redis_server import RedisServer
from tests.reliability.invariants import Checker, idle_while_waiting, report
from tests.reliability.mirror_view import pool_view
from tests.worker.helpers import hb, request
from tests.worker.processes import WorkerProcess
from worker import constants as C
from worker.calls import heartbeat_call, intake_call
from worker.errors import Contended, JobNotFound, RedisUnavailable, WrongState
from worker.mirrored import MirroredStore
from worker.records import JobState, ServeRequest, utcnow
from worker.reports import NodeRecord, parse_heartbeat
from worker.scripts import script, text

WORKERS = 3
LOAD_S = 5.0
STEP_S = 0.1
NODE_TTL_MS = 3_000
"""Heartbeats' TTL in these runs: nodes publish every few hundred ms, and Redis is back well within it."""
QUIET_TTL_MS = 60_000
"""The last heartbeats, before the mirrors are compared while nothing publishes: they outlive the check."""
SETTLE_S = 30.0
"""A plan cut off by the fault (its worker killed, Redis gone) waits out its 10 s lease and the 2 s sweep."""
ENDS = {JobState.PLACED, JobState.WAITING, JobState.RELEASED}
"""Where a job of these runs may end: every request fits somewhere in the pool, so none fails."""
KINDS = [request(), request("qwen2.5-7b-instruct"), request(replicas=2), request(priority=5)]
"""The load: one card of an h100-80g a replica."""
PROBE = request("llama-3.1-70b-instruct")
"""Four h100-80g cards on one node: only a late node has them."""


@dataclass
class Pool:
    """The simulated nodes, published from the test's own loop: h100-80g nodes of two cards, some taken by
    something outside modelplan."""

    client: Client
    rnd: random.Random
    nodes: dict[str, dict[str, int]] = field(default_factory=dict)
    present: set[str] = field(default_factory=set)

    def add(self, node_id: str, gpus: int = 2) -> None:
        self.nodes[node_id] = {"gpus": gpus, "outside": 0, "seq": 0}
        self.present.add(node_id)

    def heartbeat(self, node_id: str) -> dict[str, Any]:
        n = self.nodes[node_id]
        n["seq"] += 1
        return hb(node_id, "h100-80g", gpus=n["gpus"], free=max(0, n["gpus"] - n["outside"]), seq=n["seq"])

    def beat(self, node_id: str) -> None:
        with contextlib.suppress(RedisUnavailable):  # Redis restarting: the next one lands
            self.client.heartbeat(self.heartbeat(node_id))

    def churn(self) -> None:
        """Two nodes' cards taken or given back outside modelplan; about a third of the rest report."""
        for node_id in self.rnd.sample(sorted(self.present), 2):
            self.nodes[node_id]["outside"] = self.rnd.choice([0, 0, 1, 2])
            self.beat(node_id)
        for node_id in sorted(self.present):
            if self.rnd.random() < 0.3:
                self.beat(node_id)


class ViewingWorker(WorkerProcess):
    """A worker process that shows, when asked, the pool as its next plan would see it."""

    def __init__(self, redis_url: str, log_dir: Path, name: str) -> None:
        launcher = ("-m", "tests.reliability.mirror_view", str(log_dir), name)
        super().__init__(redis_url, log_dir, name, launcher=launcher)
        self.dir = log_dir

    def view(self, timeout: float = 10.0) -> dict[str, Any]:
        token = f"{time.monotonic_ns()}"
        out = self.dir / f"{self.name}.view.json"
        ask, tmp = self.dir / f"{self.name}.ask", self.dir / f"{self.name}.ask.tmp"
        tmp.write_text(token)
        tmp.replace(ask)  # whole, or the worker could read it half written
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if out.exists():
                reply: dict[str, Any] = json.loads(out.read_text())
                if reply["token"] == token:
                    assert "error" not in reply, f"{self.name}: {reply['error']}"
                    return reply
            time.sleep(0.02)
        raise AssertionError(f"worker {self.name} did not show its mirror within {timeout} s")


class Run:
    """One scenario: the pool, the workers, the jobs, and the checker sampling all through."""

    def __init__(self, url: str, tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(C, "NODE_TTL_MS", NODE_TTL_MS)
        self.url, self.tmp_path, self.monkeypatch = url, tmp_path, monkeypatch
        self.rnd = random.Random(seed)
        self.client = Client.from_url(url)
        self.pool = Pool(self.client, self.rnd)
        for i in range(8):
            self.pool.add(f"gpu-{i}")
        for n in sorted(self.pool.present):
            self.pool.beat(n)
        self.checker = Checker(self.client.redis, self.client.keys)
        self.workers = [ViewingWorker(url, tmp_path, f"w{i}") for i in range(WORKERS)]
        self.started()
        self.stopped: list[ViewingWorker] = []
        self.submitted: list[str] = []
        self.released = 0
        self.sampling = threading.Event()
        self.sampling.set()
        self.sample_lock = threading.Lock()
        self.stop = threading.Event()
        self.monitor = threading.Thread(target=self._sample, daemon=True)
        self.monitor.start()

    def started(self, within: float = 30.0) -> None:
        """Wait until every worker runs and one has swept once (the first sweep queues the 30 s re-plan of
        every waiting job, which then stays out of the run), the nodes publishing meanwhile."""
        deadline = time.monotonic() + within
        while not all(b'"worker_started"' in w.log_path.read_bytes() for w in self.workers) or not (
            self.client.redis.exists(self.client.keys.lock("waiting-sweep"))
        ):
            assert time.monotonic() < deadline, f"workers not started within {within} s"
            for n in sorted(self.pool.present):
                self.pool.beat(n)
            time.sleep(0.2)

    def _sample(self) -> None:
        while not self.stop.is_set():
            if self.sampling.is_set():
                with self.sample_lock, contextlib.suppress(redis.RedisError):  # Redis restarting
                    self.checker.check(self.nodes)
            time.sleep(0.03)

    @property
    def nodes(self) -> list[str]:
        return sorted(self.pool.nodes)

    def submit(self, req: ServeRequest) -> str | None:
        try:
            job_id = self.client.submit(req)
        except RedisUnavailable:
            return None
        self.submitted.append(job_id)
        self.checker.acknowledged.add(job_id)
        return job_id

    def step(self) -> None:
        self.submit(self.rnd.choice(KINDS))
        self.pool.churn()
        if self.rnd.random() < 0.25:
            try:
                placed = self.client.store.job_ids(JobState.PLACED)
                if placed:
                    self.client.release(self.rnd.choice(placed))
                    self.released += 1
            except (RedisUnavailable, redis.ConnectionError, WrongState, JobNotFound, Contended):
                pass  # Redis restarting, or the job moved meanwhile
        time.sleep(STEP_S)

    def load(self, seconds: float, faults: dict[float, Callable[[], None]]) -> None:
        """Steps of load for ``seconds``; each fault once, when its time comes."""
        started = time.monotonic()
        due = sorted(faults.items())
        while time.monotonic() - started < seconds:
            while due and time.monotonic() - started >= due[0][0]:
                due.pop(0)[1]()
            self.step()
        for _, fault in due:
            fault()

    def settled(self) -> bool:
        try:
            c = self.client.counts()
            queue = self.client.store.queue
            running = queue.started_job_registry.get_job_count(cleanup=False)
            return c["queued"] == 0 and c["planning"] == 0 and len(queue) == 0 and running == 0
        except (RedisUnavailable, redis.ConnectionError):
            return False

    def drain(self, within: float = SETTLE_S) -> None:
        """Wait until no job is queued or being planned, the nodes publishing unchanged meanwhile."""
        deadline = time.monotonic() + within
        while not self.settled():
            assert time.monotonic() < deadline, f"not settled within {within} s: {self.client.counts()}"
            for n in sorted(self.pool.present):
                self.pool.beat(n)
            time.sleep(0.2)

    def join_with(self, node_id: str, gpus: int, fault: Callable[[redis.client.Pipeline], object]) -> None:
        """A node's first heartbeat, its intake and ``fault`` in one transaction: no worker can have read the
        heartbeat's change before the fault, and no wake-up pass is signalled for it."""
        self.pool.add(node_id, gpus)
        record = NodeRecord.model_validate(
            {**dict(parse_heartbeat(self.pool.heartbeat(node_id))), "received_at": utcnow()}
        )
        keys, args = heartbeat_call(self.client.store.keys, [(node_id, record.model_dump_json())])
        with self.client.redis.pipeline(transaction=True) as pipe:
            script(self.client.redis, "heartbeat")(keys=keys, args=args, client=pipe)
            # taken in as a worker's intake does when the server rings it, before the fault (the workers'
            # intakes, rung after, find it taken)
            in_keys, in_args = intake_call(self.client.store.keys, [node_id])
            script(self.client.redis, "intake")(keys=in_keys, args=in_args, client=pipe)
            pipe.delete(self.client.keys.wake_signal)
            fault(pipe)
            pipe.execute()

    def probe(self, node_id: str) -> str:
        """A job that fits only on ``node_id``, submitted once every worker's reuse of its last read has run
        out: it must be placed there."""
        time.sleep(C.SNAPSHOT_REUSE_S + 0.1)
        job_id = self.submit(PROBE)
        assert job_id is not None
        deadline = time.monotonic() + 10
        while (rec := self.client.get(job_id)).state in (JobState.QUEUED, JobState.PLANNING):
            assert time.monotonic() < deadline, f"probe {job_id} not planned"
            time.sleep(0.02)
        assert rec.state is JobState.PLACED, f"probe for {node_id}: {rec.state.value}: {rec.reason}"
        assert {p.node_id for p in rec.placement} == {node_id}
        self.client.store.signal_pass()  # what the node's own heartbeat would have signalled
        return job_id

    def quiet_check(self) -> dict[str, Any]:
        """The load ends: nodes give back what was taken outside, the jobs settle, the nodes publish a last
        long-lived heartbeat, and once nothing changes no card idles while a job it serves waits, and each
        live worker's next plan sees the pool as a fresh read does."""
        for n in self.pool.present:
            self.pool.nodes[n]["outside"] = 0
        self.drain()
        self.monkeypatch.setattr(C, "NODE_TTL_MS", QUIET_TTL_MS)
        for n in sorted(self.pool.present):
            self.pool.beat(n)
        r, k = self.client.redis, self.client.keys
        for _ in range(20):
            self.drain()
            before = last_change(r, k.pool_changes)
            time.sleep(0.6)
            if not self.settled() or last_change(r, k.pool_changes) != before:
                continue
            idle = idle_while_waiting(self.client)
            fresh = pool_view(MirroredStore(r, k).snapshot())
            views = {w.name: w.view()["view"] for w in self.workers}
            if any(v is None for v in views.values()):
                # a worker started late that has planned nothing yet: the next job most likely goes to it,
                # as RQ hands each job to the worker that has waited longest
                self.submit(KINDS[0])
                continue
            if last_change(r, k.pool_changes) == before:
                break
        else:
            raise AssertionError("the pool never stayed still for the mirrors to be compared")
        for name, v in views.items():
            for part in ("nodes", "records", "held"):
                assert v["pool"][part] == fresh[part], f"worker {name}'s mirror differs from a fresh read in {part}"
        return {
            "idle": idle,
            "continued": sum(bool(v["continued"]) for v in views.values()),
            "compared": len(views),
            "fresh_nodes": [n[0] for n in fresh["nodes"]],
        }

    def finish(self) -> None:
        self.stop.set()
        self.monitor.join()
        for w in self.workers:
            w.stop()

    def check_end(self, quiet: dict[str, Any]) -> Counter[str]:
        """The whole state once the workers are stopped; the count of jobs in each state."""
        final = self.checker.check(self.nodes)
        states: Counter[str] = Counter()
        for job_id in sorted(self.checker.acknowledged):
            states[self.client.get(job_id).state.value] += 1
        assert self.checker.violations == [] and final == []
        assert quiet["idle"] == []
        assert set(states) <= {s.value for s in ENDS}, states
        counts = self.client.counts()
        assert counts["queued"] == counts["planning"] == 0
        assert sum(counts.values()) == len(self.checker.acknowledged)
        assert self.checker.samples > 20
        return states

    def logs(self) -> list[dict[str, Any]]:
        """Every worker's log lines (the mirror view's own left out)."""
        out = []
        for w in [*self.workers, *self.stopped]:
            for line in w.log_path.read_text().splitlines():
                try:
                    d = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(d, dict) and not d.get("mirror_view"):
                    out.append(d)
        return out

    def report(self, scenario: str, states: Counter[str], quiet: dict[str, Any], **extra: Any) -> dict[str, Any]:
        """Report the run's figures, and check that it was a run under load: jobs waited, woken ones were
        placed, cards were given back."""
        lines = self.logs()
        # each worker's first read (reason "start") is no re-read
        whole = (d["reason"] for d in lines if d.get("event") == "pool_read_whole")
        rereads = Counter(reason for reason in whole if reason != "start")
        figures = {
            "scenario": scenario,
            "workers": WORKERS,
            "jobs": len(self.checker.acknowledged),
            "placements": sum(d.get("event") == "job_placed" for d in lines),
            "waits": sum(d.get("event") == "job_waiting" for d in lines),
            "woken": sum(int(d.get("moved", 0)) for d in lines if d.get("event") == "wake_pass"),
            "released": self.released,
            "states": dict(sorted(states.items())),
            "full_rereads": dict(sorted(rereads.items())),
            "mirrors_equal_fresh": f"{quiet['compared']} of {quiet['compared']}",
            "mirrors_caught_up": quiet["continued"],
            **extra,
            "samples": self.checker.samples,
            "violations": len(self.checker.violations),
        }
        report("mirror_faults", **figures)
        assert figures["waits"] and figures["woken"] and self.released
        return figures


def last_change(r: redis.Redis, stream: str) -> str:
    try:
        return text(r.xinfo_stream(stream)["last-generated-id"])
    except redis.ResponseError:  # no stream
        return ""


@pytest.fixture
def run_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, int], Run]]:
    runs: list[Run] = []

    def start(url: str, seed: int) -> Run:
        runs.append(Run(url, tmp_path, seed, monkeypatch))
        return runs[-1]

    yield start
    for run in runs:
        run.finish()
        run.client.redis.close()


def test_a_worker_killed_and_replaced_reads_the_pool_afresh(redis_url: str, run_in: Callable[[str, int], Run]) -> None:
    run = run_in(redis_url, 31)

    def kill_one(i: int) -> Callable[[], None]:
        def kill() -> None:
            victim = run.workers.pop(run.rnd.randrange(len(run.workers)))
            victim.kill()
            run.stopped.append(victim)
            run.workers.append(ViewingWorker(run.url, run.tmp_path, f"r{i}"))

        return kill

    run.load(LOAD_S, {1.5: kill_one(0), 3.0: kill_one(1)})
    quiet = run.quiet_check()
    run.finish()
    states = run.check_end(quiet)
    run.report("worker_killed", states, quiet, workers_killed=2)


def test_pool_changes_trimmed_and_deleted_under_warm_mirrors(redis_url: str, run_in: Callable[[str, int], Run]) -> None:
    run = run_in(redis_url, 32)
    r, k = run.client.redis, run.client.keys
    probes: list[str] = []

    def trim_to_few() -> None:
        r.xtrim(k.pool_changes, maxlen=3, approximate=False)

    def join_and(node_id: str, fault: Callable[[redis.client.Pipeline], object]) -> Callable[[], None]:
        def probe() -> None:
            run.drain()
            run.join_with(node_id, 4, fault)
            probes.append(run.probe(node_id))

        return probe

    def delete() -> None:
        r.delete(k.pool_changes)

    run.load(
        LOAD_S,
        {
            1.0: trim_to_few,
            2.0: join_and("late-0", lambda p: p.xtrim(k.pool_changes, maxlen=0, approximate=False)),
            3.0: delete,
            4.0: join_and("late-1", lambda p: p.delete(k.pool_changes)),
        },
    )
    quiet = run.quiet_check()
    run.finish()
    states = run.check_end(quiet)
    assert {"late-0", "late-1"} <= set(quiet["fresh_nodes"])
    figures = run.report(
        "stream_trimmed", states, quiet, faults="XTRIM 3; XTRIM 0; DEL; DEL", probes_placed=len(probes)
    )
    assert figures["full_rereads"], "no worker noticed that the stream was cut"


@pytest.mark.parametrize("persistence", ["aof", "none"])
def test_redis_restarted_under_warm_mirrors(persistence: str, run_in: Callable[[str, int], Run]) -> None:
    server = RedisServer(*(["--appendonly", "yes", "--appendfsync", "always"] if persistence == "aof" else []))
    server.start()
    try:
        run = run_in(server.url, 33)
        before: list[str] = []
        gone = {"gpu-4", "gpu-5", "gpu-6", "gpu-7"}

        def restart() -> None:
            with run.sample_lock:
                run.sampling.clear()
            before.extend(run.submitted)
            if persistence == "aof":
                server.stop(kill=True)  # SIGKILL: appendfsync always has every acknowledged write on disk
                time.sleep(0.3)  # away for a moment: the workers' reads and commits fail meanwhile
                server.start()
            else:
                server.restart()  # no AOF, no RDB: the pool, the jobs and the stream are gone
                run.checker.acknowledged.clear()
                run.pool.present -= gone
                run.pool.add("gpu-8")
                run.pool.add("gpu-9")
                for n in sorted(run.pool.present):
                    run.pool.beat(n)
                # a read from just before the restart is reused by no plan of a job submitted after it: one
                # would be refused by its commit and planned again (allowed), but counted below as planning
                # on a gone node
                time.sleep(C.SNAPSHOT_REUSE_S + 0.1)
            run.sampling.set()

        run.load(LOAD_S, {2.0: restart})
        quiet = run.quiet_check()
        run.finish()
        states = run.check_end(quiet)
        lines = run.logs()
        if persistence == "aof":
            figures = run.report("redis_restarted_aof", states, quiet, restart="SIGKILL, AOF always")
            # the stream came back with its entries and its place: every mirror went on from it
            assert figures["full_rereads"] == {} and quiet["continued"] == WORKERS
            return
        after = set(run.submitted) - set(before)
        silent = [
            d
            for d in lines
            if d.get("event") == "commit_conflict" and d.get("code") == "silent" and d["job_id"] in after
        ]
        placed_on = {
            n for d in lines if d.get("event") == "job_placed" and d.get("job_id") in after for n in d.get("nodes", [])
        }
        run.report(
            "redis_restarted_none",
            states,
            quiet,
            restart="no persistence",
            jobs_lost_with_redis=len(before),
            planned_on_gone_nodes=len(silent),
        )
        assert not any(run.client.redis.exists(run.client.keys.job(j)) for j in before)
        assert placed_on <= run.pool.present and {"gpu-8", "gpu-9"} <= placed_on, placed_on
        assert not gone & set(quiet["fresh_nodes"])
        assert silent == []
    finally:
        server.cleanup()
