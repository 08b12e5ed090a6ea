"""The journal by message id: a message's life story, read from its records in order.

An index entry is 8 bytes: a line's offset in its journal file (40 bits) and a
24-bit key of the message id the line names (``_encode.c``: ``index_lines``
finds them in C, without the interpreter lock). While the writer writes
``F.jsonl`` it appends the entries of each batch to ``F.jsonl.idx-new``
(``files.py``); when it closes the file it sorts them by key into
``F.jsonl.idx`` (``sort_index``, also without the lock). A lookup binary-searches
the sorted index of every closed file for the id's key (a few reads each), and
the current file's entries by a byte search, reading then the part of the file
its entries do not cover yet; it reads each line an entry points at and keeps
those of that id (a key is shared by about one id in 16 million). A closed
file without a sorted index (written before there were any, or by a run that
crashed) gets one the first time it is looked through. Nothing on the message
path changes for it.
"""

from __future__ import annotations

import json
import mmap
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wiremq.modules.journal._encode import index_key, index_lines, sort_index

SUFFIX = ".jsonl"
INDEX_SUFFIX = ".idx"  # the sorted index of a closed journal file
WRITING_SUFFIX = ".idx-new"  # the entries of the file being written, in the order written
ENTRY = 8  # bytes: the line's offset (40 bits), then its id's key (24 bits), little-endian
OFFSET_BITS = 40
KEY_AT = 5  # where an entry's key starts
LINE_READ = 4096  # bytes read at once for one line (a longer one is read on)


def index_path(journal: Path) -> Path:
    """The sorted index beside a closed journal file."""
    return journal.with_name(journal.name + INDEX_SUFFIX)


def writing_index_path(journal: Path) -> Path:
    """The entries of a journal file being written."""
    return journal.with_name(journal.name + WRITING_SUFFIX)


def complete(journal: Path) -> None:
    """The writer closed ``journal``: its entries, sorted, become its index (unless a lookup
    made it meanwhile)."""
    writing = writing_index_path(journal)
    try:
        entries = writing.read_bytes()
    except FileNotFoundError:
        return
    _write_sorted(index_path(journal), entries)
    writing.unlink(missing_ok=True)


def run_of(journal: Path) -> str:
    """The server run that wrote a journal file (``<time>-<run>-<n>.jsonl``)."""
    return journal.name.split("-")[-2]


@dataclass
class Story:
    """A message's records in the order written, and what finding them took."""

    message_id: str
    records: list[dict[str, Any]] = field(default_factory=list)
    files: int = 0  # journal files looked through
    indexed: int = 0  # of which had no index yet and got one
    lines_read: int = 0  # lines the index pointed at
    seconds: float = 0.0


class JournalIndex:
    """Life stories from the journal folder ``folder``; ``current()`` is the file the writer
    has open (never indexed from here: its writer indexes it)."""

    def __init__(self, folder: Path, current: Callable[[], Path | None] = lambda: None) -> None:
        self.folder = folder
        self.current = current

    def files(self) -> list[Path]:
        """The journal's files, in the order written."""
        if not self.folder.is_dir():
            return []
        return sorted(p for p in self.folder.iterdir() if p.name.endswith(SUFFIX))

    def story(self, message_id: str) -> Story:
        """Every record of ``message_id``, across the journal's files, in order."""
        started = time.monotonic()
        story = Story(message_id)
        key = index_key(message_id)
        for path in self.files():
            story.files += 1
            for offset in self._offsets(path, key, story):
                record = _line(path, offset)
                story.lines_read += 1
                if record is not None and record.get("message_id") == message_id:
                    record["file"] = path.name
                    story.records.append(record)
        story.seconds = time.monotonic() - started
        return story

    def _offsets(self, path: Path, key: int, story: Story) -> list[int]:
        """The offsets in ``path`` of the lines whose id has ``key``: from its sorted index,
        or for the file being written from its entries so far and the lines past them."""
        if path == self.current():
            try:
                entries = writing_index_path(path).read_bytes()
            except FileNotFoundError:
                entries = b""
            entries = entries[: len(entries) - len(entries) % ENTRY]
            last = _offset_at(entries, len(entries) - ENTRY) if entries else None
            return [*_matching(entries, key), *_matching(_scan(path, last), key)]
        index = index_path(path)
        if not index.exists():
            _write_sorted(index, _scan(path))
            story.indexed += 1
            current = self.current()
            if current is None or run_of(current) != run_of(path):  # a crashed run's
                writing_index_path(path).unlink(missing_ok=True)
        return _sorted_matching(index, key)


def _sorted_matching(index: Path, key: int) -> list[int]:
    """The offsets of the entries with ``key`` in a sorted index: a binary search."""
    with open(index, "rb") as file:
        size = os.fstat(file.fileno()).st_size // ENTRY * ENTRY
        if not size:
            return []
        with mmap.mmap(file.fileno(), size, access=mmap.ACCESS_READ) as entries:
            low, high = 0, size // ENTRY
            while low < high:  # the first entry whose key is not below ``key``
                middle = (low + high) // 2
                if _key_at(entries, middle * ENTRY) < key:
                    low = middle + 1
                else:
                    high = middle
            found = []
            at = low * ENTRY
            while at < size and _key_at(entries, at) == key:
                found.append(_offset_at(entries, at))
                at += ENTRY
            return found


def _key_at(entries: bytes | mmap.mmap, at: int) -> int:
    return int.from_bytes(entries[at + KEY_AT : at + ENTRY], "little")


def _matching(entries: bytes, key: int) -> Iterator[int]:
    """The offsets of the entries with ``key`` in entries as written: a byte search for the
    key's three bytes, kept where they are an entry's key."""
    wanted = key.to_bytes(3, "little")
    at = entries.find(wanted)
    while at >= 0:
        if at % ENTRY == KEY_AT:
            yield _offset_at(entries, at - KEY_AT)
            at = entries.find(wanted, at + ENTRY - KEY_AT)
        else:
            at = entries.find(wanted, at + 1)


def _offset_at(entries: bytes | mmap.mmap, at: int) -> int:
    return int.from_bytes(entries[at : at + KEY_AT], "little")


def _scan(path: Path, after: int | None = None) -> bytes:
    """The index entries of ``path``'s whole lines: all of them, or those after the line at
    offset ``after``."""
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        if not size:
            return b""
        with mmap.mmap(file.fileno(), size, access=mmap.ACCESS_READ) as data:
            start = 0
            if after is not None:
                start = data.find(b"\n", after) + 1
                if not start:  # that line is not whole yet
                    return b""
            end = data.rfind(b"\n", start) + 1  # a line being written is left for later
            if end <= start:
                return b""
            with memoryview(data)[start:end] as lines:
                return index_lines(lines, start)


def _write_sorted(index: Path, entries: bytes) -> None:
    """Write ``entries``, sorted, as ``index``, whole or not at all."""
    partial = index.with_name(f".{index.name}.{os.getpid()}.{threading.get_ident()}")
    partial.write_bytes(sort_index(entries))
    os.replace(partial, index)


def _line(path: Path, offset: int) -> dict[str, Any] | None:
    """The record at ``offset`` of ``path`` (None if it is not a whole JSON object)."""
    with open(path, "rb") as file:
        file.seek(offset)
        data = b""
        while b"\n" not in data:
            more = file.read(LINE_READ)
            if not more:
                return None
            data += more
    try:
        record = json.loads(data[: data.index(b"\n")])
    except ValueError:
        return None
    return record if isinstance(record, dict) else None
