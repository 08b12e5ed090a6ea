"""The journal by message id: a message's life story, read from its records in order.

Beside each journal file ``F.jsonl`` the writer keeps ``F.jsonl.idx``: one 8-byte
entry per line that names a message, appended after each batch it writes (``files.py``),
each the line's offset in ``F`` and a 24-bit key of its message id (``_encode.c``,
``index_lines``). A lookup finds the entries of the id's key in every index (a
byte search: the entries of a 1 GB journal are about 40 MB), reads each line they
point at and keeps those of that id (a key is shared by about one id in 16
million), then reads what the index does not cover yet: the file past its last
entry (a batch whose entries a crash lost). A journal file without an index
(written before there were any) gets one the first time it is looked through,
unless the writer has it open. Nothing on the message path changes for it.
"""

from __future__ import annotations

import json
import mmap
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wiremq.modules.journal._encode import index_key, index_lines

SUFFIX = ".jsonl"
INDEX_SUFFIX = ".idx"
ENTRY = 8  # bytes: the line's offset (40 bits), then its id's key (24 bits), little-endian
OFFSET_BITS = 40
KEY_AT = 5  # where an entry's key starts
LINE_READ = 4096  # bytes read at once for one line (a longer one is read on)


def index_path(journal: Path) -> Path:
    """The index beside a journal file."""
    return journal.with_name(journal.name + INDEX_SUFFIX)


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
        """The offsets in ``path`` of the lines whose id has ``key``: from its index, then
        from the part of the file past the index's last entry."""
        index = index_path(path)
        try:
            entries = index.read_bytes()
        except FileNotFoundError:
            if path != self.current():
                entries = _build(path, index)
                story.indexed += 1
            else:
                entries = b""
        entries = entries[: len(entries) - len(entries) % ENTRY]
        found = list(_matching(entries, key))
        last = _offset_at(entries, len(entries) - ENTRY) if entries else None
        found += _matching(_scan(path, last), key)
        return found


def _matching(entries: bytes, key: int) -> Iterator[int]:
    """The offsets of the entries with ``key``: a byte search for the key's three bytes,
    kept where they are an entry's key."""
    wanted = key.to_bytes(3, "little")
    at = entries.find(wanted)
    while at >= 0:
        if at % ENTRY == KEY_AT:
            yield _offset_at(entries, at - KEY_AT)
            at = entries.find(wanted, at + ENTRY - KEY_AT)
        else:
            at = entries.find(wanted, at + 1)


def _offset_at(entries: bytes, at: int) -> int:
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


def _build(path: Path, index: Path) -> bytes:
    """Index a journal file nobody writes any more; the index is written whole, atomically."""
    entries = _scan(path)
    partial = index.with_name(f".{index.name}.{os.getpid()}")
    partial.write_bytes(entries)
    os.replace(partial, index)
    return entries


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
