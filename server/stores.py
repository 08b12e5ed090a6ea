"""Opening the persistent store named in config.xml (FileStorage in the data folder by default)."""

from __future__ import annotations

from pathlib import Path

from ZODB import DB

from wiremq.config.groups import ServerSettings, StoreSettings
from wiremq.config.settings import Settings
from wiremq.stores.direct import DirectStore
from wiremq.stores.persqueue import PersQueueStore
from wiremq.stores.storage import open_database
from wiremq.stores.topicstore import TopicStore

DEFAULT_FILES = {"PersQueueFileStore": "persqueue.fs", "TopicFileStore": "topics.fs"}


def storage_uri(settings: Settings, group: str) -> str:
    """The store's URI: its storageuri parameter, or a FileStorage file in the data folder."""
    uri = StoreSettings.read(settings, group).storageuri
    if uri:
        return uri
    data = Path(ServerSettings.read(settings, "Server").datadir).resolve()
    return (data / DEFAULT_FILES[group]).as_uri()


def open_store(settings: Settings) -> DirectStore:
    """The message store on the databases config.xml names (one, if both URIs agree)."""
    databases: dict[str, DB] = {}
    try:
        for group in DEFAULT_FILES:
            uri = storage_uri(settings, group)
            if uri not in databases:
                store = StoreSettings.read(settings, group)
                databases[uri] = open_database(
                    uri, connect_timeout=store.connecttimeout, cache_size=store.indexcachesize
                )
        queues = PersQueueStore(databases[storage_uri(settings, "PersQueueFileStore")])
        topics = TopicStore(databases[storage_uri(settings, "TopicFileStore")])
    except BaseException:
        for db in databases.values():
            db.close()
        raise
    return DirectStore(queues, topics, list(databases.values()))
