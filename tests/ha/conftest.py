"""The HA tests: a real PostgreSQL cluster per test module, a fresh database per test."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from tests.stores.store_servers import PostgresServer, postgres_unavailable

_databases = itertools.count(1)


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL cluster for the module's tests (fsync off)."""
    reason = postgres_unavailable()
    if reason:
        pytest.skip(reason)
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.remove()


@pytest.fixture
def database(postgres: PostgresServer) -> str:
    """The URI of a new, empty database of the module's cluster."""
    return postgres.create_database(f"ha{next(_databases)}")
