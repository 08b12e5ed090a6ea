"""Kill -9 and restart tests: a real ``wiremq serve`` process, killed under load."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.serverproc import ServerProcess, Servers


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "reliability: kills a real server process under load and restarts it on the same data",
    )


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Servers]:
    """Start ``wiremq serve`` processes; every one still running is killed on teardown,
    whether the test passed or not."""
    started: list[ServerProcess] = []

    def start(data: Path, name: str) -> ServerProcess:
        server = ServerProcess.start(data, tmp_path / f"{name}.log")
        started.append(server)
        return server

    yield start
    for server in started:
        server.kill()
