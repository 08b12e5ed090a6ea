"""Shared fixtures: one reactor thread per test run, servers on free loopback ports."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from twisted.internet import reactor as _reactor
from twisted.internet.threads import blockingCallFromThread

from wiremq.config.xmlconfig import load_config
from wiremq.server.app import WiremqServer
from wiremq.server.logging import configure_logging

StartServer = Callable[..., WiremqServer]


@pytest.fixture(scope="session")
def reactor() -> Iterator[object]:
    """The Twisted reactor, running in a background thread for the whole test run."""
    configure_logging("warning")
    thread = threading.Thread(
        target=_reactor.run, kwargs={"installSignalHandlers": False}, daemon=True
    )
    thread.start()
    yield _reactor
    _reactor.callFromThread(_reactor.stop)  # type: ignore[attr-defined]
    thread.join(10)


def call_in_reactor(reactor: object, function: Callable[..., object], *args: object) -> object:
    """Run ``function`` on the reactor thread and return its (Deferred's) result."""
    return blockingCallFromThread(reactor, function, *args)


@pytest.fixture
def start_server(reactor: object, tmp_path: Path) -> Iterator[StartServer]:
    """Start in-process servers on free ports; they are stopped after the test.

    ``start_server(config_xml=None, **{"Group.name": "value"})``
    """
    servers: list[WiremqServer] = []

    def start(config_xml: str | None = None, **overrides: str) -> WiremqServer:
        path = None
        if config_xml is not None:
            path = tmp_path / f"config-{len(servers)}.xml"
            path.write_text(config_xml)
        config = load_config(
            path,
            {
                "StompListener.port": "0",
                "Server.datadir": str(tmp_path / "data"),
                # Kept data folders would hold a reserve each (the disk-full tests set theirs).
                "DiskSpace.reservebytes": "0",
                **overrides,
            },
        )

        def make() -> WiremqServer:
            server = WiremqServer(config, reactor)
            server.start()
            return server

        server = call_in_reactor(reactor, make)
        assert isinstance(server, WiremqServer)
        servers.append(server)
        return server

    yield start
    for server in servers:
        call_in_reactor(reactor, server.stop)


@pytest.fixture
def server(start_server: StartServer) -> WiremqServer:
    """A server with the default configuration."""
    return start_server()
