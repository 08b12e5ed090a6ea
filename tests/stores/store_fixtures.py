"""Opening stores on a backend in tests, the messages the tests store, and reading them back."""

from __future__ import annotations

from collections.abc import MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ZODB import DB

from tests.defaults import WAL_OPTIONS, location
from wiremq.stores.api import Committed, StoreTransaction
from wiremq.stores.logstore import open_session
from wiremq.stores.messagestore import WalStore
from wiremq.stores.model import LogSet
from wiremq.stores.records import StoredMessage
from wiremq.stores.storage import open_database


def message(
    message_id: str,
    destination: str = "/queue/a",
    body: bytes = b"body",
    expires: int = 0,
    headers: tuple[tuple[str, str], ...] = (("k", "v"),),
) -> StoredMessage:
    return StoredMessage(message_id, destination, headers, body, expires=expires, timestamp=1)


QUEUE = "/queue/a"


class Unpicklable(bytes):
    """A body that cannot be written, so the append fails."""

    def __reduce_ex__(self, protocol: object) -> tuple[object, ...]:
        raise TypeError("this body cannot be stored")


def database_append(db: DB, messages: list[StoredMessage], root: str = "persqueue") -> list[int]:
    """Append ``messages`` to /queue/a of a store's database in one ZODB commit (noted
    "append N"), as a catch-up does; their positions."""
    session = open_session(db, root, LogSet)
    try:
        with session.write(f"append {len(messages)}") as logs:
            first = logs.log(QUEUE).last_seq + 1
            seqs = list(range(first, first + len(messages)))
            logs.append_at(QUEUE, list(zip(seqs, messages, strict=True)), seqs[-1])
    finally:
        session.close()
    return seqs


def database_remove(db: DB, seqs: list[int], root: str = "persqueue") -> None:
    """Remove positions of /queue/a in one ZODB commit (noted "remove N")."""
    session = open_session(db, root, LogSet)
    try:
        with session.write(f"remove {len(seqs)}") as logs:
            logs.discard(QUEUE, seqs)
    finally:
        session.close()


def queue_ids(uri: str) -> list[str]:
    """Open the database at ``uri`` afresh (recovering it if need be) and list /queue/a."""
    db = open_database(location(uri))
    session = open_session(db, "persqueue", LogSet)
    try:
        with session.read() as logs:
            found = logs.logs.get(QUEUE)
            if found is None:
                return []
            messages, _, _, _ = found.read(0, now_ms=0, limit=1 << 30, max_bytes=1 << 62)
        return [m.message_id for _, m in messages]
    finally:
        session.close()
        db.close()


def recovery_events(logs: list[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    """The ``store.recovered`` events among captured log entries."""
    return [e for e in logs if e["event"] == "store.recovered"]


class WalStores:
    """Opens a ``WalStore`` on one backend, and reopens it after a clean close or a crash.

    On FileStorage the two stores are two files (the default layout); on a
    server they share its database under root names of their own.
    """

    def __init__(
        self, uri: str, folder: Path, tag: str, connect_timeout: float | None = None, **options: Any
    ) -> None:
        wait = {} if connect_timeout is None else {"connect_timeout": connect_timeout}
        if uri.startswith("file:"):
            data = Path(urlsplit(uri).path).parent
            self.locations = (
                location((data / "persqueue.fs").as_uri(), **wait),
                location((data / "topics.fs").as_uri(), **wait),
            )
        else:
            self.locations = (location(uri, **wait), location(uri, **wait))
        self.wal_dir = folder / f"wal-{tag}"
        self._tag = tag
        self.options = {**WAL_OPTIONS, "segment_bytes": 1 << 20, **options}
        self._store: WalStore | None = None

    def open(self, **options: Any) -> WalStore:
        self.close()
        self._store = WalStore(
            self.wal_dir,
            *self.locations,
            queue_root=f"persqueue-{self._tag}",
            topic_root=f"topics-{self._tag}",
            **{**self.options, **options},
        )
        return self._store

    def restart(self) -> WalStore:
        """Close cleanly (everything applied to ZODB) and open again."""
        return self.open()

    def crash(self) -> WalStore:
        """Let go of everything as a killed process would (nothing more applied), and
        open again: the open replays the log."""
        if self._store is not None:
            self._store._close_all()
            self._store = None
        return self.open()

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


def commit(store: WalStore, **changes: Any) -> Committed:
    """Commit one ``StoreTransaction`` made of ``changes``; its result."""
    (result,) = store.commit([StoreTransaction(**changes)])
    return result


def send(store: WalStore, *messages: StoredMessage) -> list[int | None]:
    return list(commit(store, appends=messages).positions)


def stored_ids(store: WalStore, destination: str = "/queue/a", after_seq: int = 0) -> list[str]:
    """The ids stored in a destination after a position, in order (none counts as expired)."""
    batch = store.read(destination, now_ms=0, after_seq=after_seq, limit=10**6, max_bytes=10**12)
    return [m.message_id for _, m in batch.messages]
