"""structlog set-up: levels, rendering, and the shared event stream.

Every event from info up reaches the event stream (the admin console reads it)
whatever the configured level; the level only decides what is written to
stderr. The audit journal has hooks of its own (``modules/journal``).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

from wiremq.modules.events import EVENTS

LEVELS = logging.getLevelNamesMapping()


def _written_from(level: str) -> structlog.typing.Processor:
    lowest = LEVELS[level.upper()]

    def keep(logger: object, method_name: str, event: MutableMapping[str, Any]) -> Any:
        if LEVELS.get(method_name.upper(), logging.INFO) < lowest:
            raise structlog.DropEvent
        return event

    return keep


def configure_logging(level: str = "info", fmt: str = "console") -> None:
    """Route every structlog event through the event stream, then (from ``level``) to stderr."""
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
            _written_from(level),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            min(LEVELS[level.upper()], logging.INFO)
        ),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
