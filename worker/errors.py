"""The worker's exceptions, under the planner's ``ModelplanError``."""

from __future__ import annotations

import redis

from planner.errors import InvalidInput, ModelplanError


class BadId(InvalidInput):
    """Raised by the key module when an id could reach outside its key (``:``, ``*``, spaces, newlines)."""

    def __init__(self, what: str, value: object, longest: int = 128) -> None:
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__("", what, f"{shown} is not an id: letters, digits, '.', '_' and '-' only, up to {longest}")


class JobNotFound(ModelplanError, LookupError):
    """Raised by ``get``, ``release``, ``cancel`` and the CLI when no record has the job id."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id!r}: no such job")


class JobExists(ModelplanError):
    """Raised by ``submit`` when the job id given is already recorded with another request."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id!r}: already submitted with a different request")


CALLS = ("release", "retry")
"""The calls a refusal may tell its caller to make instead (``use``)."""


def use(call: str) -> str:
    """What a refusal tells its caller to do instead, as the Python client names it: ``use release()``.
    The CLI names its command there instead (``cli_words``)."""
    return f"use {call}()"


def cli_words(said: str, job_id: str | None) -> str:
    """A refusal's message as the CLI says it: each call it names (``use``) as the command that makes it
    for ``job_id``."""
    if not job_id:
        return said
    for call in CALLS:
        said = said.replace(use(call), f"use modelplan {call} {job_id}")
    return said


class AlreadySubmitted(JobExists):
    """Raised by ``submit`` told to refuse an id already recorded (``exists_ok=False``, as the CLI
    submits): says what that job is (its state, summary and reason) and, for a failed one, that ``retry``
    plans it again. Nothing was queued."""

    def __init__(self, job_id: str, state: str, summary: str, reason: str, *, same_request: bool = True) -> None:
        self.job_id, self.state = job_id, state
        other = "" if same_request else " with a different request"
        said = f"job {job_id!r} already exists{other}: {state} ({summary})"
        said += f": {reason}" if reason and reason != state else ""
        if state == "failed":
            said += f"; {use('retry')} to plan it again"
        ModelplanError.__init__(self, said)


class WrongState(ModelplanError):
    """Raised by ``release``, ``cancel`` and ``retry`` when the job is not in a state they apply to;
    ``instead`` says what to do about it, where another call serves (``use``)."""

    def __init__(self, job_id: str, state: str, action: str, allowed: str, instead: str = "") -> None:
        self.job_id, self.state = job_id, state
        super().__init__(
            f"job {job_id!r} is {state}: {action} applies only to {allowed} jobs" + (instead and "; ") + instead
        )


class StillRunning(WrongState):
    """Raised by ``cancel`` when some replica of the job runs (on its best option or a fallback): cancel
    ends only a job that never got to run; ``release`` ends one that did, and its record says so."""

    def __init__(self, job_id: str, state: str, running: int, wanted: int) -> None:
        ModelplanError.__init__(
            self,
            f"job {job_id!r} is {state} with {running} of {wanted} replica(s) running: cancel applies only to "
            f"jobs with none running; {use('release')} to free them",
        )
        self.job_id, self.state = job_id, state


class Contended(ModelplanError):
    """Raised when a job's record kept changing under a transition past the retry bound."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id!r}: its record kept changing; try again")


class RedisForbidden(ModelplanError, PermissionError):
    """Raised by the producer when Redis refuses a command for the user's ACL rules: nothing was stored.
    ``stored=False`` for a command that only reads, where there was nothing to store."""

    def __init__(self, url: str, cause: BaseException, *, stored: bool = True) -> None:
        self.url = url
        self.cause = cause
        tail = "; nothing was stored" if stored else ""
        super().__init__(
            f"{_redis_at(url)} refused a command ({_said(cause)}); check the ACL user's key patterns "
            f"cover the prefix (see docs/OPERATING.md: TLS, ACL users, Sentinel){tail}"
        )


class RedisUnavailable(ModelplanError, ConnectionError):
    """Raised by the producer when Redis cannot be reached: nothing was stored. ``stored=False`` for a
    command that only reads, where there was nothing to store; ``hint`` says what to do instead."""

    def __init__(self, url: str, cause: BaseException, *, stored: bool = True, hint: str = "") -> None:
        self.url = url
        self.cause = cause
        self.hint = hint
        tail = "; nothing was stored" if stored else ""
        said = f"{_redis_at(url)} cannot be reached ({_said(cause)}){tail}"
        super().__init__(said + (f"; {hint}" if hint else ""))


class RedisFailed(ModelplanError):
    """Raised by the producer when Redis answers a command with an error that is neither an ACL refusal
    (``RedisForbidden``) nor a lost connection (``RedisUnavailable``): a script running past Redis'
    busy-reply-threshold (BUSY), a read-only replica (READONLY), memory at maxmemory (OOM), a failed
    snapshot (MISCONF), a key of another type (WRONGTYPE), a reply that is not Redis' protocol. The message
    gives what Redis said, its code included, and what to do where that is known; it says nothing of what
    was stored, as an error after a write (a replica's acknowledgement) leaves the write in place."""

    def __init__(self, url: str, cause: BaseException) -> None:
        self.url = url
        self.cause = cause
        said = _said(cause)
        hint = REPLY_HINTS.get(said.rpartition(PIPELINE_SAID)[2].split(" ", 1)[0], "")
        super().__init__(f"{_redis_at(url)} answered with an error ({said})" + (f"; {hint}" if hint else ""))


REPLY_HINTS = {
    "BUSY": "a script has run past Redis' busy-reply-threshold: try again once it ends",
    "READONLY": "this is a read-only replica: give the master's URL, or a redis+sentinel:// one",
    "OOM": "Redis is at its maxmemory: free memory or raise maxmemory",
    "MISCONF": "Redis refuses writes while it cannot save to disk: see its log",
    "WRONGTYPE": "a key under the prefix holds another type: is something else using this prefix?",
}
"""What a person can do about the reply codes that come from the server's state, not from modelplan."""

_CODES: dict[type[BaseException], str] = {
    redis.exceptions.ReadOnlyError: "READONLY",
    redis.exceptions.OutOfMemoryError: "OOM",
    redis.exceptions.NoPermissionError: "NOPERM",
    redis.exceptions.BusyLoadingError: "LOADING",
    redis.exceptions.ExecAbortError: "EXECABORT",
    redis.exceptions.NoScriptError: "NOSCRIPT",
    redis.exceptions.TryAgainError: "TRYAGAIN",
}
"""The reply codes redis-py takes off the front of an error it has a class for."""

PIPELINE_SAID = "caused error: "
"""What redis-py puts before the reply of a command in a pipeline that failed ("Command # 2 (...) of
pipeline caused error: OOM ...")."""

SAID_CHARS = 300
"""The most of Redis' own words a message quotes: a script's error can run long."""


def _redis_at(url: str) -> str:
    """ "Redis at URL", or "Redis" where the URL is not known (a client made on a connection)."""
    return f"Redis at {url}" if url else "Redis"


def _said(cause: BaseException) -> str:
    """What Redis said, on one line, with the code redis-py took off given back."""
    said = " ".join(str(cause).split())
    code = next((c for kind, c in _CODES.items() if isinstance(cause, kind)), None)
    before, sep, reply = said.rpartition(PIPELINE_SAID)
    if code and not reply.startswith(code):
        said = f"{before}{sep}{code} {reply}"
    return said if len(said) <= SAID_CHARS else said[: SAID_CHARS - 3] + "..."


def _refused_in_script(cause: redis.RedisError) -> bool:
    """A command a script or function ran as the caller, refused by the caller's ACL rules: Redis answers
    these as a script error, not as NOPERM."""
    said = str(cause)
    return "The user executing the script can't" in said or "has no permissions to" in said


def redis_failure(url: str, cause: redis.RedisError, *, stored: bool = True) -> ModelplanError:
    """The error to raise for ``cause``, met talking to Redis at ``url`` (redacted by the caller; "" when
    not known). ``stored=False`` for a command that only reads."""
    if isinstance(cause, redis.exceptions.NoPermissionError) or _refused_in_script(cause):
        return RedisForbidden(url, cause, stored=stored)
    if isinstance(cause, redis.exceptions.AuthenticationError):
        return RedisUnavailable(url, cause, stored=stored, hint="check the user and password in the URL")
    if isinstance(cause, redis.exceptions.BusyLoadingError):
        return RedisUnavailable(url, cause, stored=stored, hint="it is loading its data: try again shortly")
    if isinstance(cause, redis.ConnectionError | redis.TimeoutError):
        return RedisUnavailable(url, cause, stored=stored)
    return RedisFailed(url, cause)


class Refused(ModelplanError):
    """Raised by the planning queue's job class, before anything is imported or called, for a queued job
    that is not one of modelplan's job functions with arguments of their kinds under the worker's own
    prefix."""

    def __init__(self, rq_job_id: str, func: object, why: str) -> None:
        self.rq_job_id = rq_job_id
        shown = str(func)
        self.func = shown if len(shown) <= 120 else shown[:117] + "..."
        super().__init__(f"queued job {rq_job_id!r} refused: it names {self.func!r}, {why}; it was not run")


class BadRecord(ModelplanError):
    """Raised by the store's readers for a stored record that does not parse, or that a newer version of
    modelplan wrote (``newer``): one line naming the key and what is wrong."""

    def __init__(
        self, key: str, what: str, raw: bytes = b"", *, newer: bool = False, member: str | None = None
    ) -> None:
        self.container, self.member = key, member
        """The key, and the member of that index or field of that hash when the bad part is one."""
        shown = None if member is None else member if len(member) <= 80 else member[:77] + "..."
        self.key = key if shown is None else f"{key} {shown!r}"
        self.what, self.raw, self.newer = what, raw, newer
        super().__init__(f"{self.key}: {what}")


class NotReplicated(ModelplanError):
    """Raised by the client when a write reached the master but not as many replicas as it was told to wait
    for (``MODELPLAN_WAIT_REPLICAS``) in time: a failover now could lose it. Repeating it is safe (a submit
    with the same job id is one job)."""

    def __init__(self, what: str, acked: int, wanted: int, timeout_ms: int) -> None:
        self.acked, self.wanted = acked, wanted
        super().__init__(
            f"{what}: stored on the master, but {acked} of {wanted} replicas had it within {timeout_ms} ms; "
            "a failover now could lose it (repeat it to be sure: the same job id is one job)"
        )


class WrongType(ModelplanError):
    """Raised by the store when a key a script would write holds another type and is not one it may
    repair (a hint such as the wake-up signal is deleted and the call made again): nothing was written."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(
            f"{key} holds another type than modelplan writes there: nothing was written; remove or fix the key"
        )


class NotOwner(ModelplanError, PermissionError):
    """Raised by ``release``, ``cancel`` and ``scale`` acting for a client (an entry of its request stream,
    or of the shared one) on a job that client did not submit. The message does not name the owner."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        ModelplanError.__init__(self, f"job {job_id!r} belongs to another client")


class JobTaken(NotOwner, JobExists):
    """Raised by ``submit`` acting for a client when the job id is already recorded as another client's
    (or, through the shared stream, as any client's): the id is taken, whatever the request."""


class OverQuota(ModelplanError):
    """Raised by the request reader for a submit or scale past a deployment's bound on replicas: ``setting``
    names the worker's environment variable that sets it."""

    def __init__(self, job_id: str, setting: str, problem: str) -> None:
        self.job_id, self.setting = job_id, setting
        super().__init__(f"job {job_id!r}: {problem} ({setting}); nothing was changed")


class FunctionsMissing(ModelplanError):
    """Raised where a script is run on a server that lacks modelplan's Functions library (of this version)
    and the login may neither load it nor run scripts of its own, as least privilege has it."""

    def __init__(self, library: str) -> None:
        self.library = library
        super().__init__(
            f"modelplan's functions (library {library}) are not loaded on this Redis, and this login may neither "
            "load them nor run scripts: have the operator run 'modelplan setup-redis'"
        )
