"""Redis failing over under load: a master, a replica and three sentinels (real processes), two workers and
three node agents, all through a ``redis+sentinel://`` URL, jobs flowing. The replica is made to fall
behind (``DEBUG SLEEP``, and the master drops its link to it) while jobs are submitted, then the master is
SIGKILLed and the replica promoted: the writes it never received are gone.

What must hold: workers and agents carry on against the new master by themselves; no card is ever used by
two jobs at once, as the agents see it (an agent starts a job's engine only on cards it has free, and
keeps a card busy, and says so in its heartbeats, until the engine it ran there has stopped: a reservation
that vanished with the old master does not free its card); every job settles; with ``WAIT 1`` no
acknowledged submit is lost, and with ``WAIT 0`` the loss is counted and reported.

``MODELPLAN_SOAK=1`` runs longer.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from planner import InvalidInput, ModelplanError
from producer import Client
from tests.redis_server import free_port
from tests.reliability.invariants import Checker, report
from tests.worker.helpers import hb, queued_functions, request
from tests.worker.processes import WorkerProcess
from worker.errors import NotReplicated
from worker.records import JobState

SOAK = bool(os.environ.get("MODELPLAN_SOAK"))
FLOW_S = 12.0 if SOAK else 3.0
"""How long jobs flow before the replica falls behind, and again after the failover."""
LAG_S = 2
"""How long the replica sleeps: the writes of this window reach only the master. Shorter than the sentinels'
``DOWN_AFTER_MS``, so that no sentinel takes the sleeping replica for down and starts a failover of its own."""
DOWN_AFTER_MS = 2500
BEAT_S = 0.1
STOP_S = 0.5
"""How long an engine takes to stop once its reservation is gone: its card stays busy meanwhile."""


def _start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed: run scripts/setup")
    return subprocess.Popen(
        [binary, *args, "--logfile", str(log)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _until(what: str, ok: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if ok():  # type: ignore[operator]
                return
        except redis.RedisError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen in {timeout} s")


@dataclass
class Cluster:
    """The Redis processes: master, replica, three sentinels."""

    folder: Path
    ports: dict[str, int]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def server_args(self, name: str) -> list[str]:
        args = ["--port", str(self.ports[name]), "--bind", "127.0.0.1", "--dir", str(self.folder / name)]
        # a replica that (re)connects is sent the data set at once, not after the default 5 s that a
        # diskless sync waits for more replicas to come: the first sync and the old master's, back as a
        # replica, which the submits under WAIT 1 wait for
        extra = ["--repl-diskless-sync-delay", "0"]
        return [*args, "--save", "", "--appendonly", "no", "--enable-debug-command", "local", *extra]

    def start_server(self, name: str, *extra: str) -> None:
        (self.folder / name).mkdir(exist_ok=True)
        self.procs[name] = _start([*self.server_args(name), *extra], self.folder / f"{name}.log")
        probe = redis.Redis(port=self.ports[name], socket_connect_timeout=0.2)
        _until(f"{name} starting", probe.ping, 10)
        probe.close()

    def sentinel_url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{self.ports[f's{i}']}" for i in range(3))
        return f"redis+sentinel://{hosts}/mymaster/0"

    def master_port(self) -> int:
        """The master's port as every sentinel names it (0 while they disagree)."""
        ports = set()
        for i in range(3):
            s = redis.Redis(port=self.ports[f"s{i}"], socket_connect_timeout=0.2)
            addr: Any = s.sentinel_get_master_addr_by_name("mymaster")
            s.close()
            ports.add(int(addr[1]))
        return ports.pop() if len(ports) == 1 else 0

    def lag(self, name: str, seconds: int) -> None:
        """Stop a server dead for ``seconds``: a replica so stopped falls behind its master."""
        r = redis.Redis(port=self.ports[name])
        r.execute_command("DEBUG", "SLEEP", seconds)  # type: ignore[no-untyped-call]
        r.close()

    def kill(self, name: str) -> None:
        proc = self.procs.pop(name)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)


@contextmanager
def cluster() -> Iterator[Cluster]:
    folder = Path(tempfile.mkdtemp(prefix="modelplan-failover-"))
    c = Cluster(folder, {n: free_port() for n in ("a", "b", "s0", "s1", "s2")})
    try:
        c.start_server("a")
        c.start_server("b", "--replicaof", "127.0.0.1", str(c.ports["a"]))
        replica = redis.Redis(port=c.ports["b"])
        _until("the replica syncing", lambda: replica.info("replication")["master_link_status"] == "up")
        replica.close()
        for i in range(3):
            conf = folder / f"s{i}.conf"
            conf.write_text(
                f"port {c.ports[f's{i}']}\nbind 127.0.0.1\ndir {folder}\n"
                f"sentinel monitor mymaster 127.0.0.1 {c.ports['a']} 2\n"
                f"sentinel down-after-milliseconds mymaster {DOWN_AFTER_MS}\n"
                "sentinel failover-timeout mymaster 3000\n"
            )
            c.procs[f"s{i}"] = _start([str(conf), "--sentinel"], folder / f"s{i}.log")
        for i in range(3):
            s = redis.Redis(port=c.ports[f"s{i}"], socket_connect_timeout=0.2)
            _until("the sentinels finding the replica", lambda s=s: s.sentinel_slaves("mymaster"))
            s.close()
        yield c
    finally:
        for proc in c.procs.values():
            proc.kill()
            proc.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)


@dataclass
class Agent:
    """A node agent as a real one behaves: it starts a job's engine when a reservation for its node appears
    (only on cards it has free), stops it ``STOP_S`` after the reservation is gone, and reports busy every
    card an engine holds.

    A reservation that lands on cards in use is a double booking if it was committed after a heartbeat
    of this agent showing those cards busy had been stored: modelplan then knew, and handed them out
    anyway. One committed before any such heartbeat could reach the new master (its engine's own
    reservation vanished with the old one, and the agent had not yet got through) is counted apart, as
    ``unseen_busy``: no planner can know of a card whose busy report was lost with the master."""

    client: Client
    node_id: str
    gpus: int
    seq: int = 0
    running: dict[str, int] = field(default_factory=dict)
    stopping: dict[str, tuple[int, float]] = field(default_factory=dict)
    published: dict[str, int] = field(default_factory=dict)
    """Each engine's hold id -> when (Redis server ms) a heartbeat listing it busy was first stored."""
    double_booked: list[str] = field(default_factory=list)
    unseen_busy: list[str] = field(default_factory=list)

    def busy(self) -> int:
        return sum(self.running.values()) + sum(g for g, _ in self.stopping.values())

    def committed_ms(self, hold_id: str) -> int:
        """When the job's change that wrote ``hold_id`` was committed (its stream entry's server time)."""
        job, _, version = hold_id.split(":")
        entries: Any = self.client.redis.xrange(self.client.keys.job_events(job))
        for entry_id, fields in entries:
            if fields.get(b"version") == version.encode():
                return int(entry_id.split(b"-")[0])
        return 0

    def tick(self) -> None:
        now = time.monotonic()
        held = {h: v.gpus for h, v in self.client.held_on(self.node_id).items() if not v.nominated}
        for hid in [h for h in self.running if h not in held]:
            self.stopping[hid] = (self.running.pop(hid), now + STOP_S)
        for hid in [h for h, (_, until) in self.stopping.items() if until <= now]:
            del self.stopping[hid]
            self.published.pop(hid, None)
        for hid, gpus in held.items():
            if hid in self.running or hid in self.stopping:
                continue
            if self.busy() + gpus > self.gpus:
                engines = [*self.running, *self.stopping]
                known = [self.published[e] for e in engines if e in self.published]
                what = f"{self.node_id}: {hid} on cards in use by {sorted(engines)}"
                if len(known) == len(engines) and self.committed_ms(hid) > max(known):
                    self.double_booked.append(what)
                else:
                    self.unseen_busy.append(what)
                continue
            self.running[hid] = gpus
        self.seq += 1
        started = (*self.running, *self.stopping)
        self.client.heartbeat(
            hb(self.node_id, gpus=self.gpus, free=self.gpus - self.busy(), seq=self.seq, started=started)
        )
        secs, micros = self.client.redis.time()
        for hid in started:
            self.published.setdefault(hid, secs * 1000 + micros // 1000)


def _loop(stop: threading.Event, step: object, errors: list[str]) -> None:
    while not stop.is_set():
        try:
            step()  # type: ignore[operator]
        except (ModelplanError, redis.RedisError) as e:  # Redis away during the failover: try again
            errors.append(type(e).__name__)
        time.sleep(BEAT_S)


@pytest.mark.parametrize("wait", [1, 0])
def test_jobs_survive_a_failover(wait: int, tmp_path: Path) -> None:
    with cluster() as c:
        url = c.sentinel_url()
        client = Client.from_url(url, wait_replicas=wait, wait_timeout_ms=500)
        agents = [Agent(Client.from_url(url), f"gpu-{i}", 2) for i in range(3)]
        for a in agents:
            a.tick()
        workers = [WorkerProcess(url, tmp_path, f"w{i}") for i in range(2)]
        checker = Checker(client.redis, client.keys)
        stop = threading.Event()
        errors: list[str] = []
        acked: dict[str, float] = {}
        refused: list[str] = []
        counter = iter(range(1_000_000))

        def submit() -> None:
            job_id = f"job-{next(counter)}"
            try:
                client.submit(request(), job_id=job_id)
                acked[job_id] = time.monotonic()
            except ModelplanError:
                refused.append(job_id)  # not acknowledged: the caller would submit it again
            placed = [j for j in list(acked)[-6:-3] if client.get(j).state is JobState.PLACED]
            for j in placed:  # keep cards turning over
                client.release(j)

        threads = [threading.Thread(target=_loop, args=(stop, a.tick, errors), daemon=True) for a in agents]
        threads.append(threading.Thread(target=_loop, args=(stop, submit, errors), daemon=True))
        try:
            for t in threads:
                t.start()
            time.sleep(FLOW_S)
            assert c.master_port() == c.ports["a"]
            threading.Thread(target=c.lag, args=("b", LAG_S), daemon=True).start()
            time.sleep(0.2)
            # the master drops its link to the sleeping replica: what it writes from here stays on it alone
            master = redis.Redis(port=c.ports["a"])
            master.client_kill_filter(_type="replica")
            master.close()
            time.sleep(LAG_S - 0.7)  # writes now reach the master only
            before_kill = len(acked)
            c.kill("a")
            killed = time.monotonic()
            for a in agents:  # what the old master stored of their heartbeats may be lost with it
                a.published.clear()
            new_master = redis.Redis(port=c.ports["b"])
            _until("the replica promoted", lambda: c.master_port() == c.ports["b"], 30)
            # only once it has taken the role may the old master come back: a replica still following an
            # empty master that restarted on the same port would sync its data away
            _until("the replica taking the master's role", lambda: new_master.info("replication")["role"] == "master")
            promoted = time.monotonic() - killed
            c.start_server("a", "--replicaof", "127.0.0.1", str(c.ports["b"]))  # back, as a replica
            _until(
                "the old master replicating again", lambda: new_master.info("replication")["connected_slaves"] >= 1, 30
            )
            recovered_at = time.monotonic()
            _until("a submit after the failover", lambda: any(t > recovered_at for t in acked.values()), 30)
            first_after = max(acked.values()) - killed
            time.sleep(FLOW_S)
            stop.set()
            for t in threads:
                t.join(timeout=10)

            def settled() -> bool:
                n = client.counts()
                return n["queued"] == 0 and n["planning"] == 0 and client.store.queue.count == 0

            _until("every job settling", settled, 60)
            for a in agents:
                a.tick()
            checker.acknowledged = set(acked)
            found = checker.check([a.node_id for a in agents])
            alive = [w.proc.poll() is None for w in workers]
        finally:
            stop.set()
            for w in workers:
                w.stop()
        lost = sorted(j for j in acked if client.redis.get(client.keys.job(j)) is None)
        report(
            "failover",
            wait_replicas=wait,
            acknowledged=len(acked),
            acknowledged_before_kill=before_kill,
            refused_not_replicated=len(refused),
            lost=len(lost),
            promoted_s=round(promoted, 2),
            first_submit_after_kill_s=round(first_after, 2),
            double_booked=sum(len(set(a.double_booked)) for a in agents),
            unseen_busy=sum(len(set(a.unseen_busy)) for a in agents),
            transient_errors=len(errors),
        )
    assert [a.double_booked for a in agents] == [[], [], []]
    assert [f for f in found if "has no record" not in f] == []
    assert alive == [True, True]  # the workers carried on by themselves
    if wait:
        assert lost == []
        assert refused  # the lagging window was refused, not acknowledged and lost
    assert len(acked) > before_kill


def test_a_write_no_replica_had_in_time_is_not_acknowledged(redis_url: str) -> None:
    """With no replica, ``WAIT 1`` times out: the submit raises ``NotReplicated`` (the job is on the master,
    and submitting it again is the same job), and so does a release."""
    client = Client.from_url(redis_url, wait_replicas=1, wait_timeout_ms=50)
    client.heartbeat(hb("gpu-0"))
    with pytest.raises(NotReplicated, match="0 of 1 replicas had it within 50 ms"):
        client.submit(request(), job_id="j1")
    with pytest.raises(NotReplicated):
        client.submit(request(), job_id="j1")  # the same job: nothing new queued
    assert queued_functions(client).count("worker.jobs.plan_job") == 1
    assert Client.from_url(redis_url).submit(request(), job_id="j1") == "j1"  # without waiting, acknowledged


@pytest.mark.parametrize("value", ["-1", "one", "1.5"])
def test_a_bad_wait_setting_is_named(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODELPLAN_WAIT_REPLICAS", value)
    with pytest.raises(InvalidInput, match="MODELPLAN_WAIT_REPLICAS"):
        Client.from_url("redis://127.0.0.1:1/0")
