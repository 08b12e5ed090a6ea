"""Fixtures the integration tests share: flow control's (``test_flow_control``,
``test_flow_subscribers``) and the console's (``console.py``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.integration.console import console, console_of  # noqa: F401  (fixtures)
from tests.integration.test_flow_control import (
    Flood,
    SlowClient,
    closing_after,
    recording_events,
)


@pytest.fixture
def floods() -> Iterator[Callable[..., Flood]]:
    """``floods(port, destination, ...)``: a publisher thread, closed after the test."""
    yield from closing_after(Flood)


@pytest.fixture
def slow_clients() -> Iterator[Callable[[int], SlowClient]]:
    """``slow_clients(port)``: a SlowClient, closed after the test (a server cannot stop
    while a client does not read what it was sent)."""
    yield from closing_after(SlowClient)


@pytest.fixture
def events() -> Iterator[list[dict[str, Any]]]:
    """Every event on the server's event stream during the test."""
    yield from recording_events()
