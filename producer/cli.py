"""The ``modelplan`` command."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from planner import (
    DEFAULT_CONTEXT,
    InvalidInput,
    ModelplanError,
    Repository,
    parse_pool,
    plan,
    pool_nodes,
    repository_from_folder,
    repository_from_listing,
)
from producer.render import options_table


def _read_json(path: str, what: str) -> Any:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidInput(path, what, f"cannot be read: {e}") from e
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidInput(path, what, f"not JSON: {e}") from e


def load_repository(args: argparse.Namespace) -> Repository:
    """The repository a command names: a local folder, or a listing with its config."""
    if args.repo:
        return repository_from_folder(args.repo)
    if not (args.files and args.config):
        raise InvalidInput("arguments", "--files/--config", "give both --files and --config, or --repo DIR")
    index = _read_json(args.index, "--index") if args.index else None
    return repository_from_listing(
        _read_json(args.files, "--files"), _read_json(args.config, "--config"), index, source=args.files
    )


def cmd_plan(args: argparse.Namespace) -> int:
    try:
        pool_text = Path(args.pool).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidInput(args.pool, "--pool", f"cannot be read: {e}") from e
    nodes = pool_nodes(parse_pool(pool_text, args.pool))
    opts = plan(load_repository(args), nodes, args.context)
    if args.json:
        print(json.dumps([o.to_json() for o in opts], indent=2))
    else:
        print(options_table(opts))
    return 0


def _add_repository_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--files", metavar="FILES.json", help='the file listing: a JSON list of {"path", "size"}')
    p.add_argument("--config", metavar="CONFIG.json", help="the model's config.json")
    p.add_argument("--index", metavar="INDEX.json", help="model.safetensors.index.json, for the parameter count")
    p.add_argument("--repo", metavar="DIR", help="a local folder holding the repository (a downloaded snapshot)")
    p.add_argument(
        "--context",
        type=int,
        default=DEFAULT_CONTEXT,
        help=f"tokens of context to plan for (default {DEFAULT_CONTEXT})",
    )


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="modelplan", description="Where large language models run on a GPU cluster.")
    sub = top.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan", help="dry run: every way a repository could run on a pool, best first")
    p.add_argument("--pool", required=True, metavar="POOL.json", help="a JSON list of node records")
    _add_repository_args(p)
    p.add_argument("--json", action="store_true", help="the options as JSON, in rank order")
    p.set_defaults(func=cmd_plan)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except ModelplanError as e:
        print(f"modelplan {args.command}: {e}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
