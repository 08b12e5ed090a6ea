"""Opening the persistent store config.xml names: the write-ahead log in the data folder, in
front of the two stores' databases (FileStorage files in the data folder by default)."""

from __future__ import annotations

from pathlib import Path

from wiremq.config.groups import ServerSettings, StoreSettings, WalSettings
from wiremq.config.settings import Settings
from wiremq.stores.messagestore import WalStore
from wiremq.stores.storage import Location

DEFAULT_FILES = {"PersQueueFileStore": "persqueue.fs", "TopicFileStore": "topics.fs"}
WAL_FOLDER = "wal"


def location(settings: Settings, group: str) -> Location:
    """Where a store's database is: its storageuri parameter, or a FileStorage file in
    the data folder."""
    store = StoreSettings.read(settings, group)
    uri = store.storageuri
    if not uri:
        data = Path(ServerSettings.read(settings, "Server").datadir).resolve()
        uri = (data / DEFAULT_FILES[group]).as_uri()
    return Location(uri, store.connecttimeout, store.indexcachesize)


def open_store(settings: Settings) -> WalStore:
    """The message store: replays what its databases lack from the log before it returns."""
    wal = WalSettings.read(settings, "WriteAheadLog")
    data = Path(ServerSettings.read(settings, "Server").datadir).resolve()
    return WalStore(
        data / WAL_FOLDER,
        location(settings, "PersQueueFileStore"),
        location(settings, "TopicFileStore"),
        segment_bytes=wal.segmentsize,
        catch_up_bytes=wal.catchupsize,
    )
