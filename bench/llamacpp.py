"""Starts a real llama-server on this machine's CPU as the planner would have it started, and measures what
it holds against what the plan counted.

For each context: the planner plans the GGUF's folder on a pool of one CPU node (this machine's RAM), the
CPU option for the file gives the command line (``producer.agent.engines.engine_command``, as the node
agent starts it), the server runs in the file's folder with that command line plus a loopback address and
port, and once ``/health`` answers it is sent one completion. The resident memory of its process tree is
read from ``/proc/PID/status``: ``VmRSS`` when loaded and after the completion (steady), ``VmHWM`` for the
peak, with the anonymous and file-backed parts apart (the weights are mapped from the file, so they count
as file-backed pages once read). One JSON line per context, the plan's ``measured`` and ``seed`` needs
beside them.

    scripts/measure-llamacpp --server PATH --model FILE.gguf [--context N]... [--timeout S]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner import ESTIMATES, NO_SETTINGS, Estimate, Option, parse_pool, plan, pool_nodes
from planner.constants import GIB
from planner.repository import repository_from_folder
from planner.settings import merged
from producer.agent.engines import engine_command
from producer.serve import request_from_repository
from worker.config import settings as deployment_settings

STATUS_FIELDS = ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem")


class MeasureError(Exception):
    """A run that could not be measured, in one line."""


def proc_status(pid: int) -> dict[str, int]:
    """The memory fields of ``/proc/PID/status``, in bytes; empty once the process is gone."""
    out: dict[str, int] = {}
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return out
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in STATUS_FIELDS:
            out[key] = int(rest.split()[0]) * 1024  # the kernel writes kB
    return out


def children(pid: int) -> list[int]:
    """The process's direct children, from each of its threads' ``children`` list."""
    kids: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:
        return kids
    for task in tasks:
        try:
            kids += [int(k) for k in (task / "children").read_text().split()]
        except FileNotFoundError:
            continue
    return kids


def tree(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    seen, todo = [], [pid]
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.append(p)
            todo += children(p)
    return seen


def tree_memory(pid: int) -> dict[str, int]:
    """Each ``STATUS_FIELDS`` figure summed over the process tree (``VmHWM`` summed is an upper bound on the
    tree's peak: its processes need not have peaked together)."""
    total = dict.fromkeys(STATUS_FIELDS, 0)
    for p in tree(pid):
        for k, v in proc_status(p).items():
            total[k] += v
    return total


@dataclass
class Sampler:
    """The tree's ``VmRSS`` sampled while it loads: the largest sum seen is a lower bound on its peak."""

    pid: int
    peak_rss: int = 0
    samples: list[int] = field(default_factory=list)

    def sample(self) -> dict[str, int]:
        m = tree_memory(self.pid)
        self.peak_rss = max(self.peak_rss, m["VmRSS"])
        self.samples.append(m["VmRSS"])
        return m


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _http(url: str, body: Mapping[str, Any] | None = None, timeout: float = 5.0) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, None


def server_version(server: str) -> str:
    """What ``llama-server --version`` says of its build (it writes it on standard error)."""
    r = subprocess.run([server, "--version"], capture_output=True, text=True, timeout=60, check=False)
    lines = [ln.strip() for ln in (r.stdout + r.stderr).splitlines() if ln.startswith("version")]
    return lines[0] if lines else "unknown"


def cpu_option(model: Path, context: int, estimate: Estimate) -> tuple[Option, list[str]]:
    """The plan's CPU option for ``model`` on a pool of this one machine, and the command line it names."""
    mem_gb, avail_gb = _meminfo_gb()
    pool = [{"node_id": "this-cpu", "gpus": 0, "free_gpus": 0, "host_mem_gb": mem_gb, "host_free_gb": avail_gb}]
    nodes = pool_nodes(parse_pool(json.dumps(pool), "pool"))
    repo = repository_from_folder(model.parent)
    settings = merged(NO_SETTINGS, deployment_settings())
    options = [o for o in plan(repo, nodes, context, estimate, settings) if o.cpu and o.artifact == model.name]
    if not options:
        raise MeasureError(f"{model}: the plan has no CPU option for it at context {context} on this machine")
    request = request_from_repository(repo, model=model.stem, context=context, model_path=str(model.resolve()))
    return options[0], engine_command(request, options[0])


def _meminfo_gb() -> tuple[int, int]:
    info = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, _, rest = line.partition(":")
        info[key] = int(rest.split()[0]) * 1024
    return info["MemTotal"] // GIB, info["MemAvailable"] // GIB


def stop(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


PROMPT_TOKENS = 1024
"""Each completion's prompt: two of llama-server's default 512-token micro-batches, so that the compute
buffer (sized for a full micro-batch, its pages resident only once written) is used whole, as a real
prompt of that length would; a few words would leave most of it untouched and the RSS low."""

N_PREDICT = 16
PROMPT_CHARS = "xyzwvutsrqponmlkjihgfedcba"
"""Each completion's prompt repeats one of these: distinct prompts share no prefix, as distinct users'
would, so the server's prompt cache keeps each one apart."""


def _wait_healthy(proc: subprocess.Popen[bytes], base: str, sampler: Sampler, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while True:
        sampler.sample()
        if proc.poll() is not None:
            raise MeasureError(f"llama-server exited with {proc.returncode} before it was healthy: see {log}")
        if time.monotonic() > deadline:
            raise MeasureError(f"llama-server not healthy within {timeout:.0f} s: see {log}")
        try:
            if _http(base + "/health")[0] == 200:
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)


def measure(
    server: str,
    model: Path,
    context: int,
    timeout: float = 300.0,
    log: Path | None = None,
    prompt_tokens: int = PROMPT_TOKENS,
    prompts: int = 1,
    extra: Sequence[str] = (),
) -> dict[str, Any]:
    """One run: start, wait for health, ``prompts`` completions one after another, read memory after each,
    stop. ``extra``: arguments added after the plan's (to try a setting the plan does not give). Returns
    the JSON line's fields."""
    model = model.resolve()
    needs = {e: cpu_option(model, context, e) for e in ESTIMATES}
    option, command = needs["measured"]
    if needs["seed"][1] != command:
        raise MeasureError("the measured and seed plans name different command lines")  # they size, not start
    port = free_port()
    argv = [server, *command[1:], *extra, "--host", "127.0.0.1", "--port", str(port)]
    log = log or model.with_suffix(f".c{context}.log")
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=model.parent, stdout=out, stderr=subprocess.STDOUT)
    answers: list[Any] = []
    after: list[int] = []
    try:
        sampler = Sampler(proc.pid)
        base = f"http://127.0.0.1:{port}"
        _wait_healthy(proc, base, sampler, timeout, log)
        loaded = sampler.sample()
        for i in range(prompts):
            # one character, one token (the small GGUF's vocabulary has single characters only; a real
            # one tokenizes it into fewer, and "prompt_tokens" says how many it took)
            prompt = PROMPT_CHARS[i % len(PROMPT_CHARS)] * min(prompt_tokens, context - N_PREDICT - 8)
            body = {"prompt": prompt, "n_predict": N_PREDICT, "temperature": 0}
            status, answer = _http(base + "/completion", body, timeout)
            if status != 200:
                raise MeasureError(f"completion {i + 1} was answered {status}: see {log}")
            answers.append(answer or {})
            time.sleep(1.0)
            after.append(sampler.sample()["VmRSS"])
        steady = sampler.sample()
        processes = len(tree(proc.pid))
    finally:
        stop(proc)
    took_peak = max(sampler.peak_rss, steady["VmHWM"])
    measured, seed = option.need_gb * GIB, needs["seed"][0].need_gb * GIB
    return {
        "model": model.name,
        "model_bytes": model.stat().st_size,
        "context": context,
        "version": server_version(server),
        "command": [Path(server).name, *command[1:], *extra],
        "prompt_tokens": answers[0].get("tokens_evaluated") if answers else None,
        "completion_tokens": answers[0].get("tokens_predicted") if answers else None,
        "rss_loaded_bytes": loaded["VmRSS"],
        "rss_after_each_completion_bytes": after,
        "rss_steady_bytes": steady["VmRSS"],
        "rss_anon_bytes": steady["RssAnon"],
        "rss_file_bytes": steady["RssFile"],
        "rss_peak_bytes": took_peak,
        "processes": processes,
        "measured_need_bytes": round(measured),
        "seed_need_bytes": round(seed),
        "measured_over_peak": round(measured / took_peak, 3),
        "seed_over_peak": round(seed / took_peak, 3),
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scripts/measure-llamacpp", description=__doc__.split("\n\n")[0])
    p.add_argument("--server", required=True, help="the llama-server binary")
    p.add_argument("--model", required=True, type=Path, help="a GGUF file (bench/tinygguf.py makes one)")
    p.add_argument("--context", type=int, action="append", help="tokens of context (repeatable; default 4096)")
    p.add_argument("--prompt-tokens", type=int, default=PROMPT_TOKENS, help="each completion's prompt length")
    p.add_argument("--prompts", type=int, default=1, help="completions, each with a prompt of its own (default 1)")
    p.add_argument(
        "--extra",
        action="append",
        default=[],
        help="an argument added after the plan's (repeatable; e.g. =--cache-ram)",
    )
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for health and the completion")
    a = p.parse_args(argv)
    problems = _check_args(a.server, a.model, a.context or [4096])
    problems += [
        f"--{k} {v}: must be at least 1"
        for k, v in (("prompt-tokens", a.prompt_tokens), ("prompts", a.prompts))
        if v < 1
    ]
    if problems:
        print(f"measure-llamacpp: {problems[0]}", file=sys.stderr)
        return 2
    for context in a.context or [4096]:
        try:
            run = measure(a.server, a.model, context, a.timeout, None, a.prompt_tokens, a.prompts, a.extra)
            print(json.dumps(run), flush=True)
        except MeasureError as e:
            print(f"measure-llamacpp: {e}", file=sys.stderr)
            return 1
    return 0


def _check_args(server: str, model: Path, contexts: Iterable[int]) -> list[str]:
    problems = []
    if not (os.path.isfile(server) and os.access(server, os.X_OK)):
        problems.append(f"--server {server}: not an executable file")
    if not model.is_file():
        problems.append(f"--model {model}: no such file")
    elif model.suffix != ".gguf":
        problems.append(f"--model {model}: not a .gguf file")
    problems += [f"--context {c}: must be at least 1" for c in contexts if c < 1]
    return problems


if __name__ == "__main__":
    sys.exit(main())
