"""A FileStorage damaged by a crash: a torn last transaction is recovered and logged;
damage with committed data after it is refused, leaving the file untouched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from tests.defaults import location
from wiremq.stores.errors import StoreOpenError
from wiremq.stores.storage import open_database

from .store_fixtures import database_append, message, queue_ids, recovery_events


def write_batches(path: Path, batches: int) -> list[int]:
    """Commit ``batches`` appends of two messages; returns the file size after each."""
    db = open_database(location(path.as_uri()))
    sizes = []
    for n in range(batches):
        database_append(db, [message(f"b{n}-{i}", body=b"x" * 200) for i in range(2)])
        sizes.append(path.stat().st_size)
    db.close()
    return sizes


def test_a_transaction_torn_mid_write_is_cut_off_and_its_messages_are_logged(
    tmp_path: Path,
) -> None:
    path = tmp_path / "Data.fs"
    sizes = write_batches(path, 3)
    os.truncate(path, (sizes[1] + sizes[2]) // 2)  # half of the last transaction reached disk
    with capture_logs() as logs:
        ids = queue_ids(path.as_uri())
    assert ids == ["b0-0", "b0-1", "b1-0", "b1-1"]
    (event,) = recovery_events(logs)
    assert event["at_offset"] == sizes[1] and event["discarded_bytes"] == (sizes[2] - sizes[1]) // 2
    assert "append 2" in str(event["transaction_note"])
    assert set(event["lost_messages"]) <= {"/queue/a b2-0", "/queue/a b2-1"}
    assert (tmp_path / "Data.fs.tr0").stat().st_size == event["discarded_bytes"]
    with capture_logs() as logs:
        assert queue_ids(path.as_uri()) == ids
    assert recovery_events(logs) == []


def test_a_zero_filled_tail_is_cut_off(tmp_path: Path) -> None:
    """A crash can leave the file longer than what was written, filled with zeros."""
    path = tmp_path / "Data.fs"
    sizes = write_batches(path, 2)
    with path.open("ab") as file:
        file.write(bytes(4096))
    with capture_logs() as logs:
        assert queue_ids(path.as_uri()) == ["b0-0", "b0-1", "b1-0", "b1-1"]
    (event,) = recovery_events(logs)
    assert (event["at_offset"], event["discarded_bytes"]) == (sizes[1], 4096)
    assert event["transaction_began"] == "unknown (no readable header)"


def test_a_transaction_voted_but_never_finished_is_cut_off(tmp_path: Path) -> None:
    uri = (tmp_path / "Data.fs").as_uri()
    child = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("child_stall_commit.py")), uri],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "COMMITTED"
        assert child.stdout.readline().strip() == "VOTED"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    with capture_logs() as logs:
        assert queue_ids(uri) == ["kept"]
    (event,) = recovery_events(logs)
    assert sorted(event["lost_messages"]) == [
        "/queue/a lost-0",
        "/queue/a lost-1",
        "/queue/a lost-2",
    ]


def test_damage_followed_by_committed_transactions_is_refused_untouched(
    tmp_path: Path,
) -> None:
    path = tmp_path / "Data.fs"
    sizes = write_batches(path, 4)
    (tmp_path / "Data.fs.index").unlink()
    with path.open("r+b") as file:  # the second transaction's length now runs past the end
        file.seek(sizes[0] + 8)
        file.write((10**9).to_bytes(8, "big"))
    before = path.read_bytes()
    with pytest.raises(StoreOpenError, match="is damaged at byte .* committed transactions follow"):
        open_database(location(path.as_uri()))
    assert path.read_bytes() == before


def test_a_file_that_is_not_a_filestorage_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "Data.fs"
    path.write_bytes(b"this is not a database" * 10)
    with pytest.raises(StoreOpenError, match="is damaged") as caught:
        open_database(location(path.as_uri()))
    assert "fsrecover" in str(caught.value)
