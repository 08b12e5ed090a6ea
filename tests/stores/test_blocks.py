"""The block layout on FileStorage: a commit writes a few records whatever its size,
and a torn removal is not reported as lost messages."""

from __future__ import annotations

import os
from pathlib import Path

from structlog.testing import capture_logs
from ZODB.FileStorage import FileStorage

from tests.defaults import location
from wiremq.stores.bodies import OUT_OF_BAND_FROM
from wiremq.stores.logstore import open_session
from wiremq.stores.model import (
    BLOCK_BYTES,
    BLOCK_MESSAGES,
    BLOCK_SPAN,
    BODY_PIECE_BYTES,
    LogSet,
    runs_at,
)
from wiremq.stores.storage import open_database

from .store_fixtures import database_append, database_remove, message, queue_ids, recovery_events


def records_in_last_transaction(path: Path) -> int:
    storage = FileStorage(str(path), read_only=True)
    try:
        counts = [len(list(transaction)) for transaction in storage.iterator()]
        return counts[-1]
    finally:
        storage.close()


def test_runs_at_cuts_runs_at_the_message_byte_and_span_limits() -> None:
    small = [(i + 1, message(f"s{i}", body=b"x" * 10)) for i in range(BLOCK_MESSAGES + 1)]
    assert [len(run) for run in runs_at(small)] == [BLOCK_MESSAGES, 1]
    big = [(1, message("big", body=b"x" * (BLOCK_BYTES * 2))), (2, message("after"))]
    assert [[m.message_id for _, m in run] for run in runs_at(big)] == [["big"], ["after"]]
    spread = [(1, message("a")), (1 + BLOCK_SPAN, message("far"))]
    assert [len(run) for run in runs_at(spread)] == [1, 1]
    assert list(runs_at([])) == []


def test_an_append_writes_the_same_few_records_for_one_message_or_forty(
    tmp_path: Path,
) -> None:
    path = tmp_path / "Data.fs"
    db = open_database(location(path.as_uri()))
    database_append(db, [message("warm-up")])  # creates the queue's log
    database_append(db, [message("one")])
    db.close()
    one = records_in_last_transaction(path)
    db = open_database(location(path.as_uri()))
    database_append(db, [message(f"m{i}") for i in range(40)])
    db.close()
    assert records_in_last_transaction(path) == one <= 5  # index bucket, block, content, log


def test_a_large_body_is_kept_beside_its_blocks_pickle_in_pieces_and_read_back_whole(
    tmp_path: Path,
) -> None:
    """A body from OUT_OF_BAND_FROM on is not pickled into the block's content but kept
    beside it in pieces of BODY_PIECE_BYTES, each a record (ZODB's pickler holds a record
    twice while it writes it); smaller ones are in the pickle. Read back, each piece is let
    go of once copied."""
    path = tmp_path / "Data.fs"
    large = os.urandom(2 * BODY_PIECE_BYTES + 10)
    small = os.urandom(OUT_OF_BAND_FROM - 1)
    db = open_database(location(path.as_uri()))
    database_append(db, [message("large", body=large), message("small", body=small)])
    db.close()
    db = open_database(location(path.as_uri()))
    session = open_session(db, "persqueue", LogSet)
    try:
        with session.read() as logs:
            large_block, small_block = logs.logs["/queue/a"].blocks.values()
            (pieces,) = large_block.content.bodies
            assert small_block.content.bodies == ()
            assert len(large_block.content.data) < 1000 < len(small) < len(small_block.content.data)
            messages = [m for block in (large_block, small_block) for _, m in block.live()]
            assert [(m.message_id, m.body) for m in messages] == [
                ("large", large),
                ("small", small),
            ]
            assert [piece._p_status for piece in pieces] == ["ghost"] * 3
            assert [len(piece.data) for piece in pieces] == [BODY_PIECE_BYTES] * 2 + [10]
    finally:
        session.close()
        db.close()


def test_a_torn_removal_loses_no_message_and_names_none(tmp_path: Path) -> None:
    path = tmp_path / "Data.fs"
    db = open_database(location(path.as_uri()))
    seqs = database_append(db, [message(f"m{i}", body=b"x" * 300) for i in range(4)])
    before = path.stat().st_size
    database_remove(db, seqs[:2])  # rewrites the block's bookkeeping with two marked gone
    after = path.stat().st_size
    db.close()
    os.truncate(path, (before + after) // 2)
    with capture_logs() as logs:
        ids = queue_ids(path.as_uri())
    (event,) = recovery_events(logs)
    assert "remove" in str(event["transaction_note"]) and event["lost_messages"] == []
    assert ids == ["m0", "m1", "m2", "m3"]  # the removal never committed: all still there
