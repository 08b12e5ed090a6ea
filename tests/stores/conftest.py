"""Shared fixtures of the store tests: backends, and a factory for stores on them.

The mixin suites (``facade_*_tests.py``) ask for ``wal`` (the message store: the
write-ahead log in front of the databases); each backend class in
``test_facade_backends.py`` provides a ``backend`` fixture naming where the
stores live. Tests that share one ZEO server or one PostgreSQL database keep
apart by giving their stores root names of their own.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from .store_fixtures import WalStores
from .store_servers import postgres_cluster, postgres_unavailable, zeo_server

_unique = itertools.count()


@pytest.fixture
def wal(backend: str, tmp_path: Path) -> Iterator[WalStores]:
    """A ``WalStore`` on the backend, with its log in a folder of its own."""
    opened = WalStores(backend, tmp_path, f"w{next(_unique)}")
    yield opened
    opened.close()


@pytest.fixture
def file_backend(tmp_path: Path) -> str:
    return (tmp_path / "data" / "Data.fs").as_uri()


@pytest.fixture(scope="session")
def zeo_backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with zeo_server(tmp_path_factory.mktemp("zeo")) as uri:
        yield uri


@pytest.fixture(scope="session")
def postgresql_backend() -> Iterator[str]:
    reason = postgres_unavailable()
    if reason:
        pytest.skip(reason)
    with postgres_cluster() as uri:
        yield uri
