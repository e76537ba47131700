"""The worker's exceptions, under the planner's ``ModelplanError``."""

from __future__ import annotations

from planner.errors import InvalidInput, ModelplanError


class BadId(InvalidInput):
    """Raised by the key module when an id could reach outside its key (``:``, ``*``, spaces, newlines)."""

    def __init__(self, what: str, value: object) -> None:
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__("", what, f"{shown} is not an id: letters, digits, '.', '_' and '-' only, up to 128")


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
