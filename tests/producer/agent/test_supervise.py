"""The ``run`` start hook with real processes: a stand-in engine (``producer/standin.py``) started for a hold
placed on a CPU node, asked for its health, measured, stopped on release (TERM, KILL after the grace),
adopted by an agent started again, and noticed when it dies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from planner.errors import InvalidInput
from producer import Client
from producer.agent import Agent, Card, HostMemory, SystemReader, run_from_args
from producer.agent.engine_state import EngineRecord, Store, default_state_dir, proc_stat
from producer.agent.supervise import Supervisor
from tests.producer.agent.conftest import STANDIN, standins
from tests.producer.agent.test_agent import agent_args
from tests.worker.helpers import drain, request
from worker import maintenance
from worker.records import JobRecord, JobState, Reservation

BOOT = "boot-1"
WAIT_S = 60.0  # a bound on waiting for a process, not a speed assertion
HOLD_MIB = 48


@dataclass
class CpuReader:
    def cards(self) -> list[Card]:
        return []

    def memory(self) -> HostMemory:
        return HostMemory(total_gb=125, free_gb=125)


def standin(tag: Path, *extra: str) -> Callable[[list[str]], list[str]]:
    """The engine's command line with the stand-in in place of ``llama-server``, tagged with the test's
    folder (an option the stand-in ignores) so that the test can find its own stand-ins."""
    return lambda argv: [sys.executable, "-P", STANDIN, *argv, "--hold-mib", str(HOLD_MIB), "--tag", str(tag), *extra]


def until(done: Callable[[], bool], step: Callable[[], object]) -> None:
    end = time.monotonic() + WAIT_S
    while not done():
        assert time.monotonic() < end, "gave up waiting"
        step()
        time.sleep(0.05)


def agent(
    client: Client, state: Path, wrap: Callable[[list[str]], list[str]], stop_grace: float = 10.0
) -> tuple[Agent, Supervisor]:
    # what the engines are measured with: this machine's processes, and no card
    reader = SystemReader(nvml=lambda: None, smi=lambda _: None, cgroup=None)
    sup = Supervisor(state, boot_id=BOOT, reader=reader, wrap=wrap, stop_grace=stop_grace)
    return Agent("cpu-1", CpuReader(), client, boot_id=BOOT, supervisor=sup), sup


def place(client: Client, a: Agent) -> tuple[JobRecord, Reservation]:
    a.tick()  # the node is in the pool
    job = client.submit(request("llama-3-8b-gguf"))
    drain(client)
    rec = client.get(job)
    assert rec.state is JobState.PLACED, rec.reason
    return rec, rec.placement[0]


def test_start_returns_once_launched_health_is_polled_and_release_stops_with_term(
    client: Client, tmp_path: Path, engines: list[int]
) -> None:
    ready = tmp_path / "ready"
    a, sup = agent(client, tmp_path / "state", wrap=standin(tmp_path, "--ready-file", str(ready)))
    rec, held = place(client, a)
    hb = a.tick()
    hold = held.hold_id
    assert hb.started == (hold,)
    [pid] = sup.pids().values()
    engines.append(pid)
    record = json.loads(Store(tmp_path / "state").record_path(hold).read_text())
    assert record["pid"] == pid and record["start_time"] == proc_stat(pid).start_time  # type: ignore[union-attr]
    assert (record["cards"], record["engine"], record["ready"]) == ([], "llamacpp", False)
    command = record["command"]
    assert (
        command[command.index("--host") + 1] == "127.0.0.1"
        and int(command[command.index("--port") + 1]) == record["port"]
    )
    assert os.getpgid(pid) == pid  # a process group of its own

    # /health answers 503 until the ready file exists: not ready, however many ticks
    until(lambda: "listening" in Path(record["log"]).read_text(), a.tick)
    a.tick()
    assert not sup.ready(hold)
    ready.touch()
    with capture_logs() as logs:
        until(lambda: sup.ready(hold), a.tick)
    assert [e["pid"] for e in logs if e["event"] == "engine_ready"] == [pid]
    assert "CUDA_VISIBLE_DEVICES=\n" in Path(record["log"]).read_text()  # engine_env(()) : no card

    client.release(rec.job_id)
    with capture_logs() as logs:
        a.tick()
        until(lambda: hold not in sup.pids(), a.tick)
    events = [e["event"] for e in logs if e["event"].startswith("engine")]
    assert events == ["engine_stopping", "engine_stopped"]
    assert [e["status"] for e in logs if e["event"] == "engine_stopped"] == [0]  # exited on TERM
    assert proc_stat(pid) is None and not Store(tmp_path / "state").record_path(hold).exists()
    assert a.started == {} and sup.ended() == {}


def test_an_engine_that_ignores_term_gets_kill_after_the_grace(
    client: Client, tmp_path: Path, engines: list[int]
) -> None:
    a, sup = agent(client, tmp_path, wrap=standin(tmp_path, "--ignore-term"), stop_grace=0.2)
    rec, held = place(client, a)
    a.tick()
    [pid] = sup.pids().values()
    engines.append(pid)
    until(lambda: sup.ready(held.hold_id), a.tick)
    client.release(rec.job_id)
    with capture_logs() as logs:
        a.tick()
        until(lambda: held.hold_id not in sup.pids(), a.tick)
    events = [e["event"] for e in logs if e["event"].startswith("engine")]
    assert events == ["engine_stopping", "engine_killed", "engine_stopped"]
    assert [e["status"] for e in logs if e["event"] == "engine_stopped"] == [-signal.SIGKILL]


def test_an_agent_started_again_adopts_its_engine_and_starts_no_second(
    client: Client, tmp_path: Path, engines: list[int]
) -> None:
    first, sup1 = agent(client, tmp_path, wrap=standin(tmp_path))
    rec, held = place(client, first)
    first.tick()
    [pid] = sup1.pids().values()
    engines.append(pid)
    until(lambda: sup1.ready(held.hold_id), first.tick)

    with capture_logs() as logs:
        again, sup2 = agent(client, tmp_path, wrap=standin(tmp_path))
        hb = again.tick()
    assert [e["pid"] for e in logs if e["event"] == "engine_adopted"] == [pid]
    assert "engine_launched" not in [e["event"] for e in logs]
    assert hb.started == (held.hold_id,) and sup2.pids() == {held.hold_id: pid}
    assert len(list((tmp_path / "holds").glob("*.json"))) == 1
    assert standins(tmp_path) == [pid]  # one engine, not two
    until(lambda: sup2.ready(held.hold_id), again.tick)

    client.release(rec.job_id)
    again.tick()
    # the adopted engine is not the new agent's child: it ends as a zombie of the first, which counts as gone
    until(lambda: held.hold_id not in sup2.pids(), again.tick)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0  # it exited on TERM


def test_an_engine_that_dies_is_noticed_and_its_record_kept(client: Client, tmp_path: Path, engines: list[int]) -> None:
    a, sup = agent(client, tmp_path, wrap=standin(tmp_path))
    rec, held = place(client, a)
    a.tick()
    [pid] = sup.pids().values()
    engines.append(pid)
    os.kill(pid, signal.SIGKILL)
    with capture_logs() as logs:
        until(lambda: bool(sup.ended()), a.tick)
    [died] = [e for e in logs if e["event"] == "engine_died"]
    assert (died["hold_id"], died["status"], died["reason"]) == (
        held.hold_id,
        -signal.SIGKILL,
        "killed by signal SIGKILL",
    )
    assert sup.ended() == {held.hold_id: "killed by signal SIGKILL"}
    record = EngineRecord.from_json(Store(tmp_path).record_path(held.hold_id).read_text())
    assert record.ended == "killed by signal SIGKILL"
    # the hold stays on the node (its job still holds it): still started, not started a second time
    beat = a.tick()
    assert beat.started == (held.hold_id,) and sup.pids() == {}
    # the heartbeat says so, and a worker's sweep writes it into the job's record
    assert beat.ended == {held.hold_id: "killed by signal SIGKILL"}
    client.store.snapshot()
    maintenance.sweep(client.store, force=True)
    # it died before it answered its health: it failed to start
    assert "failed to start (killed by signal SIGKILL)" in client.get(rec.job_id).reason

    # an agent started again reads the death from the record and starts nothing
    with capture_logs() as logs:
        again, sup2 = agent(client, tmp_path, wrap=standin(tmp_path))
        assert again.tick().started == (held.hold_id,)
    assert sup2.ended() == {held.hold_id: "killed by signal SIGKILL"}
    assert [e["event"] for e in logs if e["event"].startswith("engine")] == []
    client.release(rec.job_id)
    again.tick()
    assert sup2.ended() == {} and not Store(tmp_path).record_path(held.hold_id).exists()


def test_a_record_whose_pid_was_reused_is_not_adopted(tmp_path: Path, engines: list[int]) -> None:
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    engines.append(other.pid)
    stat = proc_stat(other.pid)
    assert stat is not None
    store = Store(tmp_path)
    record = EngineRecord(
        hold_id="j1:0:1",
        pid=other.pid,
        start_time=stat.start_time - 1,  # the engine that had this pid started earlier
        boot_id=BOOT,
        engine="llamacpp",
        command=["llama-server"],
        cards=[],
        log=str(tmp_path / "j1.log"),
        port=1,
    )
    store.save(record)
    with capture_logs() as logs:
        sup = Supervisor(tmp_path, boot_id=BOOT)
    assert [e["event"] for e in logs] == ["engine_died"]
    assert sup.ended() == {"j1:0:1": "gone while the agent was not running"} and sup.pids() == {}
    sup.stop("j1:0:1")  # released: its record goes, and the process that has the pid now is left alone
    assert not store.record_path("j1:0:1").exists() and other.poll() is None
    # on another boot the same pid and start time are another process too
    store.save(EngineRecord(**{**record.__dict__, "start_time": stat.start_time}))
    assert Supervisor(tmp_path, boot_id="boot-2").ended() == {"j1:0:1": "gone while the agent was not running"}
    assert Supervisor(tmp_path, boot_id=BOOT).pids() == {}  # the record now says it ended
    other.kill()
    other.wait()


def test_a_steady_footprint_goes_into_the_heartbeat(client: Client, tmp_path: Path, engines: list[int]) -> None:
    a, sup = agent(client, tmp_path, wrap=standin(tmp_path))
    _, held = place(client, a)
    a.tick()
    engines.extend(sup.pids().values())
    until(lambda: held.hold_id in a.tick().footprints, lambda: None)
    fp = a.tick().footprints[held.hold_id]
    assert (fp.engine, fp.source, fp.card_bytes) == ("llamacpp", "proc", ())
    assert fp.ram_bytes >= HOLD_MIB << 20 and fp.ram_peak_bytes >= fp.ram_bytes
    sent = sup.footprints()[held.hold_id]
    assert a.tick().footprints[held.hold_id] == fp and sup.footprints()[held.hold_id] is sent  # the same, again


# --- the command ----------------------------------------------------------------------------------------


def test_engines_run_starts_the_engine_on_path_and_log_starts_nothing(
    client: Client,
    redis_url: str,
    tmp_path: Path,
    engines: list[int],
    monkeypatch: pytest.MonkeyPatch,
    logging_restored: None,
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "llama-server"  # the stand-in under the engine's name, first on PATH
    fake.write_text(f'#!/bin/sh\nexec "{sys.executable}" -P "{STANDIN}" "$@" --hold-mib {HOLD_MIB} --tag {tmp_path}\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    once = ("--once", "--node-id", "cpu-1", "--gpu-class", "", "--redis-url", redis_url)
    run_from_args(agent_args(*once), reader=CpuReader())
    job = client.submit(request("llama-3-8b-gguf"))
    drain(client)
    hold = client.get(job).placement[0].hold_id

    run_from_args(agent_args(*once), reader=CpuReader())  # --engines log, the default: nothing started
    assert not (tmp_path / "xdg").exists()
    state = tmp_path / "state"
    run_from_args(agent_args(*once, "--engines", "run", "--state-dir", str(state)), reader=CpuReader())
    record = EngineRecord.from_json(Store(state).record_path(hold).read_text())
    engines.append(record.pid)
    assert Path(record.command[0]).name == "llama-server" and record.command[-4:-2] == ["--host", "127.0.0.1"]
    assert proc_stat(record.pid) is not None and not (tmp_path / "xdg").exists()
    # started again, it adopts the engine (same record, same pid) and starts no second one
    run_from_args(agent_args(*once, "--engines", "run", "--state-dir", str(state)), reader=CpuReader())
    assert EngineRecord.from_json(Store(state).record_path(hold).read_text()) == record
    # without --state-dir: under $XDG_STATE_HOME
    assert default_state_dir() == tmp_path / "xdg" / "modelplan" / "agent"
    assert default_state_dir({}) == Path.home() / ".local" / "state" / "modelplan" / "agent"


def test_a_negative_stop_grace_is_refused(logging_restored: None) -> None:
    with pytest.raises(InvalidInput, match="--stop-grace"):
        run_from_args(agent_args("--engines", "run", "--stop-grace", "-1", "--once", "--dry-run"), reader=CpuReader())
    assert agent_args("--engines", "run").engines == "run"
    with pytest.raises(SystemExit):
        agent_args("--engines", "spawn")


@dataclass
class GpuReader:
    """One H200, idle until ``busy`` is set (its engine took it)."""

    busy: bool = False

    def cards(self) -> list[Card]:
        used, procs = (20000, 1) if self.busy else (615, 0)
        return [Card(index=0, name="NVIDIA H200", uuid="GPU-0", total_mib=143771, used_mib=used, processes=procs)]

    def memory(self) -> HostMemory:
        return HostMemory(total_gb=125, free_gb=125)


def test_an_adopted_engine_keeps_its_cards_although_they_read_busy(
    client: Client, tmp_path: Path, engines: list[int]
) -> None:
    reader = GpuReader()
    sup1 = Supervisor(tmp_path, boot_id=BOOT, reader=reader, wrap=standin(tmp_path))
    first = Agent("gpu-1", reader, client, boot_id=BOOT, supervisor=sup1)
    first.tick()
    job = client.submit(request("llama-3.1-8b-instruct"))
    drain(client)
    hold = client.get(job).placement[0].hold_id
    first.tick()
    [pid] = sup1.pids().values()
    engines.append(pid)
    assert EngineRecord.from_json(Store(tmp_path).record_path(hold).read_text()).cards == [0]
    reader.busy = True  # the engine holds its card now

    sup2 = Supervisor(tmp_path, boot_id=BOOT, reader=reader, wrap=standin(tmp_path))
    again = Agent("gpu-1", reader, client, boot_id=BOOT, supervisor=sup2)
    with capture_logs() as logs:
        hb = again.tick()
    assert (hb.started, hb.free_gpus, again.started[hold].cards) == ((hold,), 0, (0,))
    assert "engine_start_deferred" not in [e["event"] for e in logs] and sup2.pids() == {hold: pid}


def test_deaths_and_stops_are_seen_while_redis_does_not_answer(
    client: Client, tmp_path: Path, engines: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, sup = agent(client, tmp_path, wrap=standin(tmp_path))
    _, held = place(client, a)
    a.tick()
    [pid] = sup.pids().values()
    engines.append(pid)

    def down(node_id: str) -> None:
        raise ConnectionError("Redis is down")

    monkeypatch.setattr(client, "held_on", down)
    os.kill(pid, signal.SIGKILL)

    def tick_without_redis() -> None:
        with pytest.raises(ConnectionError):
            a.tick()

    until(lambda: bool(sup.ended()), tick_without_redis)
    assert sup.ended() == {held.hold_id: "killed by signal SIGKILL"}
