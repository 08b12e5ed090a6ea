"""Opening the persistent stores named in config.xml (FileStorage in the data folder by default)."""

from __future__ import annotations

from pathlib import Path

from ZODB import DB

from wiremq.config.settings import Settings
from wiremq.stores.persqueue import PersQueueStore
from wiremq.stores.storage import open_database
from wiremq.stores.topicstore import TopicStore

DEFAULT_FILES = {"PersQueueFileStore": "persqueue.fs", "TopicFileStore": "topics.fs"}


def storage_uri(settings: Settings, group: str) -> str:
    """The store's URI: its storageuri parameter, or a FileStorage file in the data folder."""
    uri = settings.get_str(group, "storageuri")
    if uri:
        return uri
    data = Path(settings.get_str("Server", "datadir")).resolve()
    return (data / DEFAULT_FILES[group]).as_uri()


class OpenStores:
    """The two persistent stores and the databases under them (one, if both URIs agree)."""

    def __init__(self, settings: Settings) -> None:
        databases: dict[str, DB] = {}
        self.databases = databases
        try:
            for group in DEFAULT_FILES:
                uri = storage_uri(settings, group)
                if uri not in databases:
                    databases[uri] = open_database(
                        uri,
                        connect_timeout=settings.get_float(group, "connecttimeout"),
                        cache_size=settings.get_int(group, "indexcachesize"),
                    )
            self.queues = PersQueueStore(databases[storage_uri(settings, "PersQueueFileStore")])
            self.topics = TopicStore(databases[storage_uri(settings, "TopicFileStore")])
        except BaseException:
            self.close_databases()
            raise

    def pack(self) -> None:
        """Drop removed records from every database (blocking: run it on a worker)."""
        for db in self.databases.values():
            db.pack()

    def close(self) -> None:
        self.queues.close()
        self.topics.close()
        self.close_databases()

    def close_databases(self) -> None:
        for db in self.databases.values():
            db.close()
