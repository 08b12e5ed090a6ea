"""Fixtures the flow-control tests share (``test_flow_control``, ``test_flow_subscribers``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.integration.test_flow_control import Flood, closing_after, recording_events


@pytest.fixture
def floods() -> Iterator[Callable[..., Flood]]:
    """``floods(port, destination, ...)``: a publisher thread, closed after the test."""
    yield from closing_after(Flood)


@pytest.fixture
def events() -> Iterator[list[dict[str, Any]]]:
    """Every event on the server's event stream during the test."""
    yield from recording_events()
