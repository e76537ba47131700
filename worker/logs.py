"""modelplan's loggers, with a library's manners.

modelplan's commands (``worker``, ``agent`` and the rest) configure structlog (``configure_logging``) and
write JSON lines. Imported by another service, modelplan configures nothing and prints nothing: while
structlog is left unconfigured, its events go to the standard library's ``logging`` under ``modelplan.*``
(one ``event key=value`` line each), where they appear only as the application's handlers say; an
application that configures structlog gets them through its own configuration.
"""

from __future__ import annotations

import logging
from typing import Any

import structlog

logging.getLogger("modelplan").addHandler(logging.NullHandler())


class Logger:
    """A structlog logger while structlog is configured, else a standard-library one of the same name."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._stdlib: Any = structlog.wrap_logger(
            logging.getLogger(name),
            processors=[
                structlog.contextvars.merge_contextvars,
                structlog.stdlib.filter_by_level,
                structlog.processors.KeyValueRenderer(key_order=["event"], sort_keys=True),
            ],
            wrapper_class=structlog.stdlib.BoundLogger,
        )

    def __getattr__(self, method: str) -> Any:
        target = structlog.get_logger(self.name) if structlog.is_configured() else self._stdlib
        return getattr(target, method)


def get_logger(name: str) -> Any:
    return Logger(name)


class StructlogHandler(logging.Handler):
    """Hands a standard-library record (RQ's, say) to structlog, so that it is written as modelplan's own
    lines are: one JSON object, its text under ``message``, a traceback folded into ``exception``."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            fields: dict[str, Any] = {"logger": record.name, "message": record.getMessage()}
            if record.exc_info:
                fields["exc_info"] = record.exc_info
            structlog.get_logger(record.name).log(record.levelno, "library_log", **fields)
        except Exception:
            self.handleError(record)


def route_to_structlog(name: str) -> None:
    """Send the ``name`` logger's records (and its children's) through structlog, and nowhere else. RQ adds
    its own plain-text handlers only to a logger with none above it, so one here keeps them off."""
    logger = logging.getLogger(name)
    if not any(isinstance(h, StructlogHandler) for h in logger.handlers):
        logger.addHandler(StructlogHandler())
    logger.propagate = False
