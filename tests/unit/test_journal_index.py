"""The journal by message id: the writer's index beside each file, and a message's records
found through it, in order, across files, past a lost index and a line half written."""

from __future__ import annotations

import itertools
import json
import random
import struct

from wiremq.modules.journal._encode import index_key, index_lines, sort_index
from wiremq.modules.journal.files import JournalFiles
from wiremq.modules.journal.index import JournalIndex, index_path, writing_index_path


def _line(event: str, message_id: str | None, **fields: object) -> bytes:
    record = {"v": 1, "event": event, "ts": 1, **fields}
    if message_id is not None:
        record["message_id"] = message_id
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def _colliding() -> tuple[str, str]:
    """Two message ids whose index keys are the same (24 bits: found in a few thousand)."""
    seen: dict[int, str] = {}
    for n in itertools.count():
        message_id = f"wmq-collide-{n}"
        key = index_key(message_id)
        if key in seen:
            return seen[key], message_id
        seen[key] = message_id
    raise AssertionError


def test_a_story_is_every_record_of_the_id_in_order_across_files(tmp_path):
    folder = tmp_path / "journal"
    files = JournalFiles(folder, 300, "abcd")
    one, other = _colliding()
    odd = 'wmq-"quoted"\\-\u00e9'
    batches = [
        _line("server_started", None, server="abcd") + _line("received", one, destination="/q"),
        _line("received", other, destination="/q") + _line("stored", one, seq=1),
        _line("received", odd) + _line("delivered", one, session="s1"),
        _line("acknowledged", one, session="s1") + _line("consumed", odd),
    ]
    for batch in batches:
        files.write(batch)
    assert files.files >= 2, "the story spans files"
    index = JournalIndex(folder, lambda: files.current)
    story = index.story(one)
    events = [r["event"] for r in story.records]
    assert events == ["received", "stored", "delivered", "acknowledged"]
    assert story.files == files.files and story.indexed == 0
    assert len({r["file"] for r in story.records}) >= 2
    assert [r["event"] for r in index.story(other).records] == ["received"], "a shared key"
    assert [r["event"] for r in index.story(odd).records] == ["received", "consumed"]
    assert index.story("wmq-never").records == []
    files.close()


def test_a_file_without_an_index_gets_one_unless_it_is_being_written(tmp_path):
    folder = tmp_path / "journal"
    files = JournalFiles(folder, 10_000, "abcd")
    files.write(_line("received", "m1") + _line("stored", "m1"))
    files.close()
    (written,) = folder.glob("*.jsonl")
    entries = index_path(written).read_bytes()
    assert len(entries) == 16
    index_path(written).unlink()  # a journal of a version before indexes
    story = JournalIndex(folder).story("m1")
    assert story.indexed == 1 and len(story.records) == 2
    assert index_path(written).read_bytes() == entries, "rebuilt as the writer wrote it"
    current = folder / "99999999T000000-beef-00001.jsonl"
    current.write_bytes(_line("received", "m1"))
    story = JournalIndex(folder, lambda: current).story("m1")
    assert len(story.records) == 3 and story.indexed == 0
    assert not index_path(current).exists(), "the writer's own file is left to it"


def test_lines_past_the_index_are_found_and_a_half_written_line_is_not(tmp_path):
    folder = tmp_path / "journal"
    files = JournalFiles(folder, 10_000, "abcd")
    files.write(_line("received", "m1"))
    path = files.current
    assert path is not None
    with open(path, "ab") as journal:  # written, its entries lost (a crash between)
        journal.write(_line("cleanup_started", None) + _line("stored", "m1"))
        journal.write(_line("acknowledged", "m1")[:20])  # being written
    story = JournalIndex(folder, lambda: path).story("m1")
    assert [r["event"] for r in story.records] == ["received", "stored"]
    files.close()


def test_index_entries_are_each_lines_offset_and_key():
    data = _line("received", "a") + _line("cleanup_ended", None) + _line("stored", "b")
    entries = index_lines(data, 1000)
    assert len(entries) == 16
    first, second = (int.from_bytes(entries[i : i + 8], "little") for i in (0, 8))
    assert first & (2**40 - 1) == 1000 and first >> 40 == index_key("a")
    second_at = 1000 + len(_line("received", "a")) + len(_line("cleanup_ended", None))
    assert second & (2**40 - 1) == second_at and second >> 40 == index_key("b")


def test_a_closed_file_has_its_entries_sorted_and_a_crashed_runs_are_sorted_when_read(
    tmp_path,
):
    folder = tmp_path / "journal"
    files = JournalFiles(folder, 10_000, "abcd")
    files.write(_line("received", "zz") + _line("received", "aa") + _line("stored", "zz"))
    written = files.current
    assert written is not None and writing_index_path(written).exists()
    files.close()
    assert not writing_index_path(written).exists()
    entries = index_path(written).read_bytes()
    values = [int.from_bytes(entries[i : i + 8], "little") for i in range(0, len(entries), 8)]
    assert values == sorted(values) and len(values) == 3
    crashed = JournalFiles(folder, 10_000, "dead")
    crashed.write(_line("received", "zz"))
    left = crashed.current  # never closed: its entries as written, no sorted index
    assert left is not None
    story = JournalIndex(folder).story("zz")
    assert [r["event"] for r in story.records] == ["received", "stored", "received"]
    assert story.indexed == 1 and index_path(left).exists()
    assert not writing_index_path(left).exists()


def test_a_file_a_lookup_indexed_while_it_was_being_closed_is_left_as_it_is(tmp_path):
    folder = tmp_path / "journal"
    files = JournalFiles(folder, 10_000, "abcd")
    files.write(_line("received", "m1"))
    written = files.current
    assert written is not None
    # the writer is between two files: a lookup finds this one closed and sorts its index
    assert len(JournalIndex(folder, lambda: None).story("m1").records) == 1
    assert index_path(written).exists() and not writing_index_path(written).exists()
    files.close()  # its own sorting finds the work done
    assert len(JournalIndex(folder).story("m1").records) == 1


def test_sort_index_orders_entries_by_key_then_offset_as_64_bit_numbers():
    generator = random.Random(27)
    keys = [generator.getrandbits(24) for _ in range(50)]  # few keys: many share one
    values = [
        (generator.choice(keys) << 40) | generator.getrandbits(generator.choice((12, 26, 40)))
        for _ in range(20_000)
    ]
    entries = struct.pack(f"<{len(values)}Q", *values)
    assert struct.unpack(f"<{len(values)}Q", sort_index(entries)) == tuple(sorted(values))
    assert sort_index(b"") == b""
    assert sort_index(struct.pack("<Q", 1 << 63)) == struct.pack("<Q", 1 << 63)
