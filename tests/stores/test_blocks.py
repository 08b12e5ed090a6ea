"""The block layout on FileStorage: a commit writes a few records whatever its size,
and a torn removal is not reported as lost messages."""

from __future__ import annotations

import os
from pathlib import Path

from structlog.testing import capture_logs
from ZODB.FileStorage import FileStorage

from wiremq.stores.model import BLOCK_BYTES, BLOCK_MESSAGES, MessageLog, blocks_of
from wiremq.stores.persqueue import PersQueueStore
from wiremq.stores.storage import open_database

from .store_fixtures import message, queue_ids, recovery_events


def records_in_last_transaction(path: Path) -> int:
    storage = FileStorage(str(path), read_only=True)
    try:
        counts = [len(list(transaction)) for transaction in storage.iterator()]
        return counts[-1]
    finally:
        storage.close()


def test_blocks_of_cuts_runs_at_the_message_and_byte_limits() -> None:
    small = [message(f"s{i}", body=b"x" * 10) for i in range(BLOCK_MESSAGES + 1)]
    assert [len(run) for run in blocks_of(small)] == [BLOCK_MESSAGES, 1]
    big = [message("big", body=b"x" * (BLOCK_BYTES * 2)), message("after")]
    assert [[m.message_id for m in run] for run in blocks_of(big)] == [["big"], ["after"]]
    assert list(blocks_of([])) == []


def test_an_append_writes_the_same_few_records_for_one_message_or_forty(
    tmp_path: Path,
) -> None:
    path = tmp_path / "Data.fs"
    db = open_database(path.as_uri())
    store = PersQueueStore(db)
    store.append([message("warm-up")])  # creates the queue's log
    store.append([message("one")])
    db.close()
    one = records_in_last_transaction(path)
    db = open_database(path.as_uri())
    PersQueueStore(db).append([message(f"m{i}") for i in range(40)])
    db.close()
    assert records_in_last_transaction(path) == one <= 5  # index bucket, block, content, log


def test_a_torn_removal_loses_no_message_and_names_none(tmp_path: Path) -> None:
    path = tmp_path / "Data.fs"
    db = open_database(path.as_uri())
    store = PersQueueStore(db)
    seqs = store.append([message(f"m{i}", body=b"x" * 300) for i in range(4)])
    before = path.stat().st_size
    store.remove("/queue/a", seqs[:2])  # rewrites the block with two marked gone
    after = path.stat().st_size
    db.close()
    os.truncate(path, (before + after) // 2)
    with capture_logs() as logs:
        ids = queue_ids(path.as_uri())
    (event,) = recovery_events(logs)
    assert "remove" in str(event["transaction_note"]) and event["lost_messages"] == []
    assert ids == ["m0", "m1", "m2", "m3"]  # the removal never committed: all still there


def test_only_blocks_being_consumed_keep_decoded_messages() -> None:
    log = MessageLog()
    log.append([message(f"m{i}") for i in range(3)])
    block = log.blocks[1]
    assert [m.message_id for _, m in log.after(0)] == ["m0", "m1", "m2"]
    assert getattr(block, "_v_messages", None) is None  # a read keeps nothing
    assert [m.message_id for _, m in log.pop([2])] == ["m1"]
    assert getattr(block, "_v_messages", None) is not None  # more removals will follow
    assert [seq for seq, _ in log.pop([3, 1, 1])] == [3, 1]
    assert getattr(block, "_v_messages", None) is None and 1 not in log.blocks
    assert (log.count, log.bytes) == (0, 0)
