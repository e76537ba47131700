"""``modelplan agent``: its options, and the agent run from them."""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import socket
import sys
import threading

from planner.errors import InvalidInput
from producer.agent.loop import Agent
from producer.agent.probes import Reader, SystemReader
from producer.client import Client
from worker.config import PREFIX_ENV, REDIS_URL_ENV, configure_logging
from worker.config import prefix as default_prefix
from worker.config import redis_url as default_redis_url
from worker.constants import DEFAULT_PREFIX, DEFAULT_REDIS_URL, HEARTBEAT_INTERVAL_S
from worker.reports import Heartbeat


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``modelplan agent``."""
    parser.add_argument("--node-id", help="this node's id (default: the host name)")
    parser.add_argument(
        "--gpu-class",
        help='the card class label, such as h100-80g; "" for a CPU node (default: from the cards\' name and memory)',
    )
    parser.add_argument("--fabric", default="", help="the interconnect the node's cards share with others'")
    parser.add_argument(
        "--interval",
        type=float,
        default=HEARTBEAT_INTERVAL_S,
        help=f"seconds between heartbeats (default {HEARTBEAT_INTERVAL_S:g})",
    )
    parser.add_argument("--once", action="store_true", help="one heartbeat, printed as JSON, then exit")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the heartbeats as JSON lines; publish nothing (no Redis)"
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="the least level logged (default INFO)",
    )
    for flag, text in (
        ("--redis-url", f"Redis URL (default: ${REDIS_URL_ENV}, else {DEFAULT_REDIS_URL})"),
        ("--prefix", f"key prefix (default: ${PREFIX_ENV}, else {DEFAULT_PREFIX})"),
    ):
        # a parent parser shared with the other commands may have given them already
        with contextlib.suppress(argparse.ArgumentError):
            parser.add_argument(flag, help=text)


def run_from_args(args: argparse.Namespace, *, reader: Reader | None = None) -> int:
    """Run ``modelplan agent`` with parsed arguments; ``reader`` replaces this machine's readings."""
    if not args.interval > 0:
        raise InvalidInput("arguments", "--interval", f"must be more than 0 seconds (given {args.interval})")
    # in a dry run standard output carries the heartbeats, so the log goes to standard error
    configure_logging(args.log_level, sys.stderr if args.dry_run else sys.stdout)
    client = None if args.dry_run else Client.from_url(default_redis_url(args.redis_url), default_prefix(args.prefix))
    agent = Agent(
        args.node_id or socket.gethostname(),
        reader or SystemReader(),
        client,
        gpu_class=args.gpu_class,
        fabric=args.fabric,
    )

    def show(hb: Heartbeat) -> None:
        print(json.dumps(hb.model_dump(mode="json")), flush=True)

    try:
        if args.once:
            show(agent.tick())
            return 0
        stop = threading.Event()
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: stop.set())
        agent.run(args.interval, stop, show if args.dry_run else None)
        return 0
    finally:
        if client is not None:
            client.redis.close()
