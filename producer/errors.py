"""The producer's exceptions, under the planner's ``ModelplanError``.

Resolving a Hugging Face Hub repository (``producer.hub``) fails in two ways a person can act on: the Hub
cannot be asked (offline, unreachable, or ``huggingface_hub`` not installed), or it answers that the
repository is not there for this caller (missing, private, gated, or no such revision).
"""

from __future__ import annotations

from typing import Literal

from planner.errors import ModelplanError

ALTERNATIVES = (
    "give the repository another way: --files FILES.json --config CONFIG.json (its file listing and its "
    "config.json), or --repo DIR (a folder holding a downloaded snapshot)"
)
"""What a person can do instead of asking the Hub; every error that means "no Hub" ends with it."""

RepoProblem = Literal["missing", "gated", "revision", "disabled"]


class HubError(ModelplanError):
    """Base of the errors ``producer.hub.resolve`` raises about the Hub; ``repo_id`` and ``revision`` say
    which repository was asked for."""

    def __init__(self, repo_id: str, revision: str, message: str) -> None:
        self.repo_id = repo_id
        self.revision = revision
        super().__init__(message)

    def at(self, revision: str) -> HubError:
        """The same error about ``revision``: a client asked for the commit a branch pointed at reports
        that commit, and the person asked for the branch."""
        raise NotImplementedError


class HubUnavailable(HubError, ConnectionError):
    """Raised by ``producer.hub.resolve`` (through ``HfHubClient``) when the repository is not in the cache
    and the Hub cannot be asked: no network, ``HF_HUB_OFFLINE`` set, a timeout, or the Hub answering with
    an error of its own (5xx, 429, a refused token). Nothing was cached."""

    def __init__(self, repo_id: str, revision: str, reason: str, *, hint: str = ALTERNATIVES) -> None:
        self.reason = reason
        self.hint = hint
        super().__init__(repo_id, revision, f"{repo_id}@{revision}: cannot ask the Hugging Face Hub ({reason}); {hint}")

    def at(self, revision: str) -> HubUnavailable:
        return HubUnavailable(self.repo_id, revision, self.reason, hint=self.hint)


class HubClientMissing(HubUnavailable):
    """Raised by ``producer.hub.resolve`` when the repository is not in the cache, no Hub client was given,
    and ``huggingface_hub`` is not installed."""

    def __init__(self, repo_id: str, revision: str) -> None:
        super().__init__(
            repo_id,
            revision,
            "huggingface_hub is not installed",
            hint=f"pip install huggingface_hub, or {ALTERNATIVES}",
        )

    def at(self, revision: str) -> HubClientMissing:
        return HubClientMissing(self.repo_id, revision)


class HubRepoNotFound(HubError, LookupError):
    """Raised by ``producer.hub.resolve`` (through ``HfHubClient``) when the Hub answers that the repository
    does not exist or is private (``missing``: the Hub does not tell the two apart), that it is gated and
    this caller has no access (``gated``), that it has no such revision (``revision``), or that its author
    disabled it (``disabled``). Nothing was cached."""

    def __init__(self, repo_id: str, revision: str, problem: RepoProblem) -> None:
        self.problem = problem
        url = f"https://huggingface.co/{repo_id}"
        messages: dict[RepoProblem, str] = {
            "missing": (
                f"{repo_id}: no such model repository on the Hugging Face Hub, or a private one; for a private "
                "repository set HF_TOKEN to a token that can read it"
            ),
            "gated": (
                f"{repo_id}: gated on the Hugging Face Hub; request access at {url}, then set HF_TOKEN to a "
                f"token of the account that has it; or {ALTERNATIVES}"
            ),
            "revision": (
                f"{repo_id}: no revision {revision!r} on the Hugging Face Hub (a branch, tag or commit); "
                f"see {url}/tree/main for its branches"
            ),
            "disabled": f"{repo_id}: disabled by its author on the Hugging Face Hub",
        }
        super().__init__(repo_id, revision, messages[problem])

    def at(self, revision: str) -> HubRepoNotFound:
        return HubRepoNotFound(self.repo_id, revision, self.problem)


class NoAnswer(ModelplanError, TimeoutError):
    """Raised by a client acting through its own request stream (``Client(client_id=...)``) when no worker
    answered its entry in time: the entry stays on the stream, and is carried out once a worker reads it."""

    def __init__(self, what: str, stream: str, timeout_s: float) -> None:
        self.stream = stream
        super().__init__(
            f"{what}: no answer on {stream} within {timeout_s:g} s; no worker reads this client's stream (is the "
            "client registered: modelplan client add?), and the entry is carried out once one does"
        )


class RequestRefused(ModelplanError):
    """Raised by a client acting through its own request stream for a refusal of a kind it does not know
    (a newer worker's): the message is the worker's reason."""


class NoLocalFolder(ModelplanError, LookupError):
    """Raised for a ``--repo`` in the form of a Hub id (``org/name``, as a folder's path can be too) that is
    no local folder, when the Hub cannot give it either: the Hub cannot be asked, or it has no such
    repository. The message says both, the folder first: a mistyped path reads as a Hub id."""

    def __init__(self, folder: str, hub_error: HubError) -> None:
        self.folder = folder
        self.hub_error = hub_error
        super().__init__(f"no local folder {folder}; as a Hub repository: {hub_error}")


class NotServing(ModelplanError):
    """Raised by ``Client.wait_serving`` when a job's engines do not all serve: the time given passed first,
    the job ended, or an engine of it ended or failed to start (``why`` says which, with the record's reason).
    ``record`` is the job's record as last read."""

    def __init__(self, job_id: str, why: str, record: object = None) -> None:
        self.job_id = job_id
        self.why = why
        self.record = record
        super().__init__(f"job {job_id} is not serving: {why}")
