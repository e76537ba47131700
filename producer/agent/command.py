"""``modelplan agent``: its options, and the agent run from them."""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import signal
import socket
import sys
import threading
from pathlib import Path

from planner.errors import InvalidInput
from producer import constants as K
from producer.agent.endpoints import HOST, bind_address
from producer.agent.engine_state import default_state_dir
from producer.agent.hooks import log_start
from producer.agent.loop import Agent
from producer.agent.probes import Reader, SystemReader, read_boot_id
from producer.agent.simulated import SimulatedReader
from producer.agent.supervise import DEFAULT_MAX_RESTARTS, DEFAULT_STOP_GRACE_S, Supervisor
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
    parser.add_argument(
        "--engines",
        default="log",
        choices=["log", "run"],
        help="what a hold placed on the node gets: log (the default) logs the engine's command line; "
        "run starts the engine, supervises it and stops it on release",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        help="where --engines run keeps a record and a log per engine "
        "(default: $XDG_STATE_HOME/modelplan/agent, else ~/.local/state/modelplan/agent)",
    )
    parser.add_argument(
        "--simulate",
        metavar="COUNTxCLASS|cpu",
        help="report simulated cards instead of reading NVML or nvidia-smi: 8xh100-80g, 2xl40s-48g (classes: "
        + ", ".join(sorted(K.SIMULATED_CARDS))
        + "), or cpu for none; the heartbeats say simulated: true",
    )
    parser.add_argument(
        "--models-dir",
        metavar="DIR",
        help="where the engines load a model from when its request names no --model-path and its model no "
        "Hub id: DIR/<the model's name> (a folder of its original weights or GGUF files)",
    )
    parser.add_argument(
        "--stop-grace",
        type=float,
        default=DEFAULT_STOP_GRACE_S,
        help=f"seconds an engine has to exit after TERM before it gets KILL (default {DEFAULT_STOP_GRACE_S:g})",
    )
    parser.add_argument(
        "--advertise",
        metavar="HOST",
        help="the host name (or address) other services reach this node's engines at: with --engines run, "
        "engines listen on its address, and each job's record gives HOST:PORT as its endpoint "
        "(default: 127.0.0.1, engines reached from this node only)",
    )
    parser.add_argument(
        "--max-restarts",
        type=int,
        default=DEFAULT_MAX_RESTARTS,
        help=f"times an engine that died after serving is started again (default {DEFAULT_MAX_RESTARTS})",
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
    if not args.stop_grace >= 0:
        raise InvalidInput("arguments", "--stop-grace", f"must be 0 seconds or more (given {args.stop_grace})")
    if not args.max_restarts >= 0:
        raise InvalidInput("arguments", "--max-restarts", f"must be 0 or more (given {args.max_restarts})")
    bind = bind_address(args.advertise) if args.advertise else HOST
    # in a dry run standard output carries the heartbeats, so the log goes to standard error
    configure_logging(args.log_level, sys.stderr if args.dry_run else sys.stdout)
    client = None if args.dry_run else Client.from_url(default_redis_url(args.redis_url), default_prefix(args.prefix))
    if reader is None:
        reader = SimulatedReader.of(args.simulate) if args.simulate else SystemReader()
    models_dir = str(Path(args.models_dir).resolve()) if args.models_dir else None
    boot_id = read_boot_id()
    supervisor = None
    if args.engines == "run" and client is not None:
        supervisor = Supervisor(
            args.state_dir or default_state_dir(),
            boot_id=boot_id,
            reader=reader,
            stop_grace=args.stop_grace,
            models_dir=models_dir,
            bind=bind,
            advertise=args.advertise or HOST,
            max_restarts=args.max_restarts,
        )
    agent = Agent(
        args.node_id or socket.gethostname(),
        reader,
        client,
        gpu_class=args.gpu_class,
        fabric=args.fabric,
        boot_id=boot_id,
        start_hook=functools.partial(log_start, models_dir=models_dir),
        supervisor=supervisor,
    )

    def show(hb: Heartbeat) -> None:
        print(json.dumps(hb.model_dump(mode="json")), flush=True)

    try:
        agent.check_class()
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
