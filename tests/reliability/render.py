"""Makes docs/RELIABILITY.md from the JSON lines the reliability suite wrote (``$MODELPLAN_RELIABILITY_OUT``).

python -m tests.reliability.render RESULTS.jsonl docs/RELIABILITY.md
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

INTRO = """# Reliability

What the reliability suite (`tests/reliability/`) ran, and what it found. Every figure below is from the
suite's own output on the machine named at the end: `scripts/reliability` runs it and writes this file
(`MODELPLAN_SOAK=1 scripts/reliability` for the longer runs). The default runs are short so that CI runs
them on every change.

The invariants, checked on one consistent read of Redis many times a second through every load and fault
run (`tests/reliability/invariants.py`):
- per node, cards held (reservations and holds for waiting jobs) ≤ cards it has;
- what is held on each node is exactly what the job records say they hold: no card counted twice, no hold
  without its job, no job without its hold;
- every job in exactly one state, its record and its state index agreeing;
- every waiting replica records why: its best option and the nodes that lack the room;
- no placed replica left on a node dropped from the pool; one silent but not yet handed off is let go
  by the workers' own sweeps (each load run waits for that before its workers stop);
- every acknowledged submit has its record;
- the counts heartbeats read to wake anyone (`pending:classes`) are the pending jobs' classes counted;
- at a quiet point at the end of each load run (no heartbeat or job change for a second), no waiting job
  has an option ranked equal to its best on the hardware that is free now: no card idles while a job it
  serves as well waits.
"""

SECURITY = """## Security

`tests/reliability/test_security.py` and `test_sentinel.py`, run with the rest:
- no pickle anywhere on the Redis path: pickled payloads put on the planning queue three ways fail
  without running (the payload's marker file never appears) and change no record;
- a Redis ACL user with only the commands and keys modelplan needs carries the whole flow, with an empty
  ACL log; a wrong password or a key pattern that does not cover the prefix is one line and exit 2;
- TLS only (`rediss://` with a CA) carries the whole flow, and another CA or plain text is refused;
- a Sentinel URL carries the whole flow to the master;
- ids with `:`, `*`, `..`, spaces, newlines and braces are refused everywhere they enter, and every key
  written is under the prefix or RQ's `rq:`;
- no password appears in any message or log line, the worker's included.

`tests/reliability/test_queue_guard.py` and `tests/worker/test_quarantine.py`:
- jobs naming `os.system`, `subprocess.call` or `builtins.eval`, queued with RQ and with raw Redis
  commands as the README's ACL user, are refused unrun (the marker file never appears), each logged once;
- two tenants' ACL users on one server: every write of one to the other's keys is denied, a job naming
  the other's prefix on its own queue is refused by its own worker, and nothing of the other changes;
- garbage planted in every kind of key (node, `nodes`, `held:{node}`, each `jobs:{state}`, `pending`, job
  records, a record of a newer schema): the next valid job is placed, the sweep goes on, each bad record
  is logged once and named in one line by `modelplan status`.
"""

SECTIONS = {
    "load": (
        "Load",
        "Seeded random runs: worker processes, jobs, heartbeats freeing and taking cards, "
        "releases and cancels, nodes leaving, returning and restarting.",
    ),
    "sigkill_mid_plan": (
        "Workers killed mid-plan",
        "Workers SIGKILLed while holding a claimed job; each killed job's time until another worker settled it.",
    ),
    "redis_kill_aof": (
        "Redis killed (SIGKILL) under AOF",
        "Submits at full speed, Redis SIGKILLed and restarted on its AOF: acknowledged submits present afterwards. "
        "What `everysec` can lose is what the kernel had not written to disk when the machine itself stops "
        "(about the last second of writes); a Redis process killed on a running machine loses nothing under "
        "either setting, since its writes are already in the kernel's cache. A machine crash is not simulated "
        "here.",
    ),
    "redis_away": ("Redis away for a while", "Redis stopped for two seconds under a worker and an agent."),
    "mirror_faults": (
        "Workers' mirrors of the pool under faults",
        "Three worker processes under load (a job submitted every 0.1 s, nodes' cards taken and given back "
        "outside modelplan so that jobs wait and are woken, releases), and one fault per run: two workers "
        "SIGKILLed and others started; `pool:changes` trimmed to 3 entries, then to none and deleted outright, "
        "each of the last two in one transaction with a node joining (a job that fits only on that node, "
        "submitted next, must be placed there); Redis SIGKILLed and restarted on its AOF; Redis restarted "
        "without persistence (its jobs lost, half the nodes never publishing again, two new ones joining). "
        "Afterwards, at a quiet point, each live worker's mirror, brought up to date as its next plan would "
        "bring it, is compared with a fresh read of the pool (`mirrors_equal_fresh`; `mirrors_caught_up`: "
        "those that went on from the stream rather than read the pool whole). `full_rereads`: the whole "
        "reads the workers logged (`pool_read_whole`) after their first, by reason; `placements` and `waits`: "
        "commits that placed a job or left it waiting; `woken`: replicas that wake-up passes placed; "
        "`planned_on_gone_nodes`: commits refused because the plan named a node that no longer publishes.",
    ),
    "failover": (
        "Redis failing over",
        "A master, a replica and three sentinels; two workers and three node agents through the sentinel "
        "URL, jobs submitted and released throughout. The replica is stopped (`DEBUG SLEEP`) and cut off "
        "while submits go on, the master is SIGKILLed, the replica promoted, the old master brought back "
        "as its replica. `wait_replicas` is `MODELPLAN_WAIT_REPLICAS`: with 1, a submit the lagging "
        "replica did not have is refused (`refused_not_replicated`, counted with those refused while Redis "
        "was away), never acknowledged and then lost; with 0 it is acknowledged, and `lost` counts what "
        "vanished with the old master. `double_booked`: a reservation an agent found on cards still in use "
        "(by its own count of the engines it runs, including those whose reservations vanished).",
    ),
    "bad_input": (
        "Bad input",
        "Generated serve requests, heartbeats, listings, configs and pools (with huge numbers, NaN, unicode, "
        "NUL, and ids full of `*`, `:`, spaces and newlines): each accepted, or refused with one line naming "
        "the field, and a refusal changes nothing stored; the accepted requests were then planned by a "
        "worker with no job failing.",
    ),
}


def _cell(v: Any) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{k} {n}" for k, n in v.items())
    if isinstance(v, list):
        return "; ".join(str(x) for x in v)
    return str(v)


def render(lines: list[dict[str, Any]]) -> str:
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for d in lines:
        by[d.pop("suite")].append(d)
    out = [INTRO]
    totals = {
        "jobs": sum(d.get("jobs", 0) for d in by["load"]),
        "violations": sum(d.get("violations", 0) for ds in by.values() for d in ds),
    }
    out.append(
        f"In all: {totals['jobs']} jobs in the load runs, "
        f"{sum(d.get('workers_killed', 0) for d in by['sigkill_mid_plan'])} workers killed mid-plan, "
        f"{len(by['redis_kill_aof'])} Redis kills, {len(by['redis_away'])} Redis outages; "
        f"invariant violations: {totals['violations']}.\n"
    )
    for suite in [*SECTIONS, *sorted(set(by) - set(SECTIONS))]:
        runs = by.get(suite)
        if not runs:
            continue
        title, what = SECTIONS.get(suite, (suite, ""))
        out.append(f"## {title}\n\n{what}\n")
        cols = sorted({k for d in runs for k in d})
        out.append("| " + " | ".join(cols) + " |")
        out.append("|" + " --- |" * len(cols))
        for d in runs:
            out.append("| " + " | ".join(_cell(d.get(c, "")) for c in cols) + " |")
        out.append("")
    out.append(SECURITY)
    out.append("## Machine\n")
    redis = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.strip()
    cpu = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ),
        "?",
    )
    cores = os.cpu_count()
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    out.append(f"{cpu}, {cores} cores, {mem:.0f} GiB; Python {platform.python_version()}; {redis.split(' sha=')[0]}.\n")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    source, target = Path(argv[1]), Path(argv[2])
    lines = [json.loads(ln) for ln in source.read_text().splitlines() if ln.strip()]
    target.write_text(render(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
