"""The ``modelplan`` command line: every subcommand, its description and its options, each with its help
text (``producer.cli`` runs them; docs/CLI.md lists them)."""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import NoReturn

from planner import DEFAULT_CONTEXT, ESTIMATES, InvalidInput
from producer import agent, clients, operator
from producer.constants import METRICS_ADDR
from producer.settingsargs import add_settings_args
from worker.config import CLIENT_ID_ENV, PREFIX_ENV, REDIS_URL_ENV
from worker.constants import DEFAULT_PREFIX, DEFAULT_REDIS_URL, PRIORITY_MAX

Handler = Callable[[argparse.Namespace], int]

LOG_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]


def package_version() -> str:
    """The installed package's version (``modelplan --version``)."""
    try:
        return version("modelplan")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def add_repository_args(p: argparse.ArgumentParser) -> None:
    """How a repository is given (files, a folder or a Hub id), its context, the estimate, the settings."""
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
        help="a local folder holding the repository (a downloaded snapshot), or a Hugging Face Hub id (or its "
        "page's address)",
    )
    p.add_argument(
        "--revision",
        help="with --repo ORG/NAME: the Hub revision (default: the one a Hub address names, else main)",
    )
    p.add_argument(
        "--context",
        type=tokens,
        default=DEFAULT_CONTEXT,
        help=f"tokens of context to plan for, k for 1,024 (8k = 8192; default {DEFAULT_CONTEXT})",
    )
    p.add_argument(
        "--estimate",
        choices=ESTIMATES,
        help="how each card's need is counted: measured (the engines' own profiles) or seed (the original "
        "planner's rule); default: the deployment's (MODELPLAN_ESTIMATE), else measured",
    )
    add_settings_args(p)


_TOKENS = re.compile(r"(\d{1,12})([kK]?)")


def tokens(text: str) -> int:
    """A count of tokens as a person types it: a whole number, or one followed by ``k`` (either case) for
    thousands of 1,024, as context lengths are counted (``8k`` = 8192, ``128k`` = 131072)."""
    m = _TOKENS.fullmatch(text)
    if m is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of tokens: give a whole number, or one with k for 1,024 (8k = 8192)"
        )
    return int(m[1]) * (1024 if m[2] else 1)


ARTIFACT_HELP = "pin one artifact: its name, or the quantisation in it (Q4_K_M) where that is one artifact's"


def _model_args(p: argparse.ArgumentParser) -> None:
    """The model's name, and where the nodes load it from."""
    p.add_argument("--model", help="a name for people, and the name the engine serves it as (default: the folder's)")
    p.add_argument(
        "--model-path",
        metavar="PATH|ORG/NAME",
        help="where the nodes load the model from: an absolute path on the nodes (a folder, or one .gguf file) "
        "or a Hub id (default: the Hub id --repo names, else the folder of the model's name under each agent's "
        "--models-dir)",
    )


def _heartbeat_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--node-id", required=True, help="the node's id: letters, digits, . _ - (up to 128)")
    p.add_argument("--gpu-class", default="", help='card class such as h100-80g; "" for a CPU node')
    p.add_argument("--gpu-mem-gb", type=int, default=0, help="one card's GiB, when the class label has none")
    p.add_argument("--gpus", type=int, default=0, help="cards on the node (default 0: a CPU node)")
    p.add_argument("--free-gpus", type=int, default=0, help="of those, cards free now (at most --gpus)")
    p.add_argument("--host-mem-gb", type=int, required=True, help="the node's RAM in GiB")
    p.add_argument("--host-free-gb", type=int, required=True, help="of it, GiB unused now (at most --host-mem-gb)")
    p.add_argument("--fabric", default="", help="the interconnect the node shares with others (default none)")
    p.add_argument("--boot-id", default="manual", help="changes when the node restarts (default manual)")
    p.add_argument("--seq", type=int, help="rises with each heartbeat (default: the clock in microseconds)")
    p.add_argument(
        "--started",
        action="append",
        default=[],
        metavar="HOLD_ID",
        help="a hold ({job}:{replica}:{version}) whose cards this report already counts as used (repeatable)",
    )


HEARTBEAT_FIELDS = (
    "node_id", "gpu_class", "fabric", "gpu_mem_gb", "gpus", "free_gpus", "host_mem_gb", "host_free_gb", "seq",
    "boot_id", "started",
)  # fmt: skip
"""The fields of a heartbeat ``modelplan heartbeat`` takes, each as the flag of its name."""

_FIELD = re.compile(r"\b(" + "|".join(sorted(HEARTBEAT_FIELDS, key=len, reverse=True)) + r")\b")


def as_flags(e: InvalidInput) -> InvalidInput:
    """A heartbeat refused, said with the flags the person typed (``--free-gpus 3 is more than --gpus 2``)
    where the record's check names its fields (``free_gpus``); a value given is left as it was."""
    said, given, rest = e.problem.partition(" (given ")
    field = _FIELD.sub(lambda m: "--" + m.group(1).replace("_", "-"), e.field)
    said = _FIELD.sub(lambda m: "--" + m.group(1).replace("_", "-"), said).removeprefix(field + " ")
    out = InvalidInput(e.source, field, said + given + rest)
    if e.field == "(record)":  # a check across fields: the flags are in the sentence
        out.args = (f"{e.source}: {said}",)
    return out


class CommandParser(argparse.ArgumentParser):
    """A subcommand's parser: a mistake on its command line is one line naming the flag and what was wrong,
    not its usage (``modelplan plan --help`` gives that)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message.removeprefix('argument ')}\n")


def chosen(p: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub)command ``args`` were parsed for: ``p``, or the subcommand's, nested ones
    (``client add``) followed down."""
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            name = getattr(args, action.dest, None)
            if isinstance(name, str) and name in action.choices:
                return chosen(action.choices[name], args)
    return p


def unknown_flag(p: argparse.ArgumentParser, extras: list[str]) -> str:
    """What ``p``'s command says of arguments it does not take: an unknown flag with the closest flag it
    does take (``--ctx``: ``--context``), or, where none is close, where its flags are listed."""
    flag = next((e for e in extras if e.startswith("--") or (e.startswith("-") and not e[1:2].isdigit())), None)
    if flag is None:
        return f"unrecognized arguments: {' '.join(extras)}"
    flag = flag.partition("=")[0]
    offered = [s for a in p._actions for s in a.option_strings if s.startswith("--")]
    close = difflib.get_close_matches(flag, offered, n=1, cutoff=0.6)
    if close:
        return f"unknown flag {flag}: did you mean {close[0]}? ({p.prog} --help)"
    return f"unknown flag {flag} ({p.prog} --help lists the flags)"


def parse(top: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """``top.parse_args(argv)``, but arguments a subcommand does not take are refused by that subcommand,
    in one line naming the closest flag it does take, rather than with the top-level usage."""
    args, extras = top.parse_known_args(argv)
    if extras:
        p = chosen(top, args)
        p.error(unknown_flag(p, extras))
    return args


def _describe(top: argparse.ArgumentParser) -> None:
    """Give each subcommand's own ``--help`` page the line the list of commands shows, where it has no
    description of its own (those ``producer.agent``, ``producer.operator`` and ``producer.clients`` add
    too)."""
    for action in top._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {a.dest: a.help for a in action._choices_actions}
        for name, sub in action.choices.items():
            if not sub.description and helps.get(name):
                sub.description = helps[name]
            _describe(sub)


def parser(commands: Mapping[str, Handler]) -> argparse.ArgumentParser:
    """``modelplan``'s parser, each subcommand run by ``commands[name]`` (``agent``, ``client``,
    ``setup-redis`` and ``acl`` by their own modules)."""
    top = argparse.ArgumentParser(prog="modelplan", description="Where large language models run on a GPU cluster.")
    top.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    sub = top.add_subparsers(dest="command", required=True, parser_class=CommandParser)
    p = sub.add_parser("plan", help="dry run: every way a repository could run on a pool, best first")
    p.add_argument("--pool", metavar="POOL.json", help="a JSON list of node records")
    p.add_argument(
        "--redis-url",
        help=f"instead of --pool: the live pool in this Redis, read as a worker reads it, with what the model's "
        f"engines were observed to hold; nothing is written (default: ${REDIS_URL_ENV} where --pool is not given)",
    )
    p.add_argument(
        "--prefix", help=f"with the live pool: the key prefix (default: ${PREFIX_ENV}, else {DEFAULT_PREFIX})"
    )
    add_repository_args(p)
    p.add_argument("--artifact", help=ARTIFACT_HELP)
    _model_args(p)
    p.add_argument("--json", action="store_true", help="the options as JSON, in rank order")
    p.set_defaults(func=commands["plan"])

    redis_args = CommandParser(add_help=False)
    redis_args.add_argument("--redis-url", help=f"Redis URL (default: ${REDIS_URL_ENV}, else {DEFAULT_REDIS_URL})")
    redis_args.add_argument("--prefix", help=f"key prefix (default: ${PREFIX_ENV}, else {DEFAULT_PREFIX})")

    p = sub.add_parser("worker", parents=[redis_args], help="plan serve jobs from the queue")
    p.add_argument("--burst", action="store_true", help="drain the queue, then exit")
    p.add_argument("--log-level", default="INFO", choices=LOG_LEVELS, help="the least level logged (default INFO)")
    p.set_defaults(func=commands["worker"])

    p = sub.add_parser("heartbeat", parents=[redis_args], help="publish one node heartbeat")
    _heartbeat_args(p)
    p.set_defaults(func=commands["heartbeat"])

    as_client = CommandParser(add_help=False)
    as_client.add_argument(
        "--client-id",
        help=f"act as this registered client, through its own request stream (default: ${CLIENT_ID_ENV}, else "
        "directly)",
    )

    p = sub.add_parser("submit", parents=[redis_args, as_client], help="submit a serve job; prints its id")
    add_repository_args(p)
    _model_args(p)
    p.add_argument("--artifact", help=ARTIFACT_HELP)
    p.add_argument("--priority", type=int, default=0, help=f"0 to {PRIORITY_MAX}, higher first (default 0)")
    p.add_argument("--job-id", help="your own id (letters, digits, . _ -): submitting it again says what it is")
    p.add_argument("--replicas", type=int, default=1, help="how many replicas (default 1)")
    p.add_argument(
        "--fallback",
        action="store_true",
        help="while the best option is busy, run on the best free one, and move when the best frees",
    )
    p.set_defaults(func=commands["submit"])

    for name, text in (
        ("job", "a job's record"),
        ("release", "free a placed job"),
        ("cancel", "cancel a queued or waiting job"),
        ("retry", "queue a failed job for planning again, under the same id"),
    ):
        p = sub.add_parser(name, parents=[redis_args] if name == "job" else [redis_args, as_client], help=text)
        p.add_argument("job_id", help="the job's id (as submit printed it)")
        if name == "job":
            p.add_argument("--json", action="store_true", help="the record as stored")
        p.set_defaults(func=commands[name])

    p = sub.add_parser("scale", parents=[redis_args, as_client], help="change how many replicas a job has")
    p.add_argument("job_id", help="the job's id (as submit printed it)")
    p.add_argument("replicas", type=int, help="how many replicas it is to have")
    p.set_defaults(func=commands["scale"])

    p = sub.add_parser("client", help="register or remove a client that drives its jobs through its own stream")
    clients.add_arguments(p, [redis_args])
    p.set_defaults(func=clients.run_from_args)
    operator.add_arguments(sub, [redis_args])

    p = sub.add_parser("agent", help="this node's agent: heartbeats, and placed replicas handed to a starter")
    agent.add_arguments(p)
    p.set_defaults(func=agent.run_from_args)

    p = sub.add_parser("demo", help="the whole flow on a small cluster, on an embedded Redis unless a URL is given")
    p.add_argument("--redis-url", help=f"run on this Redis instead (default: ${REDIS_URL_ENV}, else embedded)")
    p.set_defaults(func=commands["demo"])

    p = sub.add_parser("status", parents=[redis_args], help="the pool, the workers and the jobs at a glance")
    p.set_defaults(func=commands["status"])

    p = sub.add_parser("metrics", parents=[redis_args], help="Prometheus metrics: one scrape, or served with --port")
    p.add_argument("--port", type=int, help="serve /metrics on this port until stopped (default: print one scrape)")
    p.add_argument(
        "--addr",
        default=METRICS_ADDR,
        help=f"with --port: the address to listen on (default {METRICS_ADDR}: this host only; 0.0.0.0 for all)",
    )
    p.set_defaults(func=commands["metrics"])

    p = sub.add_parser(
        "schema", help="the JSON Schema of a request, job record, heartbeat, node or conflict record, option"
    )
    p.add_argument(
        "name",
        choices=["request", "record", "heartbeat", "node", "conflict", "option"],
        help="which record's schema",
    )
    p.set_defaults(func=commands["schema"])
    _describe(top)
    return top
