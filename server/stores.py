"""Opening the persistent store config.xml names: the write-ahead log in the data folder, in
front of the two stores' databases (FileStorage files in the data folder by default); in HA
mode the log in the shared database instead (``server/ha.py``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from wiremq.config.groups import ServerSettings, StoreSettings, WalSettings
from wiremq.config.settings import Settings
from wiremq.stores.messagestore import RecordLog, WalStore
from wiremq.stores.storage import Location

DEFAULT_FILES = {"PersQueueFileStore": "persqueue.fs", "TopicFileStore": "topics.fs"}
WAL_FOLDER = "wal"


def location(settings: Settings, group: str, client_name: str | None = None) -> Location:
    """Where a store's database is: its storageuri parameter, or a FileStorage file in
    the data folder; ``client_name`` names its PostgreSQL connections (HA)."""
    store = StoreSettings.read(settings, group)
    uri = store.storageuri
    if not uri:
        data = Path(ServerSettings.read(settings, "Server").datadir).resolve()
        uri = (data / DEFAULT_FILES[group]).as_uri()
    where = Location(uri, store.connecttimeout, store.indexcachesize)
    return where if client_name is None else replace(where, client_name=client_name)


def open_store(
    settings: Settings, log: RecordLog | None = None, client_name: str | None = None
) -> WalStore:
    """The message store: replays what its databases lack from the log before it returns.
    The log is in the data folder, or ``log`` (in HA mode, the shared database's)."""
    wal = WalSettings.read(settings, "WriteAheadLog")
    data = Path(ServerSettings.read(settings, "Server").datadir).resolve()
    return WalStore(
        data / WAL_FOLDER if log is None else log,
        location(settings, "PersQueueFileStore", client_name),
        location(settings, "TopicFileStore", client_name),
        segment_bytes=wal.segmentsize,
        catch_up_bytes=wal.catchupsize,
    )
