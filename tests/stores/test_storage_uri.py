"""The storage factory: each kind of bad URI or unreachable server is one readable error."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.defaults import location
from tests.integration.clients import free_port
from wiremq.stores.errors import StoreOpenError
from wiremq.stores.storage import open_database, redact

from .store_fixtures import database_append, message


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("mysql://u:pw@host/db", "unknown storage URI scheme 'mysql'"),
        ("zeo://127.0.0.1", "needs a host and a port"),
        ("zeo://127.0.0.1:notaport", "bad port"),
        ("postgresql://u:pw@127.0.0.1:99999/db", "bad port"),
        ("file://otherhost/Data.fs", "local path"),
    ],
)
def test_bad_uris_are_refused_with_a_reason(uri: str, expected: str) -> None:
    with pytest.raises(StoreOpenError, match=expected) as caught:
        open_database(location(uri))
    assert "pw" not in str(caught.value)


def test_an_unreachable_zeo_server_is_reported_after_the_timeout() -> None:
    port = free_port()
    with pytest.raises(StoreOpenError, match=f"cannot reach the ZEO server at 127.0.0.1:{port}"):
        open_database(location(f"zeo://127.0.0.1:{port}", connect_timeout=0.5))


def test_an_unreachable_postgresql_server_is_reported_without_the_password() -> None:
    port = free_port()
    with pytest.raises(StoreOpenError, match=f"PostgreSQL at 127.0.0.1:{port}/db") as caught:
        open_database(location(f"postgresql://user:s3cret@127.0.0.1:{port}/db", connect_timeout=1))
    assert "s3cret" not in str(caught.value)


def test_a_plain_path_opens_a_filestorage_and_creates_its_folder(tmp_path: Path) -> None:
    path = tmp_path / "new" / "folder" / "Data.fs"
    db = open_database(location(str(path)))
    try:
        database_append(db, [message("m")])
    finally:
        db.close()
    assert path.stat().st_size > 100


def test_a_filestorage_in_use_is_refused(tmp_path: Path) -> None:
    uri = (tmp_path / "Data.fs").as_uri()
    db = open_database(location(uri))
    try:
        with pytest.raises(StoreOpenError, match="in use by another process"):
            open_database(location(uri))
    finally:
        db.close()


def test_redact_hides_only_the_password() -> None:
    assert redact("postgresql://u:pw@h:5/d") == "postgresql://u:***@h:5/d"
    assert redact("zeo://h:5") == "zeo://h:5"
