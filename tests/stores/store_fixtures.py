"""Opening stores on a backend in tests, the messages the tests store, and reading them back."""

from __future__ import annotations

import time
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ZODB import DB

from wiremq.stores.api import Committed, StoreTransaction
from wiremq.stores.messagestore import WalStore
from wiremq.stores.persqueue import PersQueueStore
from wiremq.stores.records import StoredMessage
from wiremq.stores.storage import open_database
from wiremq.stores.topicstore import TopicStore


class Stores:
    """Opens stores on one storage URI, and closes them all to simulate a restart."""

    def __init__(self, uri: str, tag: str) -> None:
        self.uri = uri
        self._tag = tag
        self._db: DB | None = None
        self._open: list[PersQueueStore | TopicStore] = []

    def db(self) -> DB:
        if self._db is None:
            self._db = open_database(self.uri)
        return self._db

    def queue(self, clock: Callable[[], float] = time.monotonic) -> PersQueueStore:
        store = PersQueueStore(self.db(), root_name=f"persqueue-{self._tag}", clock=clock)
        self._open.append(store)
        return store

    def topics(self) -> TopicStore:
        store = TopicStore(self.db(), root_name=f"topics-{self._tag}")
        self._open.append(store)
        return store

    def restart(self) -> None:
        """Close every store and the database; the next store opens them afresh."""
        for store in self._open:
            store.close()
        self._open.clear()
        if self._db is not None:
            self._db.close()
            self._db = None


def message(
    message_id: str,
    destination: str = "/queue/a",
    body: bytes = b"body",
    expires: int = 0,
    headers: tuple[tuple[str, str], ...] = (("k", "v"),),
) -> StoredMessage:
    return StoredMessage(message_id, destination, headers, body, expires=expires, timestamp=1)


def queued(queue: PersQueueStore, name: str = "/queue/a") -> list[str]:
    """The ids of the messages in a queue, in order (none counts as expired)."""
    return [m.message_id for _, m in queue.read(name, now_ms=0).messages]


def replayed(topics: TopicStore, client: str = "c1", name: str = "s1", **kw: int) -> list[str]:
    """The ids a durable subscription's replay gives (none counts as expired)."""
    return [m.message_id for _, m in topics.replay(client, name, now_ms=0, **kw).messages]


def queue_ids(uri: str) -> list[str]:
    """Open the database at ``uri`` afresh (recovering it if need be) and list /queue/a."""
    db = open_database(uri)
    try:
        return queued(PersQueueStore(db))
    finally:
        db.close()


def recovery_events(logs: list[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    """The ``store.recovered`` events among captured log entries."""
    return [e for e in logs if e["event"] == "store.recovered"]


class WalStores:
    """Opens a ``WalStore`` on one backend, and reopens it after a clean close or a crash.

    On FileStorage the two stores are two files (the default layout); on a
    server they share its database under root names of their own.
    """

    def __init__(self, uri: str, folder: Path, tag: str, **options: Any) -> None:
        if uri.startswith("file:"):
            data = Path(urlsplit(uri).path).parent
            self.uris = ((data / "persqueue.fs").as_uri(), (data / "topics.fs").as_uri())
        else:
            self.uris = (uri, uri)
        self.wal_dir = folder / f"wal-{tag}"
        self._tag = tag
        self.options = {"segment_bytes": 1 << 20, **options}
        self._store: WalStore | None = None

    def open(self, **options: Any) -> WalStore:
        self.close()
        self._store = WalStore(
            self.wal_dir,
            *self.uris,
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
