"""Structured logging set-up shared by every streamplane process (structlog, one JSON or console line per event)."""

from __future__ import annotations

import logging
import os
import sys

import structlog


def configure_logging(level: str | None = None, *, json: bool | None = None) -> None:
    """Configure structlog for a process: to stderr, level from STREAMPLANE_LOG_LEVEL (default info).

    JSON lines when STREAMPLANE_LOG_FORMAT=json or stderr is not a terminal; a console renderer otherwise.
    """
    level_name = (level or os.environ.get("STREAMPLANE_LOG_LEVEL", "info")).upper()
    numeric = logging.getLevelName(level_name)
    if not isinstance(numeric, int):
        numeric = logging.INFO
    if json is None:
        fmt = os.environ.get("STREAMPLANE_LOG_FORMAT", "")
        json = fmt == "json" or (fmt != "console" and not sys.stderr.isatty())
    renderer = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
