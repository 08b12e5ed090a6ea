"""Opening stores on a backend in tests, and the messages the tests store."""

from __future__ import annotations

import time
from collections.abc import Callable

from ZODB import DB

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
