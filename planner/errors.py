"""The planner's exceptions. ``ModelplanError`` is the base that every package's errors share."""

from __future__ import annotations


class ModelplanError(Exception):
    """Base of every error modelplan raises on purpose; anything else is a bug."""


class InvalidInput(ModelplanError, ValueError):
    """Raised at the edge when a listing, config, pool or request is not usable.

    The message says where (``source``), which field, what was given and what is allowed, so that a
    person can fix it without reading a traceback.
    """

    def __init__(self, source: str, field: str, problem: str) -> None:
        self.source = source
        self.field = field
        self.problem = problem
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{field}: {problem}")
