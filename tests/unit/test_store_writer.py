"""The store writer: commits decided on the event loop, written by the log writer (or, to
start a segment or take back a failed write, by the writer worker). A real store in a
temporary folder; the fake runtime's log writer writes and syncs for real."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.defaults import location
from tests.fakes import FakeRuntime
from wiremq.modules.persistence.store import StoreWriter
from wiremq.stores.api import Committed, StoreTransaction
from wiremq.stores.errors import StoreError
from wiremq.stores.messagestore import WalStore
from wiremq.stores.records import StoredMessage

SEGMENT = 4096


def segments(folder: Path) -> list[Path]:
    """The log's segment files, oldest first (their names are their first records')."""
    return sorted((folder / "wal").glob("*.wal"))


def open_store(folder: Path) -> WalStore:
    return WalStore(
        folder / "wal",
        location((folder / "persqueue.fs").as_uri()),
        location((folder / "topics.fs").as_uri()),
        segment_bytes=SEGMENT,
        catch_up_bytes=1 << 16,
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[WalStore]:
    opened = open_store(tmp_path)
    yield opened
    opened.close()


class Outcomes:
    """What the writer reported to each commit's callbacks."""

    def __init__(self) -> None:
        self.done: list[Committed] = []
        self.failed: list[Exception] = []

    def commit(self, writer: StoreWriter, transaction: StoreTransaction) -> None:
        writer.commit(transaction, self.done.append, self.failed.append)


def append(body: bytes = b"x", destination: str = "/queue/q") -> StoreTransaction:
    return StoreTransaction(appends=(StoredMessage(body[:8].decode(), destination, (), body),))


def make(store: WalStore) -> tuple[FakeRuntime, StoreWriter, Outcomes]:
    runtime = FakeRuntime()
    return runtime, StoreWriter(store, runtime, lambda transactions: lambda: None), Outcomes()


def test_a_commit_is_decided_at_once_and_reported_once_the_log_writer_synced_it(
    store: WalStore,
) -> None:
    runtime, writer, outcomes = make(store)
    outcomes.commit(writer, append(b"a"))
    outcomes.commit(writer, append(b"b"))  # waits for the first commit
    outcomes.commit(writer, append(b"c"))
    log = runtime.workers["log"]
    assert len(log.calls) == 1 and not outcomes.done
    assert log.prepared == 1  # the sync thread was told before the record was made
    assert store.count("/queue/q") == (0, 0)  # not durable: not published
    log.run()  # the first write, then the other two in one record
    assert [r.positions for r in outcomes.done] == [(1,), (2,), (3,)]
    assert writer.commits == 2 and store.count("/queue/q") == (3, 3)
    assert log.prepared == 2
    assert not runtime.workers["writer"].calls


def test_a_record_that_starts_a_segment_is_written_by_the_writer_worker(
    store: WalStore, tmp_path: Path
) -> None:
    runtime, writer, outcomes = make(store)
    outcomes.commit(writer, append(b"x" * (SEGMENT // 2)))
    runtime.workers["log"].run()
    outcomes.commit(writer, append(b"y" * (SEGMENT // 2)))  # does not fit in the first
    assert not runtime.workers["log"].calls
    runtime.workers["writer"].run()
    assert [r.positions for r in outcomes.done] == [(1,), (2,)]
    assert len(segments(tmp_path)) == 2


def test_a_refused_transaction_fails_on_a_later_turn_and_changes_nothing(store: WalStore) -> None:
    runtime, writer, outcomes = make(store)
    outcomes.commit(writer, append(b"a", destination="/nowhere/q"))
    assert not outcomes.failed  # never from inside the caller's call
    runtime.run_soon()
    assert isinstance(outcomes.failed[0], StoreError)
    outcomes.commit(writer, append(b"b"))
    runtime.workers["log"].run()
    assert [r.positions for r in outcomes.done] == [(1,)]


def test_a_failed_write_is_taken_back_and_none_of_its_transactions_happened(
    store: WalStore, tmp_path: Path
) -> None:
    """The write fails for real (the log's descriptor made read-only under it); the
    descriptor works again by the time the writer worker takes the bytes back."""
    runtime, writer, outcomes = make(store)
    outcomes.commit(writer, append(b"a"))
    runtime.workers["log"].run()
    log_fd = _log_fd(store)
    outcomes.commit(writer, append(b"lost"))
    saved = os.dup(log_fd)
    read_only = os.open(segments(tmp_path)[-1], os.O_RDONLY)
    os.dup2(read_only, log_fd)
    runtime.workers["log"].run()
    os.dup2(saved, log_fd)
    for extra in (saved, read_only):
        os.close(extra)
    assert not outcomes.failed
    runtime.workers["writer"].run()  # takes the bytes back, then reports
    assert isinstance(outcomes.failed[0], StoreError)
    assert store.count("/queue/q") == (1, 1)
    outcomes.commit(writer, append(b"b"))
    runtime.workers["log"].run()
    assert [r.positions for r in outcomes.done] == [(1,), (2,)]
    store.close()
    reopened = open_store(tmp_path)
    try:
        batch = reopened.read("/queue/q", now_ms=0, after_seq=0, limit=10, max_bytes=10**6)
        assert [m.body for _, m in batch.messages] == [b"a", b"b"]
    finally:
        reopened.close()


def _log_fd(store: WalStore) -> int:
    """The descriptor the log writes its next record through (no commit under way)."""
    pending = store.begin([append(b"probe")])
    store.abandon(pending)
    assert pending.write is not None
    return pending.write.fd


def test_what_a_commit_changed_is_told_after_its_callbacks_once_their_replies_are_written(
    store: WalStore,
) -> None:
    """The store watermarks' bookkeeping does not hold up a receipt: ``on_changed`` runs
    after the writes (the fake runtime's calls soon), after the commit's callbacks."""
    runtime = FakeRuntime()
    events: list[str] = []

    def changed(transactions: list[StoreTransaction]) -> Callable[[], None]:
        return lambda: events.append("told")

    writer = StoreWriter(store, runtime, changed)
    writer.commit(append(b"a"), lambda result: events.append("done"), events.append)
    runtime.workers["log"].run()
    assert events == ["done"]
    runtime.run_soon()
    assert events == ["done", "told"]
