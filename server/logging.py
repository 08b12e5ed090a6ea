"""structlog set-up: levels, rendering, and the shared event stream."""

from __future__ import annotations

import logging
import sys

import structlog

from wiremq.modules.events import EVENTS


def configure_logging(level: str = "info", fmt: str = "console") -> None:
    """Route every structlog event through the event stream, then to stderr."""
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            EVENTS,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
