"""Opening the persistent store config.xml names: the write-ahead log in the data folder, in
front of the two stores' databases (FileStorage files in the data folder by default); in HA
mode the log in the shared database instead (``server/ha.py``)."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit

from wiremq.config.groups import ServerSettings, StoreSettings, WalSettings
from wiremq.config.settings import Settings
from wiremq.modules.domains import P2P, PUBSUB
from wiremq.modules.flow.disk import Watched
from wiremq.stores.messagestore import RecordLog, WalStore
from wiremq.stores.storage import Location
from wiremq.stores.wal import log_bytes

DEFAULT_FILES = {"PersQueueFileStore": "persqueue.fs", "TopicFileStore": "topics.fs"}
DOMAINS = {"PersQueueFileStore": frozenset({P2P}), "TopicFileStore": frozenset({PUBSUB})}
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


def watched(settings: Settings) -> list[Watched]:
    """The log and each store kept in a local file, for the free-disk watermark."""
    data = Path(ServerSettings.read(settings, "Server").datadir).resolve()
    wal = data / WAL_FOLDER
    found = [Watched("wal", wal, frozenset({P2P, PUBSUB}), partial(log_bytes, wal))]
    for group, domains in DOMAINS.items():
        parts = urlsplit(location(settings, group).uri)
        if parts.scheme in ("", "file"):
            found.append(Watched(group, Path(parts.path).parent, domains))
    return found
