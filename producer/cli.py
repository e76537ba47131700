"""The ``modelplan`` command."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import redis

from planner import (
    DEFAULT_CONTEXT,
    ESTIMATES,
    NO_SETTINGS,
    InvalidInput,
    ModelplanError,
    parse_pool,
    plan,
    pool_nodes,
)
from planner.settings import merged
from producer import agent, clients, operator
from producer.client import Client, request_from_repository
from producer.constants import METRICS_ADDR
from producer.limits import read_bounded
from producer.named import load_repository
from producer.refusals import refusals
from producer.render import beat_text, estimates_text, job_text, options_table, settings_text, status_text
from producer.settingsargs import add_settings_args, settings_from_args
from worker.beats import Beat
from worker.config import CLIENT_ID_ENV, PREFIX_ENV, REDIS_URL_ENV, configure_logging, estimate, redact, redis_url
from worker.config import settings as deployment_settings
from worker.constants import DEFAULT_PREFIX, DEFAULT_REDIS_URL, PRIORITY_MAX
from worker.errors import RedisForbidden, RedisUnavailable, cli_words, redis_failure
from worker.logs import get_logger
from worker.records import JobState, parse_heartbeat

T = TypeVar("T")


def cmd_plan(args: argparse.Namespace) -> int:
    try:
        pool_text = read_bounded(args.pool, "--pool", "pool_bytes").decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidInput(args.pool, "--pool", f"cannot be read: {e}") from e
    nodes = pool_nodes(parse_pool(pool_text, args.pool))
    repo = load_repository(args)
    chosen = estimate(args.estimate)
    settings = merged(settings_from_args(args) or NO_SETTINGS, deployment_settings())
    by_estimate = {e: plan(repo, nodes, args.context, e, settings) for e in ESTIMATES}
    if args.json:
        print(json.dumps([o.to_json() for o in by_estimate[chosen]], indent=2))
    else:
        print(options_table(by_estimate[chosen]))
        for note in repo.notes:
            print(f"note: {note}")
        print()
        print(estimates_text(by_estimate, chosen))
        started = settings_text(by_estimate[chosen])
        if started:
            print()
            print("each option sized for the engine started with:\n" + started)
    return 0


def _client(args: argparse.Namespace) -> Client:
    return Client.from_url(args.redis_url, args.prefix, client_id=getattr(args, "client_id", None))


def cmd_worker(args: argparse.Namespace) -> int:
    from worker.config import prefix
    from worker.runner import run

    configure_logging(args.log_level)
    try:
        run(redis_url(args.redis_url), prefix(args.prefix), burst=args.burst)
    except RedisUnavailable as e:
        # a worker writes JSON lines only, its last words included
        get_logger("modelplan.worker").error("worker_failed", error=str(e))
        return 2
    except Exception:
        get_logger("modelplan.worker").exception("worker_failed")
        return 1
    return 0


def cmd_heartbeat(args: argparse.Namespace) -> int:
    hb = parse_heartbeat(
        {
            "node_id": args.node_id,
            "gpu_class": args.gpu_class,
            "fabric": args.fabric,
            "gpu_mem_gb": args.gpu_mem_gb,
            "gpus": args.gpus,
            "free_gpus": args.free_gpus,
            "host_mem_gb": args.host_mem_gb,
            "host_free_gb": args.host_free_gb,
            "seq": args.seq if args.seq is not None else time.time_ns() // 1000,
            "boot_id": args.boot_id,
            "started": args.started,
        },
        "heartbeat",
    )
    client = _client(args)
    beat = client.publish(hb)
    last = client.last_seq(hb.node_id, hb.boot_id) if beat is Beat.STALE else None
    print(beat_text(beat, hb.node_id, last, seq_given=args.seq is not None))
    return 0


def default_model(args: argparse.Namespace) -> str:
    """A job's model name when none is given: a Hub id as given, else the name of the repository's folder
    (resolved, so that ``.`` or a bare ``files.json`` name the folder they are in)."""
    if args.repo and not Path(args.repo).is_dir():
        return str(args.repo)
    folder = Path(args.repo) if args.repo else Path(args.files).parent
    resolved = folder.resolve()
    return resolved.name or str(resolved)


def cmd_submit(args: argparse.Namespace) -> int:
    client = _client(args)
    repo = load_repository(args, client)
    model = args.model or default_model(args)
    req = request_from_repository(
        repo,
        model=model,
        context=args.context,
        artifact=args.artifact,
        priority=args.priority,
        replicas=args.replicas,
        fallback=args.fallback,
        estimate=args.estimate,
        settings=settings_from_args(args),
    )
    print(client.submit(req, args.job_id, exists_ok=False))
    return 0


def _reading(fn: Callable[[], T]) -> T:
    """``fn``'s answer; Redis out of reach or refusing is said without "nothing was stored", as there was
    nothing to store."""
    try:
        return fn()
    except RedisUnavailable as e:
        raise RedisUnavailable(e.url, e.cause, stored=False, hint=e.hint) from e.cause
    except RedisForbidden as e:
        raise RedisForbidden(e.url, e.cause, stored=False) from e.cause


def cmd_job(args: argparse.Namespace) -> int:
    rec = _reading(lambda: _client(args).get(args.job_id))
    print(rec.to_stored() if args.json else job_text(rec))
    return 0


def cmd_release(args: argparse.Namespace) -> int:
    print(job_text(_client(args).release(args.job_id)))
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    print(job_text(_client(args).cancel(args.job_id)))
    return 0


def cmd_retry(args: argparse.Namespace) -> int:
    print(job_text(_client(args).retry(args.job_id)))
    return 0


def cmd_scale(args: argparse.Namespace) -> int:
    print(job_text(_client(args).scale(args.job_id, args.replicas)))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from producer import demo

    demo.run(args.redis_url)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    client = _client(args)

    def read() -> str:
        states = (JobState.PLANNING, JobState.QUEUED, JobState.WAITING, JobState.PLACED)
        live = [r for s in states for r in client.jobs(s)]
        client.check_indexes()
        refused = refusals(client.redis, client.keys) or []
        return status_text(client.pool(), client.counts(), live, client.quarantined(), client.conflicts(), refused)

    print(_reading(read))
    return 0


def cmd_metrics(args: argparse.Namespace) -> int:
    from producer import metrics

    client = _client(args)
    if args.port is None:
        sys.stdout.write(_reading(lambda: metrics.exposition(client)))
        return 0
    try:
        metrics.serve(client, args.port, args.addr)
    except OSError as e:  # a name that does not resolve, an address not on this host, a port in use
        raise InvalidInput("arguments", "--addr/--port", f"cannot listen on {args.addr} port {args.port} ({e})") from e
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from producer.schema import schema_text

    sys.stdout.write(schema_text(args.name))
    return 0


def _add_repository_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--files", metavar="FILES.json", help='the file listing: a JSON list of {"path", "size"}')
    p.add_argument("--config", metavar="CONFIG.json", help="the model's config.json")
    p.add_argument("--index", metavar="INDEX.json", help="model.safetensors.index.json, for the parameter count")
    p.add_argument("--quant-config", metavar="HF_QUANT_CONFIG.json", help="ModelOpt's hf_quant_config.json, if any")
    p.add_argument(
        "--headers",
        metavar="HEADERS.json",
        help="the safetensors headers ({file: header}, or get_safetensors_metadata's shape): exact parameters "
        "and the layers that cache keys and values",
    )
    p.add_argument(
        "--repo",
        metavar="DIR|ORG/NAME",
        help="a local folder holding the repository (a downloaded snapshot), or a Hugging Face Hub id",
    )
    p.add_argument("--revision", default="main", help="with --repo ORG/NAME: the Hub revision (default main)")
    p.add_argument(
        "--context",
        type=int,
        default=DEFAULT_CONTEXT,
        help=f"tokens of context to plan for (default {DEFAULT_CONTEXT})",
    )
    p.add_argument(
        "--estimate",
        choices=ESTIMATES,
        help="how each card's need is counted: measured (the engines' own profiles) or seed (the original "
        "planner's rule); default: the deployment's (MODELPLAN_ESTIMATE), else measured",
    )
    add_settings_args(p)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="modelplan", description="Where large language models run on a GPU cluster.")
    sub = top.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan", help="dry run: every way a repository could run on a pool, best first")
    p.add_argument("--pool", required=True, metavar="POOL.json", help="a JSON list of node records")
    _add_repository_args(p)
    p.add_argument("--json", action="store_true", help="the options as JSON, in rank order")
    p.set_defaults(func=cmd_plan)

    redis_args = argparse.ArgumentParser(add_help=False)
    redis_args.add_argument("--redis-url", help=f"Redis URL (default: ${REDIS_URL_ENV}, else {DEFAULT_REDIS_URL})")
    redis_args.add_argument("--prefix", help=f"key prefix (default: ${PREFIX_ENV}, else {DEFAULT_PREFIX})")

    p = sub.add_parser("worker", parents=[redis_args], help="plan serve jobs from the queue")
    p.add_argument("--burst", action="store_true", help="drain the queue, then exit")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("heartbeat", parents=[redis_args], help="publish one node heartbeat")
    p.add_argument("--node-id", required=True)
    p.add_argument("--gpu-class", default="", help='card class such as h100-80g; "" for a CPU node')
    p.add_argument("--gpu-mem-gb", type=int, default=0, help="one card's GiB, when the class label has none")
    p.add_argument("--gpus", type=int, default=0)
    p.add_argument("--free-gpus", type=int, default=0)
    p.add_argument("--host-mem-gb", type=int, required=True)
    p.add_argument("--host-free-gb", type=int, required=True)
    p.add_argument("--fabric", default="")
    p.add_argument("--boot-id", default="manual", help="changes when the node restarts")
    p.add_argument("--seq", type=int, help="rises with each heartbeat (default: the clock in microseconds)")
    p.add_argument(
        "--started",
        action="append",
        default=[],
        metavar="HOLD_ID",
        help="a hold ({job}:{replica}:{version}) whose cards this report already counts as used (repeatable)",
    )
    p.set_defaults(func=cmd_heartbeat)

    as_client = argparse.ArgumentParser(add_help=False)
    as_client.add_argument(
        "--client-id",
        help=f"act as this registered client, through its own request stream (default: ${CLIENT_ID_ENV}, else "
        "directly)",
    )

    p = sub.add_parser("submit", parents=[redis_args, as_client], help="submit a serve job; prints its id")
    _add_repository_args(p)
    p.add_argument("--model", help="a name for people (default: the folder's)")
    p.add_argument("--artifact", help="pin one artifact by name")
    p.add_argument("--priority", type=int, default=0, help=f"0 to {PRIORITY_MAX}, higher first (default 0)")
    p.add_argument("--job-id", help="your own id (letters, digits, . _ -): submitting it again says what it is")
    p.add_argument("--replicas", type=int, default=1, help="how many replicas (default 1)")
    p.add_argument(
        "--fallback",
        action="store_true",
        help="while the best option is busy, run on the best free one, and move when the best frees",
    )
    p.set_defaults(func=cmd_submit)

    for name, func, text in (
        ("job", cmd_job, "a job's record"),
        ("release", cmd_release, "free a placed job"),
        ("cancel", cmd_cancel, "cancel a queued or waiting job"),
        ("retry", cmd_retry, "queue a failed job for planning again, under the same id"),
    ):
        p = sub.add_parser(name, parents=[redis_args] if name == "job" else [redis_args, as_client], help=text)
        p.add_argument("job_id")
        if name == "job":
            p.add_argument("--json", action="store_true", help="the record as stored")
        p.set_defaults(func=func)

    p = sub.add_parser("scale", parents=[redis_args, as_client], help="change how many replicas a job has")
    p.add_argument("job_id")
    p.add_argument("replicas", type=int)
    p.set_defaults(func=cmd_scale)

    p = sub.add_parser("client", help="register or remove a client that drives its jobs through its own stream")
    clients.add_arguments(p, [redis_args])
    p.set_defaults(func=clients.run_from_args)
    operator.add_arguments(sub, [redis_args])

    p = sub.add_parser("agent", help="this node's agent: heartbeats, and placed replicas handed to a starter")
    agent.add_arguments(p)
    p.set_defaults(func=agent.run_from_args)

    p = sub.add_parser("demo", help="the whole flow on a small cluster, on an embedded Redis unless a URL is given")
    p.add_argument("--redis-url", help=f"run on this Redis instead (default: ${REDIS_URL_ENV}, else embedded)")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("status", parents=[redis_args], help="the pool and the jobs at a glance")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("metrics", parents=[redis_args], help="Prometheus metrics: one scrape, or served with --port")
    p.add_argument("--port", type=int, help="serve /metrics on this port until stopped (default: print one scrape)")
    p.add_argument(
        "--addr",
        default=METRICS_ADDR,
        help=f"with --port: the address to listen on (default {METRICS_ADDR}: this host only; 0.0.0.0 for all)",
    )
    p.set_defaults(func=cmd_metrics)

    p = sub.add_parser(
        "schema", help="the JSON Schema of a request, job record, heartbeat, node or conflict record, option"
    )
    p.add_argument("name", choices=["request", "record", "heartbeat", "node", "conflict", "option"])
    p.set_defaults(func=cmd_schema)
    return top


def _where(args: argparse.Namespace) -> str:
    """The URL of the Redis a command talks to, for a message: the password masked; none for the demo's own."""
    given = getattr(args, "redis_url", None) or os.environ.get(REDIS_URL_ENV)
    return redact(redis_url(given)) if given or args.command != "demo" else ""


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command not in ("worker", "agent"):
        # a command's output is its answer: its log lines (warnings and worse) go to standard error
        configure_logging("WARNING", sys.stderr)
    try:
        code: int = args.func(args)
        sys.stdout.flush()
    except (ModelplanError, redis.RedisError) as e:
        if isinstance(e, redis.RedisError):  # met outside the client's calls, which say where
            e = redis_failure(_where(args), e)
        # "modelplan scale: scale: replicas ..." says the command twice
        said = cli_words(str(e), getattr(e, "job_id", None)).removeprefix(f"{args.command}: ")
        print(f"modelplan {args.command}: {said}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader stopped reading (``| head``): it has what it wanted. Standard output goes to the null
        # device so that the flush at exit does not fail a second time.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
