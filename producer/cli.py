"""The ``modelplan`` command."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import redis

from planner import (
    ESTIMATES,
    NO_SETTINGS,
    InvalidInput,
    ModelplanError,
)
from planner.decide import why_unfit
from planner.longest import longest_context
from planner.settings import merged
from producer import cliargs, dryrun
from producer.client import Client, request_from_repository
from producer.named import load_repository, pick_artifact
from producer.refusals import recent_refusals
from producer.render import (
    FAILED_SHOWN,
    beat_text,
    commands_text,
    estimates_text,
    job_text,
    nothing_text,
    observed_text,
    options_table,
    status_text,
)
from producer.settingsargs import settings_from_args
from worker import observed
from worker.beats import Beat
from worker.config import REDIS_URL_ENV, configure_logging, estimate, password_warning, redact, redis_url
from worker.config import settings as deployment_settings
from worker.errors import RedisForbidden, RedisUnavailable, cli_words, redis_failure
from worker.logs import get_logger
from worker.records import JobState
from worker.reports import Heartbeat, parse_heartbeat

T = TypeVar("T")


def cmd_plan(args: argparse.Namespace) -> int:
    pool = dryrun.read_pool(args)
    try:
        return _plan_on(args, pool)
    finally:
        pool.close()


def _plan_on(args: argparse.Namespace, pool: dryrun.PlanPool) -> int:
    nodes = pool.nodes
    full = load_repository(args)
    repo = full
    pinned = pick_artifact(full, args.artifact) if args.artifact else None
    if pinned is not None:  # the request a submit with it would make plans that artifact alone
        repo = replace(full, artifacts=(pinned,))
    # the request a submit would make: the model as the engines load it, and as observations name it
    request = request_from_repository(
        full,
        model=args.model or default_model(args),
        context=args.context,
        artifact=pinned.name if pinned is not None else None,
        model_path=model_path_of(args),
    )
    seen = _reading(lambda: pool.observe(request))
    chosen = estimate(args.estimate)
    settings = merged(settings_from_args(args) or NO_SETTINGS, deployment_settings())
    by_estimate = {e: dryrun.options(repo, nodes, args.context, e, settings, seen) for e in ESTIMATES}
    if args.json:
        if pool.live:  # standard output is the JSON alone
            print(dryrun.pool_line(pool), file=sys.stderr)
        print(json.dumps([o.to_json() for o in by_estimate[chosen]], indent=2))
        return 0
    if pool.live:
        print(dryrun.pool_line(pool) + "\n")
    if by_estimate[chosen]:
        print(options_table(by_estimate[chosen]))
    elif not nodes:
        print(options_table((), f"{pool.where} has no node"))
    else:
        # what a worker records for such a job, and the context that would fit where a shorter one does
        why = why_unfit(repo.artifacts, repo.shape, nodes, args.context, chosen, settings)
        longest = longest_context(repo.artifacts, repo.shape, nodes, args.context, chosen, settings)
        print(options_table((), why, longest))
    for note in repo.notes:
        print(f"note: {note}")
    print()
    print(estimates_text(by_estimate, chosen))
    seen_text = observed_text(by_estimate[chosen])
    if seen_text:
        print("\n" + seen_text)
    if by_estimate[chosen]:
        print()
        print("each option's engine, started as it was sized:\n" + commands_text(request, by_estimate[chosen]))
    return 0


def _client(args: argparse.Namespace) -> Client:
    return Client.from_url(args.redis_url, args.prefix, client_id=getattr(args, "client_id", None))


def cmd_worker(args: argparse.Namespace) -> int:
    from worker.config import prefix
    from worker.runner import run

    configure_logging(args.log_level)
    try:
        run(redis_url(args.redis_url), prefix(args.prefix), burst=args.burst)
    except ModelplanError as e:  # Redis out of reach or refusing, a bad setting: said in one line
        # a worker writes JSON lines only, its last words included
        get_logger("modelplan.worker").error("worker_failed", error=str(e))
        return 2
    except Exception:
        get_logger("modelplan.worker").exception("worker_failed")
        return 1
    return 0


def cmd_heartbeat(args: argparse.Namespace) -> int:
    try:
        hb = _heartbeat(args)
    except InvalidInput as e:
        raise cliargs.as_flags(e) from e
    client = _client(args)
    beat = client.publish(hb)
    last = client.last_seq(hb.node_id, hb.boot_id) if beat is Beat.STALE else None
    print(beat_text(beat, hb.node_id, last, seq_given=args.seq is not None))
    return 0


def _heartbeat(args: argparse.Namespace) -> Heartbeat:
    return parse_heartbeat(
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


def default_model(args: argparse.Namespace) -> str:
    """A job's model name when none is given: a Hub id as given, else the name of the repository's folder
    (resolved, so that ``.`` or a bare ``files.json`` name the folder they are in)."""
    if args.repo and not Path(args.repo).is_dir():
        return str(args.repo)
    folder = Path(args.repo) if args.repo else Path(args.files).parent
    resolved = folder.resolve()
    return resolved.name or str(resolved)


def model_path_of(args: argparse.Namespace) -> str | None:
    """Where the nodes load the model from: ``--model-path``, else the Hub id ``--repo`` names (after
    ``load_repository``, which turns a Hub page's address into its id); None for a local folder or a
    listing, which each agent finds under its ``--models-dir``."""
    if args.model_path:
        return str(args.model_path)
    if args.repo and not Path(args.repo).exists():
        return str(args.repo)
    return None


def cmd_submit(args: argparse.Namespace) -> int:
    client = _client(args)
    repo = load_repository(args, client)
    model = args.model or default_model(args)
    req = request_from_repository(
        repo,
        model=model,
        context=args.context,
        artifact=pick_artifact(repo, args.artifact).name if args.artifact else None,
        priority=args.priority,
        replicas=args.replicas,
        fallback=args.fallback,
        estimate=args.estimate,
        settings=settings_from_args(args),
        model_path=model_path_of(args),
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
    client = _client(args)
    rec = _reading(lambda: client.get(args.job_id))
    print(rec.to_stored() if args.json else job_text(rec, _reading(lambda: _workers(client))))
    return 0


def _workers(client: Client) -> int | None:
    """How many workers are running; None where this login may not read it (``job`` as an older client)."""
    try:
        return client.workers_alive()
    except RedisForbidden:
        return None


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
        refused = recent_refusals(client.redis, client.keys)
        quarantined, conflicts = client.quarantined(), client.conflicts()
        pool, counts, workers = client.pool(), client.counts(), client.workers_alive()
        seen = pool.records or any(counts.values()) or workers or quarantined or conflicts
        if not (seen or (refused and refused.shown)):
            # a mistyped prefix reads as an empty pool with no worker: say what it is instead
            return nothing_text(client.keys.prefix, _where(args))
        failed = client.latest(JobState.FAILED, FAILED_SHOWN)
        off = observed.furthest_off(client.store)
        return status_text(
            pool, counts, live, quarantined, conflicts, refused or (), workers=workers, off=off, failed=failed
        )

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


def parser() -> argparse.ArgumentParser:
    """``modelplan``'s parser (``producer.cliargs``), each subcommand run by its ``cmd_`` function here."""
    return cliargs.parser(
        {
            "plan": cmd_plan,
            "worker": cmd_worker,
            "heartbeat": cmd_heartbeat,
            "submit": cmd_submit,
            "job": cmd_job,
            "release": cmd_release,
            "cancel": cmd_cancel,
            "retry": cmd_retry,
            "scale": cmd_scale,
            "demo": cmd_demo,
            "status": cmd_status,
            "metrics": cmd_metrics,
            "schema": cmd_schema,
        }
    )


def _where(args: argparse.Namespace) -> str:
    """The URL of the Redis a command talks to, for a message: the password masked; none for the demo's own."""
    given = getattr(args, "redis_url", None) or os.environ.get(REDIS_URL_ENV)
    return redact(redis_url(given)) if given or args.command != "demo" else ""


def main(argv: Sequence[str] | None = None) -> int:
    args = cliargs.parse(parser(), argv)
    if args.command not in ("worker", "agent"):
        # a command's output is its answer: its log lines (warnings and worse) go to standard error
        configure_logging("WARNING", sys.stderr)
    warning = password_warning(getattr(args, "redis_url", None))  # ps shows it to every user of the host
    if warning:
        print(f"modelplan {args.command}: {warning}", file=sys.stderr)
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
