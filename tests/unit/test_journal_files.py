"""The journal's files: whole batches appended, rotated by size, named in order."""

from __future__ import annotations

from wiremq.modules.journal.files import SUFFIX, JournalFiles


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
