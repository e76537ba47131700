"""The worker's exceptions, under the planner's ``ModelplanError``."""

from __future__ import annotations

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


class WrongState(ModelplanError):
    """Raised by ``release`` and ``cancel`` when the job is not in a state they apply to."""

    def __init__(self, job_id: str, state: str, action: str, allowed: str) -> None:
        self.job_id, self.state = job_id, state
        super().__init__(f"job {job_id!r} is {state}: {action} applies only to {allowed} jobs")


class StillRunning(WrongState):
    """Raised by ``cancel`` when some replica of the job runs (on its best option or a fallback): cancel
    ends only a job that never got to run; ``release`` ends one that did, and its record says so."""

    def __init__(self, job_id: str, state: str, running: int, wanted: int) -> None:
        ModelplanError.__init__(
            self,
            f"job {job_id!r} is {state} with {running} of {wanted} replica(s) running: cancel applies only to "
            "jobs with none running; release it to free them",
        )
        self.job_id, self.state = job_id, state


class Contended(ModelplanError):
    """Raised when a job's record kept changing under a transition past the retry bound."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id!r}: its record kept changing; try again")


class RedisForbidden(ModelplanError, PermissionError):
    """Raised by the producer when Redis refuses a command for the user's ACL rules: nothing was stored."""

    def __init__(self, url: str, cause: BaseException) -> None:
        super().__init__(
            f"Redis at {url} refused a command ({cause}); check the ACL user's key patterns "
            "cover the prefix (see README: TLS, ACL users, Sentinel); nothing was stored"
        )


class RedisUnavailable(ModelplanError, ConnectionError):
    """Raised by the producer when Redis cannot be reached: nothing was stored. ``stored=False`` for a
    command that only reads, where there was nothing to store; ``hint`` says what to do instead."""

    def __init__(self, url: str, cause: BaseException, *, stored: bool = True, hint: str = "") -> None:
        self.url = url
        self.cause = cause
        tail = "; nothing was stored" if stored else ""
        super().__init__(f"Redis at {url} cannot be reached ({cause}){tail}" + (f"; {hint}" if hint else ""))


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
