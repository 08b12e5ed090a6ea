"""The write-ahead log's files: records in prefilled segments, one write and one fdatasync each.

A record is a 16-byte header and a payload::

    crc32 (4) | payload length (4) | LSN (8) | payload

all big-endian; the CRC covers the length, the LSN and the payload. LSNs
(log sequence numbers) count records from 1, one after the other, across
segments.

Segments are files of ``segment_bytes`` named after the LSN of their first
record (``00000000000000000042.wal``), zero-filled when created, and records
are written into them in place (``pwrite``) and made durable with
``fdatasync``. Writing inside a file of fixed size changes no metadata, so a
sync flushes the data alone; appending to a growing file (O_APPEND) also
commits the new file size to the file system's journal on every sync, which
measured about half as many syncs per second (see docs/architecture.md,
"Write-ahead log"). A record that does not fit in the rest of a segment goes
to the next one; one bigger than a segment gets a segment of its own, exactly
its size. The next segment is zero-filled ahead of need (``prepare``, by the
catch-up thread), so that the committing thread only renames it.

Where the records of a segment end, zeros follow. At open every kept
segment is read: a record that is cut short or fails its CRC at the very end
is a torn write of a commit that never returned (its bytes are reported and
zeroed, ``TornTail``); damage followed by good records is refused with
``StoreOpenError`` and nothing is changed. Segments are deleted once every
database has applied all their records (``release``).

Threads: the committing side (``start``, ``place``, ``write``, ``take_back``,
``written``, ``append``) one call at a time, ``place`` to ``written`` for one
record before the next is placed; a record placed ``in_place`` may be written
and synced by any thread (the server's C sync thread) between the two.
``records``, ``skip``, ``release`` and ``prepare`` from one other thread; they share the
segment list under a lock.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
import threading
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import zc.lockfile

from .api import LogWrite
from .errors import StoreError, StoreOpenError

HEADER = struct.Struct(">IIQ")  # crc32, payload length, LSN
_CRC, _REST = struct.Struct(">I"), struct.Struct(">IQ")  # the header, as it is made
LSN = struct.Struct(">Q")
_NAME = re.compile(r"^(\d{20})\.wal$")
_PREPARED = "prepared.tmp"
_ZEROS = bytes(1 << 20)
_MAX_PARTS = 1024  # IOV_MAX on Linux: at most this many parts per pwritev

sync_data: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)


def segment_name(lsn: int) -> str:
    return f"{lsn:020d}.wal"


def encode_record(lsn: int, payload: Sequence[bytes]) -> tuple[bytes, ...]:
    """A record whose payload is ``payload``'s parts one after the other, in parts: the
    header joined to the first, then the others as they are (a large body, uncopied)."""
    rest = _REST.pack(sum(map(len, payload)), lsn)
    crc = zlib.crc32(rest)
    for part in payload:
        crc = zlib.crc32(part, crc)
    return (_CRC.pack(crc) + rest + payload[0], *payload[1:])


def record_at(data: bytes | mmap.mmap, pos: int, lsn: int | None = None) -> int:
    """The end of a whole, intact record at ``pos`` (with that LSN, if given), or -1."""
    if pos + HEADER.size > len(data):
        return -1
    crc, length, found = HEADER.unpack_from(data, pos)
    end = pos + HEADER.size + length
    if (lsn is not None and found != lsn) or end > len(data):
        return -1
    view = memoryview(data)
    try:
        if zlib.crc32(view[pos + HEADER.size : end], zlib.crc32(view[pos + 4 : pos + 16])) != crc:
            return -1
    finally:
        view.release()
    return end


@dataclass
class Segment:
    first: int  # the LSN of its first record (its name)
    path: Path
    size: int


@dataclass(frozen=True, slots=True)
class TornTail:
    """The remains of a write cut short by a crash, at the end of the log."""

    segment: str
    offset: int
    size: int  # non-zero bytes from ``offset``
    lsn: int  # the LSN the lost record would have had
    header: bool  # whether its header (with that LSN) was readable


@dataclass(frozen=True, slots=True)
class _Scan:
    ends: dict[int, int]  # segment first LSN -> where its records end
    last_lsn: int  # 0 if no record
    torn: TornTail | None


class WriteAheadLog:
    """The log in one folder; see the module doc."""

    def __init__(self, folder: Path, *, segment_bytes: int) -> None:
        """Lock the folder and read every segment (changing nothing).

        Raises ``StoreOpenError`` if the folder is in use or the log is damaged.
        """
        if segment_bytes < HEADER.size:
            raise ValueError("segment_bytes must hold at least one record header")
        self.folder = folder
        self.segment_bytes = segment_bytes
        try:
            folder.mkdir(parents=True, exist_ok=True)
            self._lock_file = zc.lockfile.LockFile(str(folder / "lock"))
        except zc.lockfile.LockError as exc:
            raise StoreOpenError(f"{folder} is in use by another process ({exc})") from exc
        except OSError as exc:
            raise StoreOpenError(f"cannot use {folder}: {exc.strerror or exc}") from exc
        self._lock = threading.Lock()  # guards _segments and _prepared
        try:
            self._segments = self._list()
            scan = self._scan()
        except BaseException:
            self._lock_file.close()
            raise
        self._ends = scan.ends
        self.torn = scan.torn
        # The records kept are first_lsn..last_lsn (none if last_lsn < first_lsn).
        self.first_lsn = self._segments[0].first if self._segments else 1
        self.last_lsn = scan.last_lsn
        self.durable_lsn = scan.last_lsn  # the last record known durable (any thread reads it)
        self._prepared = False
        self._fd = -1
        self._offset = 0
        self._next_lsn = 0
        self._failed: str | None = None
        self._reader: _Reader | None = None

    # -- open -------------------------------------------------------------------------

    def _list(self) -> list[Segment]:
        segments = []
        for path in self.folder.iterdir():
            if match := _NAME.match(path.name):
                segments.append(Segment(int(match.group(1)), path, path.stat().st_size))
        return sorted(segments, key=lambda s: s.first)

    def _scan(self) -> _Scan:
        ends: dict[int, int] = {}
        expected = self._segments[0].first if self._segments else 1
        torn: TornTail | None = None
        for i, segment in enumerate(self._segments):
            data = segment.path.read_bytes()
            if torn is not None:
                raise self._damaged(segment, 0, "a segment follows an unreadable record")
            if segment.first != expected:
                raise self._damaged(
                    segment, 0, f"it starts at record {segment.first}, record {expected} was next"
                )
            pos = 0
            while (end := record_at(data, pos, expected)) >= 0:
                pos, expected = end, expected + 1
            ends[segment.first] = pos
            tail = len(data[pos:].rstrip(b"\0"))
            if not tail:
                continue
            if self._good_records_follow(data, pos, expected, self._segments[i + 1 :]):
                raise self._damaged(segment, pos, "good records follow an unreadable one")
            _, _, lsn = (
                HEADER.unpack_from(data, pos) if pos + HEADER.size <= len(data) else (0, 0, 0)
            )
            torn = TornTail(segment.path.name, pos, tail, expected, lsn == expected)
        return _Scan(ends, expected - 1, torn)

    @staticmethod
    def _good_records_follow(data: bytes, pos: int, expected: int, later: list[Segment]) -> bool:
        """Whether an intact record of one of the next few LSNs lies past ``pos`` in this
        segment, or a later segment starts with an intact record."""
        for lsn in range(expected, expected + 3):
            pattern = LSN.pack(lsn)
            at = data.find(pattern, pos + 1)
            while at >= 0:
                if at - 8 > pos and record_at(data, at - 8, lsn) >= 0:
                    return True
                at = data.find(pattern, at + 1)
        for segment in later:
            with segment.path.open("rb") as file:
                head = file.read(HEADER.size)
                _, length, lsn = HEADER.unpack(head) if len(head) == HEADER.size else (0, 0, 0)
                if record_at(head + file.read(length), 0, lsn) >= 0 and lsn:
                    return True
        return False

    def _damaged(self, segment: Segment, offset: int, why: str) -> StoreOpenError:
        self._lock_file.close()
        return StoreOpenError(
            f"the write-ahead log {segment.path} is damaged at byte {offset}: {why}. "
            "Nothing was opened or changed. Keep a copy of the folder; the records "
            "before the damage can be replayed by moving the later segments away, "
            "which loses the commits in them."
        )

    def cut_torn_tail(self) -> TornTail | None:
        """Zero the torn write found at open, if any (before anything new is written)."""
        torn = self.torn
        if torn is not None:
            fd = os.open(self.folder / torn.segment, os.O_RDWR)
            try:
                _zero(fd, torn.offset, torn.size)
                sync_data(fd)
            finally:
                os.close(fd)
            self.torn = None
        return torn

    def start(self, next_lsn: int) -> None:
        """Be ready to append records from ``next_lsn`` on (past every record kept).

        The last segment is continued if the new records follow on from it.
        Otherwise (the databases have applied records this log no longer
        has) the caller has applied every record kept: the segments are
        deleted and a new one begins, so that LSNs never skip inside the log.
        """
        if next_lsn <= self.last_lsn:
            raise StoreError(f"record {next_lsn} was written already")
        if self.torn is not None:
            raise StoreError("the torn tail must be cut before anything is written")
        for path in self.folder.glob("*.tmp"):
            if path.name == _PREPARED and path.stat().st_size == self.segment_bytes:
                self._prepared = True  # zero-filled and synced before it got this name
            else:
                path.unlink()  # a segment being prepared when the process died
        self._next_lsn = next_lsn
        last = self._segments[-1] if self._segments else None
        if last is not None and next_lsn == self.last_lsn + 1:
            self._open_segment(last, self._ends[last.first])
            return
        for segment in self._segments:
            segment.path.unlink()
        self._segments = []
        self._rotate(0)

    # -- the committing thread ------------------------------------------------------------

    def place(self, payload: Sequence[bytes]) -> LogWrite:
        """The next record (its payload ``payload``'s parts one after the other), encoded,
        and where it goes (no I/O): in the open segment if it fits there, else in a new one
        (``in_place`` false: ``write`` starts it).

        Raises ``StoreError`` if an earlier failure stopped the log.
        """
        if self._failed:
            raise StoreError(f"the write-ahead log failed earlier ({self._failed}); restart")
        parts = encode_record(self._next_lsn, payload)
        write = LogWrite(self._next_lsn, parts, -1, 0, sum(map(len, parts)))
        if self._offset + write.size <= self._segment.size:
            write.fd, write.offset = self._fd, self._offset
        return write

    def write(self, write: LogWrite) -> None:
        """Make a placed record durable here (starting a new segment if it needs one).

        Raises ``StoreError`` if it could not; the bytes written are then taken
        back (``take_back``).
        """
        if not write.in_place:
            try:
                self._rotate(write.size)
            except OSError as exc:
                raise StoreError(f"cannot start a write-ahead log segment: {exc}") from exc
            write.fd, write.offset = self._fd, 0
        try:
            self._write_record(write.fd, write.parts, write.offset)
            sync_data(write.fd)
        except OSError as exc:
            raise self.take_back(write, exc) from exc

    def take_back(self, write: LogWrite, error: OSError) -> StoreError:
        """A write of a placed record failed (here or on another thread): zero what it may
        have left, so that the record is not found at the next open; returns the error to
        report. If even that fails, every later record fails too (the process must
        restart and the next open decides what reached the disk)."""
        size = max(0, min(write.size, self._segment.size - write.offset))
        try:
            _zero(write.fd, write.offset, size)
            sync_data(write.fd)
        except OSError:
            self._failed = str(error)
        return StoreError(f"cannot write the write-ahead log: {error}")

    def written(self, write: LogWrite) -> int:
        """A placed record is durable: the next one follows it. Returns its LSN."""
        self._offset = write.offset + write.size
        self._next_lsn = write.lsn + 1
        self.durable_lsn = write.lsn
        return write.lsn

    def append(self, payload: Sequence[bytes]) -> int:
        """Write one record and make it durable, on this thread; returns its LSN.

        Raises ``StoreError`` if it could not be made durable (see ``write``).
        """
        write = self.place(payload)
        self.write(write)
        return self.written(write)

    def _write_record(self, fd: int, parts: Sequence[bytes], offset: int) -> None:
        """Write ``parts`` one after the other at ``offset`` (a seam: tests replace it to
        tear writes)."""
        views = [memoryview(part) for part in parts if part]
        while views:
            written = os.pwritev(fd, views[:_MAX_PARTS], offset)
            offset += written
            while views and written >= len(views[0]):
                written -= len(views.pop(0))
            if views:
                views[0] = views[0][written:]

    def _rotate(self, needed: int) -> None:
        """Start the next segment (it takes the LSN of the next record as its name).

        Until the new segment is in place the current one stays in use, so a
        failure here (no space for a new segment) fails this append only. A
        current segment that holds no record yet (a fresh log's first record is
        bigger than a segment) has that name already: the new one replaces it.
        """
        path = self.folder / segment_name(self._next_lsn)
        size = max(self.segment_bytes, needed)
        with self._lock:
            ready = self._prepared and size == self.segment_bytes
            self._prepared = False if ready else self._prepared
        if ready:
            os.rename(self.folder / _PREPARED, path)
        else:
            _create_zeroed(path.with_name(path.name + ".tmp"), size)
            os.rename(path.with_name(path.name + ".tmp"), path)
        _sync_folder(self.folder)
        fd = os.open(path, os.O_RDWR)
        segment = Segment(self._next_lsn, path, size)
        with self._lock:
            if self._segments and self._segments[-1].first == segment.first:
                # The current segment held no record and had this name: the rename
                # replaced it, and it must not be released (unlinked) over the new one.
                self._segments.pop()
            self._segments.append(segment)
        if self._fd >= 0:
            os.close(self._fd)
        self._fd, self._segment, self._offset = fd, segment, 0

    def _open_segment(self, segment: Segment, offset: int) -> None:
        self._fd, self._segment, self._offset = os.open(segment.path, os.O_RDWR), segment, offset

    # -- the catch-up thread -------------------------------------------------------------

    def records(self, after: int, upto: int, max_bytes: int) -> list[tuple[int, bytes]]:
        """The records after LSN ``after`` up to ``upto`` (durable ones), in order, at
        least one and about ``max_bytes`` of payload."""
        if self._reader is None or self._reader.next_lsn != after + 1:
            self._reader = _Reader(self, after + 1)
        return self._reader.read(upto, max_bytes)

    def skip(self, lsn: int) -> None:
        """Record ``lsn`` (the next one ``records`` would read) is applied from memory:
        the reader moves past it by its header alone, without reading its payload."""
        if self._reader is not None and self._reader.next_lsn == lsn:
            self._reader.skip()
        else:
            self._reader = _Reader(self, lsn + 1)

    def segment_at(self, lsn: int) -> Segment:
        """The segment that holds record ``lsn``."""
        with self._lock:
            found = [s for s in self._segments if s.first <= lsn]
        if not found:
            raise StoreError(f"record {lsn} is not in the write-ahead log any more")
        return found[-1]

    def release(self, upto: int) -> int:
        """Delete the segments whose records are all at or below LSN ``upto`` (never the
        one being written); returns how many."""
        with self._lock:
            segments = list(self._segments)
        gone = [
            s for s, after in zip(segments, segments[1:], strict=False) if after.first <= upto + 1
        ]
        for segment in gone:
            segment.path.unlink()
        with self._lock:
            self._segments = self._segments[len(gone) :]
        return len(gone)

    def prepare(self) -> None:
        """Zero-fill the next segment, unless one is ready.

        Raises ``OSError`` if it could not (a full disk): nothing of it is left
        behind to take the space, and the next call tries again.
        """
        with self._lock:
            if self._prepared or self._fd < 0:
                return
        partial = self.folder / (_PREPARED + ".partial.tmp")
        try:
            _create_zeroed(partial, self.segment_bytes)
        except OSError:
            partial.unlink(missing_ok=True)
            raise
        os.rename(partial, self.folder / _PREPARED)
        with self._lock:
            self._prepared = True

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._lock_file.close()


class _Reader:
    """Reads records in order from the segments, mapped into memory one at a time."""

    def __init__(self, log: WriteAheadLog, lsn: int) -> None:
        self._log = log
        self._map: mmap.mmap | None = None
        self._segment: Segment | None = None
        self._pos = 0
        self.next_lsn: int = lsn
        self._enter(log.segment_at(lsn))
        assert self._segment is not None
        self.next_lsn = self._segment.first
        while self.next_lsn < lsn:  # walk to the record asked for past applied ones, unread
            self.skip()

    def read(self, upto: int, max_bytes: int) -> list[tuple[int, bytes]]:
        found: list[tuple[int, bytes]] = []
        size = 0
        while self.next_lsn <= upto and (not found or size < max_bytes):
            data = self._data()
            end = record_at(data, self._pos, self.next_lsn)
            if end < 0:  # the rest of this segment is zeros: on to the next one
                self._enter(self._log.segment_at(self.next_lsn))
                continue
            payload = data[self._pos + HEADER.size : end]
            found.append((self.next_lsn, payload))
            size += len(payload)
            self._pos = end
            self.next_lsn += 1
        self._forget_read()
        return found

    def skip(self) -> None:
        """Move past the next record by its header (its LSN and length) alone."""
        while True:
            data = self._data()
            if self._pos + HEADER.size <= len(data):
                _, length, lsn = HEADER.unpack_from(data, self._pos)
                end = self._pos + HEADER.size + length
                if lsn == self.next_lsn and end <= len(data):
                    self._pos, self.next_lsn = end, lsn + 1
                    return
            self._enter(self._log.segment_at(self.next_lsn))

    def _forget_read(self) -> None:
        """Let go of the mapped pages already read (they count in the process's memory
        while mapped): a record of a large message is copied out and not read again."""
        if self._map is not None and self._pos >= mmap.PAGESIZE:
            self._map.madvise(mmap.MADV_DONTNEED, 0, self._pos - self._pos % mmap.PAGESIZE)

    def _enter(self, segment: Segment) -> None:
        if segment is self._segment:
            raise StoreError(f"record {self.next_lsn} is missing from {segment.path}")
        self.close()
        with segment.path.open("rb") as file:
            self._map = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        self._segment = segment
        self._pos = 0

    def _data(self) -> mmap.mmap:
        assert self._map is not None
        return self._map

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None


def log_bytes(folder: Path) -> int:
    """The bytes of the log's segments in ``folder`` (what its databases will copy, and
    the open one's room), the one prepared ahead left out."""
    total = 0
    with os.scandir(folder) as entries:
        for entry in entries:
            if _NAME.match(entry.name):
                total += entry.stat().st_size
    return total


def _zero(fd: int, offset: int, size: int) -> None:
    while size > 0:
        chunk = min(size, len(_ZEROS))
        os.pwrite(fd, _ZEROS[:chunk], offset)
        offset, size = offset + chunk, size - chunk


def _create_zeroed(path: Path, size: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _zero(fd, 0, size)
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
