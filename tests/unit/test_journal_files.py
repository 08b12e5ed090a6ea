"""The journal's files: whole batches appended, rotated by size, named in order."""

from __future__ import annotations

import ctypes
import mmap
import os

import pytest

from wiremq.modules.journal.files import SUFFIX, JournalFiles

PAGE = mmap.PAGESIZE


def test_batches_are_appended_whole_and_a_file_is_closed_before_it_passes_its_size(tmp_path):
    files = JournalFiles(tmp_path / "journal", 100, "abcd")
    batches = [b"a" * 30 + b"\n", b"b" * 40 + b"\n", b"c" * 50 + b"\n", b"d" * 10 + b"\n"]
    for batch in batches:
        assert files.write(batch) == len(batch)
    files.close()
    written = sorted((tmp_path / "journal").glob("*" + SUFFIX))
    assert [p.suffix for p in written] == [SUFFIX] * 2
    assert [p.read_bytes() for p in written] == [batches[0] + batches[1], batches[2] + batches[3]]
    assert all("-abcd-" in p.name for p in written)
    assert files.current is None


def test_a_batch_larger_than_a_file_gets_a_file_of_its_own(tmp_path):
    files = JournalFiles(tmp_path, 10, "abcd")
    files.write(b"x\n")
    files.write(b"y" * 30 + b"\n")
    files.write(b"z\n")
    files.close()
    assert [p.read_bytes() for p in sorted(tmp_path.glob("*" + SUFFIX))] == [
        b"x\n",
        b"y" * 30 + b"\n",
        b"z\n",
    ]


def test_names_sort_in_the_order_written_and_two_runs_never_share_a_file(tmp_path):
    first = JournalFiles(tmp_path, 5, "aaaa")
    second = JournalFiles(tmp_path, 5, "bbbb")
    for n in range(12):
        first.write(f"{n:04d}\n".encode())
    second.write(b"other\n")
    first.close()
    second.close()
    mine = sorted(p for p in tmp_path.glob("*" + SUFFIX) if "-aaaa-" in p.name)
    assert [p.read_text() for p in mine] == [f"{n:04d}\n" for n in range(12)]
    assert len(list(tmp_path.glob("*" + SUFFIX))) == 13


def test_nothing_written_opens_no_file(tmp_path):
    files = JournalFiles(tmp_path, 100, "abcd")
    assert files.write(b"") == 0
    files.close()
    assert list(tmp_path.iterdir()) == []


def cached_pages(path, start: int, end: int) -> int:
    """How many pages of ``path`` between ``start`` and ``end`` are in the page cache
    (mincore on a mapping of the file, which brings none in)."""
    libc = ctypes.CDLL(None, use_errno=True)
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_COPY) as view:
        pages = (end - start + PAGE - 1) // PAGE
        flags = (ctypes.c_ubyte * pages)()
        anchor = ctypes.c_char.from_buffer(view, start)
        try:
            if libc.mincore(ctypes.c_void_p(ctypes.addressof(anchor)), end - start, flags):
                raise OSError(ctypes.get_errno(), "mincore")
        finally:
            del anchor  # the mapping cannot close while a ctypes object holds it
        return sum(flag & 1 for flag in flags)


def drops_pages(folder) -> bool:
    """Whether this file system gives written pages back when asked (tmpfs does not)."""
    probe = folder / "probe"
    probe.write_bytes(b"p" * 16 * PAGE)
    with open(probe, "rb+") as file:
        os.fsync(file.fileno())
        os.posix_fadvise(file.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    dropped = cached_pages(probe, 0, 16 * PAGE) < 16
    probe.unlink()
    return dropped


def test_the_writer_leaves_only_the_last_bytes_it_wrote_in_the_page_cache(tmp_path):
    if not drops_pages(tmp_path):
        pytest.skip("this file system keeps its pages in memory (tmpfs)")
    cached = 64 * PAGE
    files = JournalFiles(tmp_path, 1 << 30, "abcd", cached=cached)
    chunk = b"x" * (16 * PAGE - 1) + b"\n"
    for _ in range(16):
        files.write(chunk)
    path = files.current
    with open(path, "rb") as file:
        os.fsync(file.fileno())  # what the writer asked to go so far is written back now
    for _ in range(8):  # 2 * cached more: the writer asks again
        files.write(chunk)
    size = 24 * len(chunk)
    assert cached_pages(path, 0, size - 2 * cached) == 0
    assert cached_pages(path, size - cached, size) == cached // PAGE
    files.close()
    assert cached_pages(path, 0, size) == 0  # synced and given back when closed
    assert path.read_bytes() == chunk * 24
