"""The storage factory: a storage URI from config.xml in, a ZODB database out.

- ``file:///path/to/Data.fs`` or a plain path: the embedded FileStorage (default)
- ``zeo://host:port[/storage-name]``: a ZEO server, for stores shared over the network
- ``postgresql://user:pass@host:port/dbname``: PostgreSQL through RelStorage,
  history-free (nothing but current data is kept)

Every way this can fail ends in ``StoreOpenError`` with a sentence an
operator can act on; no password is ever repeated in one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, urlsplit, urlunsplit

from ZODB import DB

from .errors import StoreOpenError
from .filestorage import open_file_storage
from .leandb import LeanDB
from .model import BLOCK_BYTES


@dataclass(frozen=True, slots=True)
class Location:
    """Where a store's database is and how to open it.

    ``connect_timeout`` bounds the wait for a ZEO or PostgreSQL server;
    ``cache_size`` is the number of objects each connection keeps in memory
    (the index cache: raise it with indexcachesize), and at most as many bytes
    as that many full message blocks take: a block holding one large message
    (100 MiB, say) leaves the cache after the transaction that wrote or read
    it, instead of staying until a thousand other objects have pushed it out.
    In HA mode ``client_name`` names the process (``hadatabase``), so that a node
    taking over can end a deposed active's database sessions.
    """

    uri: str
    connect_timeout: float
    cache_size: int
    client_name: str = "wiremq"  # a PostgreSQL connection's application name


def open_database(location: Location) -> DB:
    """Open the database a location names."""
    uri, cache_size = location.uri, location.cache_size
    parts = urlsplit(uri)
    opener = _OPENERS.get(parts.scheme)
    if opener is None:
        raise StoreOpenError(
            f"unknown storage URI scheme {parts.scheme!r} in {redact(uri)}: "
            f"use file://, zeo:// or postgresql://"
        )
    storage = opener(parts, location)
    try:
        return LeanDB(storage, cache_size=cache_size, cache_size_bytes=cache_size * BLOCK_BYTES)
    except Exception as exc:
        storage.close()
        raise StoreOpenError(f"cannot open the database at {redact(uri)}: {exc}") from exc


def redact(uri: str) -> str:
    """The URI with any password replaced, for messages and logs."""
    parts = urlsplit(uri)
    if parts.password is None:
        return uri
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def _file(parts: SplitResult, location: Location) -> Any:
    if parts.netloc not in ("", "localhost"):
        raise StoreOpenError(f"file storage URI must name a local path, not host {parts.netloc!r}")
    if not parts.path:
        raise StoreOpenError("file storage URI names no path: use file:///path/to/Data.fs")
    return open_file_storage(Path(parts.path))


def _zeo(parts: SplitResult, location: Location) -> Any:
    from ZEO.ClientStorage import ClientStorage
    from ZEO.Exceptions import ClientDisconnected

    where = _host_port(parts, "zeo")
    name = parts.path.strip("/") or "1"
    connect_timeout = location.connect_timeout
    try:
        return ClientStorage(where, storage=name, wait_timeout=connect_timeout)
    except ClientDisconnected as exc:
        raise StoreOpenError(
            f"cannot reach the ZEO server at {where[0]}:{where[1]} "
            f"(storage {name!r}) within {connect_timeout:g} s"
        ) from exc
    except Exception as exc:  # the server answered, but not as a ZEO storage would
        raise StoreOpenError(f"ZEO server at {where[0]}:{where[1]} refused: {exc}") from exc


def _postgresql(parts: SplitResult, location: Location) -> Any:
    try:
        import psycopg2
        from psycopg2.extensions import make_dsn, parse_dsn
        from relstorage.adapters.postgresql import PostgreSQLAdapter
        from relstorage.options import Options
        from relstorage.storage import RelStorage
    except ImportError as exc:
        raise StoreOpenError(
            f"a postgresql:// storage needs RelStorage and psycopg2 installed ({exc})"
        ) from exc

    host, port = _host_port(parts, "postgresql", default_port=5432)
    options = Options(keep_history=False)
    try:
        # RelStorage appends "key=value" settings to the DSN, so it must be in that form.
        settings = parse_dsn(urlunsplit(parts._replace(scheme="postgresql")))
        settings.setdefault("connect_timeout", str(max(1, round(location.connect_timeout))))
        settings.setdefault("application_name", location.client_name)
        dsn = make_dsn(**settings)
        return RelStorage(PostgreSQLAdapter(dsn=dsn, options=options), options=options)
    except psycopg2.Error as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise StoreOpenError(
            f"cannot use PostgreSQL at {host}:{port}{parts.path}: {first_line}"
        ) from exc


def _host_port(parts: SplitResult, scheme: str, default_port: int | None = None) -> tuple[str, int]:
    try:
        port = parts.port or default_port
    except ValueError as exc:
        raise StoreOpenError(f"{scheme}:// URI has a bad port: {exc}") from exc
    if not parts.hostname or port is None:
        raise StoreOpenError(f"{scheme}:// URI needs a host and a port, e.g. {scheme}://host:port")
    return parts.hostname, port


_OPENERS: dict[str, Callable[[SplitResult, Location], Any]] = {
    "": _file,
    "file": _file,
    "zeo": _zeo,
    "postgresql": _postgresql,
    "postgres": _postgresql,
}
