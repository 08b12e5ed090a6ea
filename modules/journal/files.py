"""The journal's files: JSON Lines appended in ``<data>/journal/``, rotated by size.

Used from the journal's worker thread only. A file is named after the time it
was begun (UTC, to the millisecond: a run that stops and the next that starts
never share it) and the server run that wrote it, so that names sort in the
order they were written and two runs never share one. Each batch of lines is
one ``write``: a file holds whole lines unless the machine itself fails. A file
is synced when it is rotated or closed, not after every batch: the journal is an
audit trail, not the server's durability point (that is the write-ahead log).

Beside each file, its index by message id (``index.py``): after each batch is
written, the entries of its lines that name a message are appended to
``<file>.idx-new`` (found by C, without the interpreter lock); when the file is
closed they are sorted into ``<file>.idx``.

The journal is written once and read seldom (an audit, a message's life story),
so the writer keeps little of a file in the page cache: once ``cached`` bytes
more are written, it asks the kernel to write back and drop all but the last
``cached`` (``POSIX_FADV_DONTNEED``; a page still being written back goes at the
next ask). The pages it gives back are the ones its next writes take, still warm:
growing the cache instead cost the writer 0.75 µs of kernel time per 400 bytes
(a queued message's two records) on a virtual machine, against 0.13 µs.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import BinaryIO

import structlog

from wiremq.modules.journal._encode import index_lines
from wiremq.modules.journal.index import SUFFIX, complete, writing_index_path

log = structlog.get_logger("wiremq.journal")


# Bytes of the current file the writer leaves in the page cache (see the docstring).
CACHED_BYTES = 32 * 1024 * 1024


class JournalFiles:
    """The current journal file and the rotation to the next."""

    def __init__(
        self, folder: Path, max_bytes: int, server: str, cached: int = CACHED_BYTES
    ) -> None:
        self.folder = folder
        self.max_bytes = max_bytes
        self.server = server
        self.cached = cached
        self.files = 0  # begun by this run
        self._file: BinaryIO | None = None
        self._index: BinaryIO | None = None
        self._size = 0
        self._dropped = 0  # the current file's bytes before this were last asked to go
        folder.mkdir(parents=True, exist_ok=True)

    @property
    def current(self) -> Path | None:
        """The file being written, if one is open."""
        return Path(self._file.name) if self._file is not None else None

    def write(self, data: bytes) -> int:
        """Append whole lines; a new file is begun first when they would take the current
        one past its size (a batch larger than a file gets one of its own)."""
        if not data:
            return 0
        if self._file is not None and self._size + len(data) > self.max_bytes:
            self._end()
        if self._file is None:
            self._begin()
        assert self._file is not None and self._index is not None
        _write_all(self._file, data)
        _write_all(self._index, index_lines(data, self._size))
        self._size += len(data)
        if self._size - self._dropped >= 2 * self.cached:
            self._dropped = self._size - self.cached
            os.posix_fadvise(self._file.fileno(), 0, self._dropped, os.POSIX_FADV_DONTNEED)
        return len(data)

    def close(self) -> None:
        """Sync and close the current file."""
        if self._file is not None:
            self._end()

    def _begin(self) -> None:
        self.files += 1
        now = time.time()
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}"
        path = self.folder / f"{stamp}-{self.server}-{self.files:05d}{SUFFIX}"
        self._file = open(path, "xb", buffering=0)  # noqa: SIM115 (kept open across calls)
        self._index = open(writing_index_path(path), "xb", buffering=0)  # noqa: SIM115
        self._size = self._dropped = 0

    def _end(self) -> None:
        assert self._file is not None and self._index is not None
        file, self._file = self._file, None
        index, self._index = self._index, None
        try:
            os.fsync(file.fileno())
            os.posix_fadvise(file.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)  # all of it
        finally:
            file.close()
            index.close()
        try:
            complete(Path(file.name))
        except OSError as error:  # the journal is whole: a lookup sorts the index later
            log.error("journal.index_failed", file=file.name, error=str(error))


def _write_all(file: BinaryIO, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[file.write(view) :]
