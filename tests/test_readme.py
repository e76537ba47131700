"""The documents' examples, run as a person would run them: README.md's quick start, with how long the
tests take, and its dry run; the operating guide's "Running it" block, on a Redis of its own, which keeps
its node in the pool; the dry runs in the command reference, whose printed output must match; and the
client guide's Python example, its Redis commands, which follow a job through every state, and its
stream loop, which follows every change rather than returning once."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from worker.constants import NODE_TTL_MS

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
OPERATING = ROOT / "docs" / "OPERATING.md"
CLI = ROOT / "docs" / "CLI.md"
CLIENTS = ROOT / "docs" / "CLIENTS.md"
DEFAULT_URL = "redis://127.0.0.1:6379/0"
"""The URL the client guide's examples name, swapped for the test's Redis."""


def block_after(doc: Path, heading: str, language: str) -> str:
    """The first ``language`` code block after ``heading`` in ``doc``."""
    text = doc.read_text(encoding="utf-8")
    assert heading in text, f"{doc.name} has no {heading!r}"
    rest = text.split(heading, 1)[1]
    match = re.search(rf"```{language}\n(.*?)```", rest, re.S)
    assert match is not None, f"no {language} block after {heading!r} in {doc.name}"
    return match.group(1)


def test_the_quick_start_names_scripts_that_run_here() -> None:
    """The quick start's commands exist and are executable, and CI runs the test command."""
    block = block_after(README, "## Quick start", "sh")
    commands = [line.split("#")[0].split()[0] for line in block.splitlines() if line.strip()]
    assert commands == ["scripts/demo", "scripts/test"], commands
    for command in commands:
        assert os.access(ROOT / command, os.X_OK), f"{command} is not an executable file"
    assert "scripts/test" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


TIMED = re.compile(r"about ([\d.,]+) (minutes?|s)\b[^()]*\(`time (scripts/test[^`]*)`")
"""A duration in the front page, and the command it was read from, named beside it."""


def test_the_quick_start_says_how_long_the_tests_take_and_how_to_run_a_part() -> None:
    """``scripts/test`` takes minutes beside a demo of seconds: the front page says how long, by a figure
    from the command named beside it, and how long a part takes, run the same way."""
    text = README.read_text(encoding="utf-8").split("## Quick start", 1)[1].split("\n## ", 1)[0]
    timed = {command.strip(): (figure, unit) for figure, unit, command in TIMED.findall(text)}
    assert "scripts/test" in timed, "README.md's quick start does not say how long scripts/test takes"
    assert timed["scripts/test"][1].startswith("minute"), timed
    parts = [command for command in timed if command != "scripts/test"]
    assert parts, "README.md's quick start does not say how long a part of the tests takes, nor how to run one"
    for command in parts:
        paths = [arg for arg in command.split()[1:] if not arg.startswith("-")]
        assert paths and all((ROOT / p).exists() for p in paths), f"{command} names no test folder or file here"


def test_the_duration_check_reads_a_figure_only_with_its_command() -> None:
    said = "takes about 6 minutes (`time scripts/test`); a part about 40 s (`time scripts/test tests/planner -q`)"
    assert TIMED.findall(said) == [("6", "minutes", "scripts/test"), ("40", "s", "scripts/test tests/planner -q")]
    assert TIMED.findall("takes about 6 minutes on a good day (measured once)") == []


def run_shell(block: str) -> str:
    out = subprocess.run(["bash", "-c", f"set -e\n{block}"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_readmes_dry_run_prints_its_options() -> None:
    said = run_shell(block_after(README, "To see what the planner makes of a model", "sh"))
    assert said.splitlines()[0].split()[:3] == ["#", "artifact", "bits"], said


def test_each_dry_run_in_the_command_reference_prints_what_it_shows() -> None:
    """Every ``modelplan plan`` block in docs/CLI.md is followed by its output, figure for figure."""
    text = CLI.read_text(encoding="utf-8")
    pairs = re.findall(r"```sh\n(\.venv/bin/modelplan plan .*?)```\n\n```\n(.*?)```", text, re.S)
    assert len(pairs) >= 2, "docs/CLI.md lost its dry runs"
    for command, shown in pairs:
        assert run_shell(command) == shown, command


def test_running_it_keeps_the_node_in_the_pool_past_its_ttl(tmp_path: Path) -> None:
    """The operating guide's block as written, on a fresh clone: it starts a Redis of its own on a free
    port (not whatever answers on 6379, someone else's on a shared machine), keeps the worker's log lines
    out of the terminal, and stops what it started."""
    block = block_after(OPERATING, "## Running it", "sh")
    assert "redis-server" in block and ":6379" not in block, "the block must start a Redis of its own"
    wait_s = NODE_TTL_MS / 1000 + 3  # past the node's TTL and the next sweep
    looked = '.venv/bin/modelplan job "$job"'
    assert looked in block
    script = "set -e\n" + block.replace(looked, f"sleep {wait_s}\n{looked}", 1)
    # files, not pipes: were the block to leave a process running, it would hold them open
    out_path, err_path = tmp_path / "out", tmp_path / "err"
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # where the block's mktemp puts its Redis and logs
    env.pop("MODELPLAN_REDIS_URL", None)
    with out_path.open("w") as out, err_path.open("w") as err:
        proc = subprocess.Popen(
            ["bash", "-c", script], cwd=ROOT, stdout=out, stderr=err, env=env, start_new_session=True
        )
        try:
            code = proc.wait(timeout=wait_s + 40)
            for _ in range(50):  # what the block stopped may take a moment to go (a heartbeat under way)
                try:
                    os.killpg(proc.pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
        finally:
            with contextlib.suppress(ProcessLookupError):  # none left: the block stopped all it started
                os.killpg(proc.pid, signal.SIGTERM)  # whatever the block started and left running
            proc.wait()
    said = out_path.read_text()
    assert code == 0, err_path.read_text()
    assert err_path.read_text() == "", "the block wrote to the terminal's standard error"
    first = next(line for line in said.splitlines() if line.startswith("job "))  # then the release's
    assert re.fullmatch(r"job [0-9a-f]{32}: placed \(placed 1 of 1\)", first), said
    assert not [line for line in said.splitlines() if line.startswith("{")], f"log lines in the terminal: {said}"
    logs = list(tmp_path.glob("*/worker.log"))
    assert len(logs) == 1, sorted(str(p) for p in tmp_path.rglob("*"))
    [log] = logs
    assert '"event"' in log.read_text(), "the worker's log file holds no log line"


@pytest.mark.parametrize("free, last", [(1, "placed"), (0, "waiting")])
def test_the_python_example_runs_as_written(redis_url: str, tmp_path: Path, free: int, last: str) -> None:
    """The client guide's Python block, as a file a person would run from the repository, against a
    running worker: it prints the job's states up to placed, or up to waiting where its card is busy (and
    then stops watching), and releases the job."""
    from producer import Client
    from tests.worker.helpers import hb
    from tests.worker.processes import WorkerProcess
    from worker.records import JobState

    code = block_after(CLIENTS, "## From Python", "python").replace(DEFAULT_URL, redis_url)
    client = Client.from_url(redis_url)
    client.heartbeat(hb("gpu-a", gpus=1, free=free))
    worker = WorkerProcess(redis_url, tmp_path, "w")
    try:
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=100)
    finally:
        worker.stop()
    assert out.returncode == 0, out.stderr
    states = [line.split()[0] for line in out.stdout.splitlines()]
    assert states[0] == "queued" and states[-1] == last, out.stdout
    assert client.get("svc-a-42").state is JobState.RELEASED
    client.redis.close()


def wait_for_blocked_read(r: redis.Redis, proc: subprocess.Popen[str], give_up_s: float = 30) -> None:
    """Until a client of ``r``'s server waits in a blocking XREAD (the example's reader, the test's only
    other client); an AssertionError if ``proc`` ends first or none does within ``give_up_s``."""
    deadline = time.monotonic() + give_up_s
    while not any(c["cmd"] == "xread" and "b" in c["flags"] for c in r.client_list()):
        assert proc.poll() is None, f"the example ended ({proc.returncode}) instead of reading again"
        assert time.monotonic() < deadline, f"the example did not wait on the stream within {give_up_s} s"
        time.sleep(0.01)


def test_the_stream_example_follows_every_change(redis_url: str) -> None:
    code = block_after(CLIENTS, "To follow every change as it happens", "python").replace(DEFAULT_URL, redis_url)
    proc = subprocess.Popen(
        [sys.executable, "-u", "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        sent, got = [], []
        assert proc.stdout is not None
        for n in range(3):
            # it reads from "$", what arrives once it waits: each change is sent once it waits again
            wait_for_blocked_read(r, proc)
            sent.append(r.xadd("modelplan:events", {"job_id": f"j{n}", "state": "placed", "version": 1, "reason": "x"}))
            got.append(proc.stdout.readline().split())
    finally:
        proc.kill()
        proc.communicate()
        r.close()
    assert [line[:3] for line in got] == [[i, f"j{n}", "placed"] for n, i in enumerate(sent)]


def commands(block: str) -> list[str]:
    """A shell block's commands as a person types them: each line, or the lines of a loop together, without
    the comment after two spaces."""
    out: list[str] = []
    pending = ""
    for line in block.splitlines():
        if not line.strip():
            continue
        pending += line.split("  #")[0].rstrip() + "\n"
        if subprocess.run(["bash", "-n", "-c", pending], capture_output=True).returncode == 0:
            out.append(pending.strip())
            pending = ""
    assert not pending, f"an unfinished command: {pending!r}"
    return out


def test_the_redis_cli_block_drives_a_job_to_released(redis_url: str, tmp_path: Path) -> None:
    """The client guide's "any language" block, command by command as a person would type it: each once
    the one before has had its effect. Its read of the job's stream starts before any worker runs, so it
    waits for the first change, and must follow the job through every state from there."""
    import json
    import shutil

    from producer import Client
    from tests.worker.helpers import hb
    from tests.worker.processes import WorkerProcess

    if shutil.which("redis-cli") is None:
        pytest.skip("redis-cli is not installed")
    block = block_after(CLIENTS, "## From any language", "sh").replace(DEFAULT_URL, redis_url)
    client = Client.from_url(redis_url)
    client.heartbeat(hb("gpu-a", gpus=2))
    worker: WorkerProcess | None = None

    def record() -> dict[str, object]:
        raw = client.redis.get("modelplan:job:svc-b-7")
        return json.loads(raw) if raw else {}

    def wait(check: object, what: str) -> None:
        deadline = time.monotonic() + 20
        while not check():  # type: ignore[operator]
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.05)

    prelude = ""
    try:
        for command in commands(block):
            if re.fullmatch(r'[A-Za-z_]+=("[^"]*"|\S+)', command):  # a variable the later commands use
                prelude += command + "\n"
                continue
            proc = subprocess.Popen(
                ["bash", "-c", prelude + command], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            if "XREAD" in command:
                wait_for_blocked_read(client.redis, proc)
                worker = WorkerProcess(redis_url, tmp_path, "w")
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0 and "ERR" not in out, (command, out, err)
            if "XREAD" in command:
                assert {"queued", "planning", "placed"} <= set(out.split()), out
                assert record().get("state") == "placed"
            elif "scale" in command:
                wait(lambda: record().get("wanted") == 2, "scaled")
            elif "release" in command:
                wait(lambda: record().get("state") == "released", "released")
    finally:
        if worker is not None:
            worker.stop()
        client.redis.close()
    assert worker is not None, "the block has no XREAD of the job's stream"
    assert record()["state"] == "released"
