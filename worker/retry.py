"""How a worker's loops carry on after a failure: a pause that grows while the same loop keeps failing, and
each run of failures said once, Redis away or busy told apart from an error in modelplan's own code."""

from __future__ import annotations

import redis

from worker import constants as C
from worker import logs

log = logs.get_logger("modelplan.worker")


def busy(error: BaseException) -> bool:
    """Whether Redis refused for a while rather than for good: loading its data (``LOADING``), or busy
    running a script past its time limit (``BUSY``, until the script ends or is killed)."""
    if isinstance(error, redis.exceptions.BusyLoadingError):
        return True
    return isinstance(error, redis.ResponseError) and str(error).startswith("BUSY ")


def unavailable(error: BaseException) -> bool:
    """Whether ``error`` says Redis cannot answer now (away, timed out, loading, busy), not that a command
    was wrong: the loop waits and tries the same again."""
    return isinstance(error, redis.ConnectionError | redis.TimeoutError) or busy(error)


class Backoff:
    """The pauses of a loop that keeps failing: ``first_s``, doubled after each failure in a row, up to
    ``RETRY_MAX_S``; back to ``first_s`` once a try succeeds."""

    def __init__(self, first_s: float) -> None:
        self.first_s = first_s
        self.failures = 0

    def failed(self) -> float:
        """A try failed: how long to wait before the next."""
        pause: float = min(C.RETRY_MAX_S, self.first_s * 2.0 ** min(self.failures, 32))
        self.failures += 1
        return max(pause, 0.0)

    def succeeded(self) -> None:
        self.failures = 0


class Outage:
    """What goes wrong in one of a worker's loops, said once per run of the same trouble, not a traceback
    each time round: Redis away (or busy) as one line (``{loop}_failed``), and once again when it is back
    (``{loop}_resumed``); any other error with its traceback (``failed_event``), once for each kind in a
    row."""

    def __init__(self, loop: str, failed_event: str | None = None) -> None:
        self.loop = loop
        self.failed_event = failed_event or f"{loop}_failed"
        self.down = False
        self.failing = ""

    def began(self, error: Exception) -> None:
        if not self.down:
            log.warning(f"{self.loop}_failed", error=str(error)[:200], redis_unavailable=True)
            self.down = True

    def failed(self, error: Exception) -> None:
        """A try failed with ``error``: Redis away or busy (``began``), or an error, logged with its
        traceback unless the last try failed the same way."""
        if unavailable(error):
            self.began(error)
            return
        kind = f"{type(error).__name__}:{str(error)[:80]}"
        if kind != self.failing:
            log.exception(self.failed_event, error_type=type(error).__name__)
            self.failing = kind

    def over(self) -> None:
        if self.down:
            log.info(f"{self.loop}_resumed")
            self.down = False
        self.failing = ""
