"""The repository a command names (``--repo``, or ``--files`` with ``--config`` and optionally
``--index``, ``--quant-config`` and the safetensors ``--headers``), read with the bounds the client sets on
what it reads."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from planner import Artifact, InvalidInput, Repository, repository_from_folder, repository_from_listing
from producer.errors import HubRepoNotFound, HubUnavailable, NoLocalFolder
from producer.hub import looks_like_repo_id, resolve
from producer.limits import check_folder, check_index, check_listing, read_bounded
from worker.keys import Keys

if TYPE_CHECKING:
    from producer.client import Client


def read_json(path: str, what: str, bound: str) -> Any:
    try:
        text = read_bounded(path, what, bound).decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidInput(path, what, f"cannot be read: {e}") from e
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, over-long integers, nesting past the stack
        raise InvalidInput(path, what, f"not JSON: {e}") from e


def flagged(e: InvalidInput, given: dict[str, str]) -> InvalidInput:
    """``e`` said with the flag of the file it is about (``given``: path as given -> flag, the first that
    matches): ``PATH: --flag: problem`` for the file as a whole, ``PATH[3] (--flag): field: problem`` for
    something in it, ``PATH[3] (--flag): problem`` for an entry as a whole (a check across its fields);
    ``e`` itself when it is about none of them."""
    for path, flag in given.items():
        if path and (e.source == path or e.source.startswith((path + "[", path + " ", path.rstrip("/") + "/"))):
            if e.field in ("(file)", "(folder)"):
                return InvalidInput(e.source, flag, e.problem)
            out = InvalidInput(f"{e.source} ({flag})", e.field, e.problem)
            if e.field == "(record)":  # the entry is the subject: no field to name
                out.args = (f"{out.source}: {e.problem}",)
            return out
    return e


_HUB_PAGE = re.compile(r"(?:https?://)?(?:www\.)?(?:huggingface\.co|hf\.co)/(?P<path>[^?#]*)(?:[?#].*)?", re.I)
_PAGE_REVISION = ("tree", "blob", "resolve", "commit", "raw")
"""What a Hub page's address has after ``org/name`` before the revision it shows."""


def hub_page(text: str) -> tuple[str, str] | None:
    """The Hub id (``org/name``) of the address of a model's page on the Hub, as a browser shows it
    (``https://huggingface.co/org/name``, ``.../tree/main``, ``.../blob/v2/config.json``, ``hf.co/...``),
    with the revision it names (``""`` where none); None where ``text`` is no Hub address. An address of
    a dataset, a Space, or of no repository, is refused."""
    m = _HUB_PAGE.fullmatch(text.strip())
    if m is None:
        return None
    parts = [unquote(p) for p in m["path"].split("/") if p]
    kinds = {"datasets": "a dataset", "spaces": "a Space"}
    if parts and parts[0] in kinds:
        raise InvalidInput("", "--repo", f"{text} names {kinds[parts[0]]}, not a model")
    if len(parts) < 2:
        raise InvalidInput("", "--repo", f"{text} names no repository (org/name)")
    revision = parts[3] if len(parts) > 3 and parts[2] in _PAGE_REVISION else ""
    return f"{parts[0]}/{parts[1]}", revision


ARTIFACTS_SHOWN = 8
"""How many of a repository's artifacts a refused ``--artifact`` names."""


def pick_artifact(repo: Repository, given: str) -> Artifact:
    """The artifact ``--artifact`` names: by its name, else by the quantisation in it (``Q4_K_M``, in
    either case) where that is one artifact's; refused naming the candidates where it is several or none."""
    exact = [a for a in repo.artifacts if a.name == given]
    if exact:
        return exact[0]
    by_quant = [a for a in repo.artifacts if a.quant and a.quant.upper() == given.upper()]
    if len(by_quant) == 1:
        return by_quant[0]
    if by_quant:
        names = _shown(a.name for a in by_quant)
        raise InvalidInput(
            "", "--artifact", f"{given} names {len(by_quant)} artifacts of the repository: {names}; give one by name"
        )
    every = _shown(f"{a.name} ({a.quant})" if a.quant else a.name for a in repo.artifacts)
    raise InvalidInput("", "--artifact", f"{given} names no artifact of the repository: {every}")


def _shown(names: Iterable[str]) -> str:
    listed = list(names)
    more = len(listed) - ARTIFACTS_SHOWN
    return ", ".join(listed[:ARTIFACTS_SHOWN]) + (f" and {more} more" if more > 0 else "")


def _of_kind(data: Any, kind: type, path: str, flag: str, what: str) -> Any:
    if not isinstance(data, kind):
        raise InvalidInput(path, flag, f"expected {what}, got {type(data).__name__}")
    return data


def load_repository(args: argparse.Namespace, client: Client | None = None) -> Repository:
    """The repository a command names: a local folder, a Hub repository (``org/name``, cached in Redis
    when the command has a client), or a listing with its config."""
    if args.repo and (args.files or args.config or args.index or args.headers):
        # which one was meant cannot be told; taking one quietly would plan a model the person did not name
        raise InvalidInput("arguments", "--repo", "give either --repo or --files with --config, not both")
    revision = args.revision or "main"
    if args.repo and not Path(args.repo).exists():
        page = hub_page(args.repo)
        if page is not None:
            repo_id, named_revision = page
            if named_revision and args.revision and named_revision != args.revision:
                raise InvalidInput(
                    "",
                    "--repo",
                    f"{args.repo} names revision {named_revision}, and --revision {args.revision}: give one of them",
                )
            args.repo, revision = repo_id, named_revision or revision  # a job is named after the id, not the page
    if args.repo:
        if not Path(args.repo).exists():
            if not looks_like_repo_id(args.repo):
                raise InvalidInput("", "--repo", f"no local folder {args.repo}, and not a Hub id (org/name)")
            try:
                return resolve(
                    args.repo,
                    revision,
                    cache=client.redis if client else None,
                    keys=client.keys if client else Keys(),
                )
            except (HubUnavailable, HubRepoNotFound) as e:
                if isinstance(e, HubRepoNotFound) and e.problem != "missing":
                    raise  # the Hub has it: gated, disabled, or no such revision
                raise NoLocalFolder(args.repo, e) from e
        try:
            check_folder(args.repo)
            return repository_from_folder(args.repo)
        except InvalidInput as e:
            listing = Path(args.repo) / "files.json"
            if not (e.problem.startswith("no weights") and listing.is_file()):
                raise flagged(e, {args.repo: "--repo"}) from e
            raise InvalidInput(
                args.repo,
                "--repo",
                f"holds a file listing, not weights: give --files {listing} --config {Path(args.repo) / 'config.json'}",
            ) from e
    if not (args.files and args.config):
        raise InvalidInput("arguments", "--files/--config", "give both --files and --config, or --repo DIR")
    index = read_json(args.index, "--index", "index_bytes") if args.index else None
    quant = read_json(args.quant_config, "--quant-config", "config_bytes") if args.quant_config else None
    headers = read_json(args.headers, "--headers", "headers_bytes") if args.headers else None
    files = _of_kind(read_json(args.files, "--files", "listing_bytes"), list, args.files, "--files", LISTING)
    config = _of_kind(
        read_json(args.config, "--config", "config_bytes"), dict, args.config, "--config", "a JSON object"
    )
    given = {f"{args.files} headers": "--headers", args.files: "--files", args.config: "--config"}
    given |= {args.index: "--index"} if args.index else {}
    try:
        check_listing(files, args.files)
        check_index(index, args.index or "")
        return repository_from_listing(
            files, config, index, hf_quant=quant, source=args.files, headers=headers, config_source=args.config
        )
    except InvalidInput as e:
        raise flagged(e, given) from e


LISTING = "a JSON list of {path, size}"
