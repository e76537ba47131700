"""What ``producer.hub.resolve`` asks the Hugging Face Hub, and ``HfHubClient``, which asks it through
``huggingface_hub``, turning the Hub's errors into ours."""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from planner.errors import InvalidInput
from producer.errors import HubError, HubRepoNotFound, HubUnavailable

HUB_REQUEST_TIMEOUT_S = 10.0
"""How long one request to the Hub may take (the listing, then each small JSON file): far past a normal
answer, short enough that an offline caller hears so within seconds."""

HEADER_READS = 8
"""Safetensors headers read at once (one range request each): a model of 163 shards in about 20 rounds."""


# --- what the Hub is asked ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HubListing:
    """A repository's files at one commit: ``files`` as ``[{"path", "size"}]`` (other keys and folders, as
    ``{"type": "directory"}``, are left out when read)."""

    commit: str
    files: Sequence[Mapping[str, Any]]


class HubClient(Protocol):
    """What ``resolve`` needs of the Hub; ``HfHubClient`` is the real one, tests give a stub.

    A client may also read the original's safetensors headers, ``safetensors_headers(repo_id, revision,
    filenames)`` as ``HfHubClient`` does (``{file: header}``, or None where they cannot be read); one
    without that method plans by the config's arithmetic.

    Either method raises ``HubRepoNotFound`` when the Hub says the repository or revision is not there
    for this caller, and ``HubUnavailable`` (or any ``OSError``: ``ConnectionError``, ``TimeoutError``)
    when the Hub cannot be asked.
    """

    def list_files(self, repo_id: str, revision: str) -> HubListing:
        """Every file of the repository at ``revision``, with its size, and the commit that revision is."""
        ...

    def read_json(self, repo_id: str, filename: str, revision: str) -> Any:
        """The JSON data of one file of the repository at ``revision`` (``resolve`` passes the commit that
        ``list_files`` reported), or None when it has no such file."""
        ...


class HfHubClient:
    """``HubClient`` over ``huggingface_hub``: ``HfApi.model_info`` with file sizes for the listing (one
    request, which also tells the commit, so the JSON files are read from that same commit), and
    ``hf_hub_download`` for the JSON files (kept in the Hub's own cache on disk, ``cache_dir`` or
    ``HF_HOME``). The token is ``HF_TOKEN`` or the saved login unless one is given.

    Raises ``ImportError`` when ``huggingface_hub`` is not installed.
    """

    def __init__(
        self,
        *,
        token: str | None = None,
        endpoint: str | None = None,
        cache_dir: str | None = None,
        timeout: float = HUB_REQUEST_TIMEOUT_S,
    ) -> None:
        # Imported by name, not by an import statement: the package is optional, and mypy checks this
        # module the same whether it is installed or not.
        self._hub: Any = importlib.import_module("huggingface_hub")
        self._errors: Any = importlib.import_module("huggingface_hub.errors")
        self._api: Any = self._hub.HfApi(endpoint=endpoint, token=token)
        self._token = token
        self._endpoint = endpoint
        self._cache_dir = cache_dir
        self._timeout = timeout
        # The HTTP library's own errors (requests before huggingface_hub 1.0, httpx after) are the bases of
        # the Hub's HTTP error; connection failures and timeouts are raised as those, not as OSError.
        self._transport: tuple[type[BaseException], ...] = tuple(
            c
            for c in self._errors.HfHubHTTPError.__mro__
            if c.__module__.partition(".")[0] not in ("builtins", "huggingface_hub")
        )

    def list_files(self, repo_id: str, revision: str) -> HubListing:
        try:
            info = self._api.model_info(repo_id, revision=revision, files_metadata=True, timeout=self._timeout)
        except Exception as e:
            ours = self._ours(e, repo_id, revision)
            if ours is None:
                raise
            raise ours from e
        files = [{"path": s.rfilename, "size": _sibling_size(s)} for s in info.siblings or ()]
        return HubListing(commit=info.sha or revision, files=files)

    def read_json(self, repo_id: str, filename: str, revision: str) -> Any:
        try:
            path = self._hub.hf_hub_download(
                repo_id,
                filename,
                revision=revision,
                token=self._token,
                endpoint=self._endpoint,
                cache_dir=self._cache_dir,
                etag_timeout=self._timeout,
            )
        except Exception as e:
            errors = self._errors
            if isinstance(e, errors.EntryNotFoundError) and not isinstance(e, errors.LocalEntryNotFoundError):
                return None
            ours = self._ours(e, repo_id, revision)
            if ours is None:
                raise
            raise ours from e
        try:
            return json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise InvalidInput(f"{repo_id}@{revision}", filename, f"not JSON: {e}") from e

    def safetensors_headers(self, repo_id: str, revision: str, filenames: Sequence[str]) -> dict[str, Any] | None:
        """The headers of ``filenames``, ``{file: {tensor: {dtype, shape, data_offsets}}}``, by
        ``HfApi.parse_safetensors_file_metadata`` (a range read of each file's first bytes, never the data),
        ``HEADER_READS`` at a time; None where any cannot be read: the headers refine a plan, and their
        absence fails none."""

        def one(name: str) -> tuple[str, dict[str, Any]]:
            meta = self._api.parse_safetensors_file_metadata(
                repo_id, name, revision=revision, token=self._token, timeout=self._timeout
            )
            return name, {
                tensor: {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": list(t.data_offsets)}
                for tensor, t in meta.tensors.items()
            }

        try:
            with ThreadPoolExecutor(max_workers=HEADER_READS) as pool:
                return dict(pool.map(one, filenames))
        except Exception:  # no safetensors file, a header past its limit, the Hub unreachable
            return None

    def _ours(self, e: Exception, repo_id: str, revision: str) -> HubError | None:
        """The error of ours that a ``huggingface_hub`` error means; None for one that is not about the Hub."""
        errors = self._errors
        if isinstance(e, errors.GatedRepoError):
            return HubRepoNotFound(repo_id, revision, "gated")
        if isinstance(e, errors.RepositoryNotFoundError):
            return HubRepoNotFound(repo_id, revision, "missing")
        if isinstance(e, errors.RevisionNotFoundError):
            return HubRepoNotFound(repo_id, revision, "revision")
        if isinstance(e, getattr(errors, "DisabledRepoError", ())):
            return HubRepoNotFound(repo_id, revision, "disabled")
        if isinstance(e, errors.OfflineModeIsEnabled):
            return HubUnavailable(repo_id, revision, "HF_HUB_OFFLINE is set")
        if isinstance(e, errors.LocalEntryNotFoundError) and isinstance(e.__cause__, Exception):
            # hf_hub_download reports a failed request as "not in the local cache", caused by the real one.
            return self._ours(e.__cause__, repo_id, revision) or HubUnavailable(
                repo_id, revision, named_error(e.__cause__)
            )
        status = getattr(getattr(e, "response", None), "status_code", None)
        if isinstance(e, errors.HfHubHTTPError) and isinstance(status, int):
            token = "; check HF_TOKEN" if status in (401, 403) else ""
            return HubUnavailable(repo_id, revision, f"the Hub answered {status}: {_first_line(e)}{token}")
        if isinstance(e, (OSError, *self._transport)):
            return HubUnavailable(repo_id, revision, named_error(e))
        return None


def _sibling_size(sibling: Any) -> int:
    size = sibling.size
    if size is None and sibling.lfs is not None:
        size = getattr(sibling.lfs, "size", None)
    return int(size or 0)


def named_error(e: BaseException) -> str:
    return f"{type(e).__name__}: {_first_line(e)}"


def _first_line(e: BaseException) -> str:
    line = (str(e).strip().splitlines() or [""])[0]
    return line if len(line) <= 200 else line[:197] + "..."
