"""Opening the embedded FileStorage: recover a torn last transaction, refuse real damage.

FileStorage itself truncates an incomplete last transaction on open (keeping
the cut bytes in ``Data.fs.trN``). We look first, read-only, so that the log
says which messages were lost (only ones whose commit never returned, so no
receipt was sent for them), and so that damage in the middle of the file is
reported instead of silently cutting off committed transactions after it.
"""

from __future__ import annotations

import struct
from pathlib import Path

import structlog
import zc.lockfile
from ZODB.FileStorage import FileStorage
from ZODB.FileStorage.format import CorruptedError
from ZODB.POSException import StorageError

from .errors import StoreOpenError
from .fstail import LostTail, read_tail

log = structlog.get_logger(__name__)

# The note of a ZODB commit that applies write-ahead log records (``WalStore``).
WAL_NOTE = "apply write-ahead log"

_RECOVER_HINT = (
    "The store was not opened and the file was not changed. Keep a copy, then "
    "salvage what is readable with: python -m ZODB.fsrecover {path} {path}.recovered"
)


def open_file_storage(path: Path) -> FileStorage:
    """Open (creating if needed) the FileStorage at ``path``, recovering a torn tail."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tail = _inspect(path) if path.exists() else None
    if tail is not None and tail.committed_after:
        raise StoreOpenError(
            f"{path} is damaged at byte {tail.offset}: committed transactions follow "
            f"unreadable data. " + _RECOVER_HINT.format(path=path)
        )
    storage = _open(path, read_only=False)
    if tail is not None:
        # FileStorage has cut the tail now, but it may have taken the cut
        # header's transaction id as its last one (zeros, for a zero-filled
        # tail), which breaks every load; opened again, it reads the clean file.
        storage.close()
        storage = _open(path, read_only=False)
        _log_recovery(path, tail)
    return storage


def _inspect(path: Path) -> LostTail | None:
    """The incomplete tail of ``path`` if it has one, without changing the file."""
    storage = _open(path, read_only=True)
    try:
        committed_end = storage.getSize()
    finally:
        storage.close()
    file_size = path.stat().st_size
    if committed_end >= file_size:
        return None
    with path.open("rb") as file:
        return read_tail(file, committed_end, file_size)


def _open(path: Path, *, read_only: bool) -> FileStorage:
    try:
        # A pack keeps no copy of the file as it was (Data.fs.old): that copy held the
        # space the pack was to give back, on a disk that may be full.
        return FileStorage(str(path), read_only=read_only, pack_keep_old=False)
    except zc.lockfile.LockError as exc:
        raise StoreOpenError(f"{path} is in use by another process ({exc})") from exc
    except (CorruptedError, StorageError, ValueError, struct.error) as exc:  # ValueError: bad text
        raise StoreOpenError(
            f"{path} is damaged: {exc}. " + _RECOVER_HINT.format(path=path)
        ) from exc
    except OSError as exc:
        raise StoreOpenError(f"cannot open {path}: {exc.strerror or exc}") from exc


def _log_recovery(path: Path, tail: LostTail) -> None:
    if WAL_NOTE in tail.note:
        meaning = "a catch-up from the write-ahead log was cut off; the log replays it"
    else:
        meaning = "a commit that never returned was cut off; no receipt was sent for it"
    log.warning(
        "store.recovered",
        path=str(path),
        discarded_bytes=tail.size,
        at_offset=tail.offset,
        transaction_began=tail.time or "unknown (no readable header)",
        transaction_note=tail.note or "unknown",
        records=tail.records,
        lost_messages=[f"{dest} {mid}" for dest, mid in tail.messages],
        meaning=meaning,
    )
