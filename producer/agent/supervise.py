"""The ``run`` start hook (``modelplan agent --engines run``): each hold placed on the node gets its engine
as a child process, supervised across ticks and across restarts of the agent.

- ``start`` launches the node's command line (``node_command`` plus ``--host BIND --port N`` on a free
  port; llama-server and ``vllm serve`` both take these; ``BIND`` is 127.0.0.1 unless the agent advertises
  another address, ``--advertise``; and ``--api-key KEY``, the key its hold in ``held:{node}`` carries,
  kept out of the logs) with ``engine_env(cards)`` added to the environment, in a process group of its
  own, its output to ``logs/{hold_id}.log``, and writes ``holds/{hold_id}.json`` (``engine_state``). It
  returns once the process is launched.
- ``poll`` (each tick) asks a launched engine's ``GET /health`` until it answers 200 (``engine_ready``),
  reads the model name it serves (``GET /v1/models``), then measures what it holds (``measuring``);
  notices an engine that exited while its hold is still on the node (``engine_died``); finishes stops;
  and stops an engine whose hold is no longer on the node (one released while the agent was not running).
- An engine that dies after it served is started again, up to ``max_restarts`` times, after
  ``RESTART_BACKOFF_S`` doubled each time (``engine_restarting``); past that it has ``ended``. One that dies
  before it ever served has failed to start: the reason is its last lines, or the line in which it said
  it ran out of memory (``engine_log.out_of_memory``), which the workers plan again from.
- ``engines()`` says what each engine is doing, for the heartbeat (``worker.conditions.EngineReport``):
  starting, serving (at ``ADVERTISE:PORT``, the address the agent advertises), ended or failed.
- ``stop`` sends TERM to the engine's process group; ``poll`` sends KILL once ``stop_grace`` seconds pass
  and removes the record once no process of the group is left.
- A new ``Supervisor`` adopts each record whose process is still the same one (same pid, same start time
  in ``/proc/PID/stat``, same boot): ``start`` then launches nothing. A record whose process is gone is an
  engine that died.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from producer.agent.endpoints import HOST, free_port, healthy, said_text, served_model, url_host
from producer.agent.engine_log import engine_version, last_lines, out_of_memory
from producer.agent.engine_state import EngineRecord, Store, proc_stat, read_log, read_tail
from producer.agent.engines import engine_env, node_command, replica_of
from producer.agent.footprint import Steady, measure
from producer.agent.measuring import Measure, Steadiness, SteadinessFactory
from worker import logs
from worker.conditions import EngineReport
from worker.footprints import Footprint
from worker.ids import job_of_hold
from worker.records import JobRecord, Reservation

log = logs.get_logger("modelplan.agent")

DEFAULT_STOP_GRACE_S = 10.0

DEFAULT_MAX_RESTARTS = 3
"""An engine that died after serving is started again this many times: a crash now and then is ridden
over, one that dies at every start is said to have ended rather than started for ever."""

RESTART_BACKOFF_S = 2.0
"""The wait before the first restart, doubled for each after it (2, 4, 8 s): long enough for the cards'
memory to be let go by the dead process, short beside what a reload takes."""

REASON_LINES = 3
"""How many of a failed engine's last log lines its reason quotes."""

REASON_CHARS = 400
"""The most a reason may say (``worker.conditions.REASON_PATTERN``)."""


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "exited (status unknown: the process was not started by this agent)"
    if code < 0:
        return (
            f"killed by signal {signal.Signals(-code).name}" if -code in signal.valid_signals() else f"signal {-code}"
        )
    return f"exited with status {code}"


def spawn(command: list[str], env: dict[str, str], log_path: Path) -> int:
    """Start ``command`` in a session and process group of its own (TERM and KILL to the group reach
    every process it starts), standard output and error appended to ``log_path``; its pid. Not a
    ``subprocess.Popen``: the engine outlives the agent, and its exit status is collected with
    ``waitpid`` by whichever supervisor started it."""
    out = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        actions = [(os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, out, 1), (os.POSIX_SPAWN_DUP2, out, 2)]
        return os.posix_spawnp(command[0], command, env, file_actions=actions, setsid=True)
    finally:
        os.close(out)
        os.close(null)


@dataclass
class _Engine:
    record: EngineRecord
    child: bool = False  # started by this supervisor: its exit status can be collected (waitpid)
    reaped: bool = False
    deadline: float = 0.0  # when a stopping engine gets KILL
    killed: bool = False
    steady: Steadiness | None = None
    sent: Footprint | None = None
    status: int | None = None  # the exit status, once collected
    restart_at: float | None = None  # when a dead engine that served is started again


class Supervisor:
    """The engines of this node's holds. ``wrap`` turns the engine's command line into the one run (tests
    run a stand-in engine with it); ``measure`` and ``steadiness`` say what an engine holds; ``models_dir``
    is where the agent's ``--models-dir`` keeps models a request names no place for."""

    def __init__(
        self,
        state_dir: Path,
        *,
        boot_id: str,
        reader: Any = None,
        stop_grace: float = DEFAULT_STOP_GRACE_S,
        wrap: Callable[[list[str]], list[str]] = list,
        measure: Measure = measure,
        steadiness: SteadinessFactory = Steady,
        bind: str = HOST,
        advertise: str | None = None,
        max_restarts: int = DEFAULT_MAX_RESTARTS,
        restart_backoff: float = RESTART_BACKOFF_S,
        models_dir: str | None = None,
    ) -> None:
        self.store = Store(state_dir)
        self.models_dir = models_dir
        self.bind = bind
        self.advertise = advertise if advertise is not None else bind
        self.max_restarts = max_restarts
        self.restart_backoff = restart_backoff
        self.boot_id = boot_id
        self.reader = reader
        self.stop_grace = stop_grace
        self.wrap = wrap
        self.measure = measure
        self.steadiness = steadiness
        self._engines: dict[str, _Engine] = {}
        self.api_keys: dict[str, str] = {}
        """The API key of each hold on the node, as ``held:{node}`` gives it (the agent sets it each tick)."""
        self._adopt()

    # --- what the agent reads -------------------------------------------------------------------------

    def ended(self) -> dict[str, str]:
        """The holds whose engine is gone while the hold is still on the node, with why."""
        return {h: e.record.ended for h, e in self._engines.items() if e.record.ended and not e.record.stopping}

    def engines(self) -> dict[str, EngineReport]:
        """What each engine not told to stop is doing, as the heartbeat says it."""
        out = {}
        for hold, eng in self._engines.items():
            rec = eng.record
            if rec.stopping:
                continue
            if rec.ended:
                failed = not rec.served
                out[hold] = EngineReport(
                    condition="failed" if failed else "ended",
                    reason=said_text(rec.ended, REASON_CHARS),
                    out_of_memory=failed and bool(rec.out_of_memory),
                    restarts=rec.restarts,
                    version=rec.version,
                )
            elif rec.ready:
                endpoint = f"{url_host(self.advertise)}:{rec.port}"
                out[hold] = EngineReport(condition="serving", endpoint=endpoint, model=rec.model, restarts=rec.restarts)
            else:
                out[hold] = EngineReport(condition="starting", restarts=rec.restarts)
        return out

    def footprints(self) -> dict[str, Footprint]:
        """What each running engine was measured to hold, once steady: the same object until it changes."""
        return {h: e.sent for h, e in self._engines.items() if e.sent is not None and not e.record.ended}

    def pids(self) -> dict[str, int]:
        """The process (group leader) of each engine that runs."""
        return {h: e.record.pid for h, e in self._engines.items() if not e.record.ended}

    def cards_of(self, hold_id: str) -> tuple[int, ...] | None:
        """The cards of the engine already there for ``hold_id`` (adopted, or one that died), else None."""
        eng = self._engines.get(hold_id)
        return tuple(eng.record.cards) if eng is not None and not eng.record.stopping else None

    def ready(self, hold_id: str) -> bool:
        eng = self._engines.get(hold_id)
        return eng is not None and eng.record.ready

    # --- hooks ----------------------------------------------------------------------------------------

    def start(self, job: JobRecord, reservation: Reservation, cards: tuple[int, ...]) -> None:
        """The start hook: launch the hold's engine, unless one is already there for it."""
        hold = reservation.hold_id
        if hold in self._engines and not self._engines[hold].record.stopping:
            return  # adopted, or it died: not started a second time
        replica = replica_of(job, hold)
        if replica is None or replica.option is None:
            raise ValueError(f"hold {hold!r} is not a replica of job {job.job_id!r} with an option")
        option = replica.option
        port = free_port(self.bind)
        command = self.wrap(
            [*node_command(job, reservation, self.models_dir), "--host", self.bind, "--port", str(port)]
        )
        self.store.ensure()
        log_path = self.store.log_path(hold)
        api_key = self.api_keys.get(hold, "")
        run = [*command, "--api-key", api_key] if api_key else command
        pid = spawn(run, {**os.environ, **engine_env(cards)}, log_path)
        stat = proc_stat(pid)
        record = EngineRecord(
            hold_id=hold,
            pid=pid,
            start_time=stat.start_time if stat is not None else 0,
            boot_id=self.boot_id,
            engine=option.engine,
            command=command,
            cards=list(cards),
            log=str(log_path),
            port=port,
            api_key=api_key,
        )
        self.store.save(record)
        self._engines[hold] = _Engine(record, child=True, steady=self.steadiness())
        log.info(
            "engine_launched",
            job_id=job.job_id,
            hold_id=hold,
            pid=pid,
            port=port,
            cards=list(cards),
            log=str(log_path),
            command=command,
            api_key="given" if api_key else "none",
        )

    def stop(self, hold_id: str, cards: tuple[int, ...] = ()) -> None:
        """The stop hook: TERM to the engine's process group (KILL comes from ``poll`` after the grace)."""
        eng = self._engines.get(hold_id)
        if eng is None:
            self.store.remove(hold_id)
            return
        if eng.record.ended or not self._alive(eng):
            self._forget(hold_id, "engine_stopped")
            return
        if eng.record.stopping:
            return
        eng.record.stopping = True
        eng.deadline = time.monotonic() + self.stop_grace
        self.store.save(eng.record)
        self._signal(eng, signal.SIGTERM)
        log.info(
            "engine_stopping", job_id=job_of_hold(hold_id), hold_id=hold_id, pid=eng.record.pid, grace_s=self.stop_grace
        )

    # --- each tick ------------------------------------------------------------------------------------

    def poll(self, on_node: Collection[str] | None = None) -> None:
        """Finish stops, notice deaths, ask for health, measure; stop the engines of holds not in
        ``on_node`` (when given)."""
        for hold, eng in list(self._engines.items()):
            if eng.record.stopping:
                self._finish_stop(hold, eng)
            elif on_node is not None and hold not in on_node:
                log.warning("engine_not_on_node", hold_id=hold, pid=eng.record.pid)
                self.stop(hold)
            elif eng.record.ended:
                continue
            elif eng.restart_at is not None:
                if time.monotonic() >= eng.restart_at:
                    self._restart(hold, eng)
            elif not self._alive(eng):
                self._died(hold, eng)
            elif not eng.record.ready:
                if healthy(eng.record.port, host=self.bind):
                    eng.record.ready = eng.record.served = True
                    found = served_model(eng.record.port, host=self.bind, api_key=eng.record.api_key)
                    eng.record.model = found or eng.record.model
                    self.store.save(eng.record)
                    log.info(
                        "engine_ready", hold_id=hold, pid=eng.record.pid, port=eng.record.port, model=eng.record.model
                    )
            else:
                self._measure(hold, eng)

    # --- inside ---------------------------------------------------------------------------------------

    def _adopt(self) -> None:
        for record in self.store.load():
            eng = _Engine(record, steady=self.steadiness())
            alive = self._alive(eng)
            if record.stopping and not alive:
                self.store.remove(record.hold_id)
                continue
            self._engines[record.hold_id] = eng
            if record.stopping:
                eng.deadline = time.monotonic() + self.stop_grace
                self._signal(eng, signal.SIGTERM)
            elif alive:
                log.info("engine_adopted", hold_id=record.hold_id, pid=record.pid, port=record.port)
            elif not record.ended:
                self._died(record.hold_id, eng, "gone while the agent was not running")

    def _alive(self, eng: _Engine) -> bool:
        """Whether the engine's leader is still the process started (pid, start time, boot)."""
        if eng.child:
            if self._reap(eng):
                return False
            if eng.child:  # not collected elsewhere: it runs
                return True
        if eng.reaped:
            return False
        rec = eng.record
        stat = proc_stat(rec.pid)
        return (
            rec.boot_id == self.boot_id and stat is not None and stat.start_time == rec.start_time and stat.state != "Z"
        )

    def _reap(self, eng: _Engine) -> bool:
        """For an engine this supervisor started: whether it has exited (its status collected once)."""
        if eng.reaped:
            return True
        try:
            pid, status = os.waitpid(eng.record.pid, os.WNOHANG)
        except ChildProcessError:  # collected elsewhere: judged by /proc from now on
            eng.child = False
            return False
        if pid == 0:
            return False
        eng.status, eng.reaped, eng.child = os.waitstatus_to_exitcode(status), True, False
        return True

    def _group_gone(self, eng: _Engine) -> bool:
        if eng.child:
            self._reap(eng)  # a leader not waited for is a zombie, which still counts as a member
        try:
            os.killpg(eng.record.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False

    def _signal(self, eng: _Engine, sig: signal.Signals) -> None:
        # only a group whose leader is still the process started: a reused pid is someone else's
        if not eng.child and not self._alive(eng):
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(eng.record.pid, sig)

    def _finish_stop(self, hold: str, eng: _Engine) -> None:
        started_here = eng.child or eng.reaped
        # an adopted leader that is gone (or a zombie of the agent that started it) ends the stop
        if self._group_gone(eng) or (not started_here and not self._alive(eng)):
            self._forget(hold, "engine_stopped")
        elif not eng.killed and time.monotonic() >= eng.deadline:
            eng.killed = True
            log.warning("engine_killed", hold_id=hold, pid=eng.record.pid, grace_s=self.stop_grace)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(eng.record.pid, signal.SIGKILL)

    def _forget(self, hold: str, event: str) -> None:
        eng = self._engines.pop(hold)
        self.store.remove(hold)
        log.info(event, hold_id=hold, pid=eng.record.pid, status=eng.status)

    def _died(self, hold: str, eng: _Engine, why: str = "") -> None:
        rec = eng.record
        reason = why or _exit_reason(eng.status)
        text = read_tail(Path(rec.log))
        rec.version = engine_version(rec.engine, read_log(Path(rec.log))) or rec.version
        eng.sent = None
        restart = rec.served and not why and rec.restarts < self.max_restarts
        if restart:
            rec.ready = False
            eng.restart_at = time.monotonic() + self.restart_backoff * 2**rec.restarts
            rec.restarts += 1
        elif not rec.served:
            # never served: why is in its own words, the out-of-memory line first
            rec.out_of_memory = out_of_memory(rec.engine, text)
            said = rec.out_of_memory or " | ".join(last_lines(text, REASON_LINES))
            rec.ended = f"{reason}: {said}" if said else reason
        else:
            rec.ended = reason if not rec.restarts else f"{reason} (after {rec.restarts} restarts)"
        self.store.save(rec)
        log.error(
            "engine_restarting" if restart else "engine_died",
            job_id=job_of_hold(hold),
            hold_id=hold,
            pid=rec.pid,
            status=eng.status,
            reason=rec.ended or reason,
            restarts=rec.restarts,
            out_of_memory=bool(rec.out_of_memory),
            log=rec.log,
        )
        # what it started may outlive it (vLLM's workers): the group is stopped too
        if eng.reaped:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(rec.pid, signal.SIGTERM)

    def _restart(self, hold: str, eng: _Engine) -> None:
        """Start a dead engine that served again, on its cards and port, its log appended to."""
        rec = eng.record
        eng.restart_at = None
        pid = spawn(rec.argv(), {**os.environ, **engine_env(tuple(rec.cards))}, Path(rec.log))
        stat = proc_stat(pid)
        rec.pid, rec.start_time = pid, stat.start_time if stat is not None else 0
        self.store.save(rec)
        self._engines[hold] = _Engine(rec, child=True, steady=self.steadiness())
        log.info("engine_restarted", job_id=job_of_hold(hold), hold_id=hold, pid=pid, restarts=rec.restarts)

    def _measure(self, hold: str, eng: _Engine) -> None:
        rec = eng.record
        try:
            figure = self.measure([rec.pid], tuple(rec.cards), rec.engine, read_log(Path(rec.log)), self.reader)
        except Exception:
            log.exception("footprint_failed", hold_id=hold)
            return
        if eng.steady is None:
            eng.steady = self.steadiness()
        sent = eng.steady.update(figure)
        if sent is not None and sent is not eng.sent:
            eng.sent = sent
            log.info("footprint_measured", hold_id=hold, **sent.model_dump(mode="json"))
