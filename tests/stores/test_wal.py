"""The write-ahead log's files on disk: torn tails, damage, segments, failed writes."""

from __future__ import annotations

import gc
import itertools
import os
import shutil
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs
from ZODB.serialize import ObjectWriter

from tests.defaults import WAL_OPTIONS, location
from tests.tmpfs import MIB, fill_up, small_tmpfs
from wiremq.stores import wal as wal_module
from wiremq.stores.api import StoreTransaction
from wiremq.stores.bodies import OUT_OF_BAND_FROM
from wiremq.stores.errors import StoreError, StoreOpenError
from wiremq.stores.messagestore import WalStore
from wiremq.stores.model import BLOCK_BYTES, BODY_PIECE_BYTES, BodyPiece
from wiremq.stores.storage import Location
from wiremq.stores.wal import HEADER, record_at
from wiremq.stores.walops import OUT_OF_BAND

from .store_fixtures import commit, message, recovery_events, send, stored_ids


def open_store(folder: Path, **options: Any) -> WalStore:
    return WalStore(
        folder / "wal",
        location((folder / "persqueue.fs").as_uri()),
        location((folder / "topics.fs").as_uri()),
        **{**WAL_OPTIONS, "segment_bytes": 1 << 16, **options},
    )


def crash(store: WalStore) -> None:
    """Let go of the store as a killed process would: nothing more is applied."""
    store._close_all()


def segments(folder: Path) -> list[Path]:
    return sorted((folder / "wal").glob("*.wal"))


def spans(segment: Path) -> list[tuple[int, int]]:
    """(start, end) of each record in a segment."""
    data = segment.read_bytes()
    found, pos = [], 0
    while (end := record_at(data, pos)) >= 0:
        found.append((pos, end))
        pos = end
    return found


def write_pending(folder: Path, count: int, **options: Any) -> list[tuple[int, int]]:
    """Commit ``count`` one-message appends that stay in the log only; their spans."""
    store = open_store(folder, **options)
    for i in range(count):
        send(store, message(f"m{i}", body=b"x" * 200))
    crash(store)
    (segment,) = segments(folder)
    return spans(segment)


def torn_events(logs: list[Any]) -> list[Any]:
    return [e for e in logs if e["event"] == "wal.torn_tail"]


def flip(path: Path, offset: int) -> None:
    """Invert one byte of a file."""
    with path.open("r+b") as file:
        file.seek(offset)
        byte = file.read(1)[0]
        file.seek(offset)
        file.write(bytes([byte ^ 0xFF]))


def overwrite(path: Path, offset: int, data: bytes) -> None:
    with path.open("r+b") as file:
        file.seek(offset)
        file.write(data)


@pytest.mark.parametrize(
    ("what", "keep"),
    [
        ("the end of its payload never reached the disk", lambda s, e: (s + e) // 2),
        ("only part of its header reached the disk", lambda s, e: s + 10),
    ],
)
def test_a_torn_last_record_is_cut_off_and_logged(tmp_path: Path, what: str, keep: Any) -> None:
    records = write_pending(tmp_path, 4)
    (segment,) = segments(tmp_path)
    start, end = records[-1]
    overwrite(segment, keep(start, end), bytes(end - keep(start, end)))  # zeros, as prefilled
    with capture_logs() as logs:
        store = open_store(tmp_path)
    (event,) = torn_events(logs)
    assert (event["record"], event["at_offset"], event["log_level"]) == (4, start, "warning")
    assert 0 < event["discarded_bytes"] <= keep(start, end) - start
    assert event["record_header"] == (
        "not written" if keep(start, end) < start + 16 else "readable"
    )
    assert stored_ids(store) == ["m0", "m1", "m2"], what
    assert segment.read_bytes()[start:end] == bytes(end - start)  # the remains are gone
    assert send(store, message("next")) == [4]
    crash(store)
    with capture_logs() as logs:
        store = open_store(tmp_path)
    assert torn_events(logs) == []
    assert stored_ids(store) == ["m0", "m1", "m2", "next"]
    store.close()


def test_a_damaged_record_followed_by_good_ones_is_refused_and_nothing_changes(
    tmp_path: Path,
) -> None:
    records = write_pending(tmp_path, 4)
    (segment,) = segments(tmp_path)
    start, end = records[1]
    flip(segment, end - 5)  # one byte of the second record's payload
    before = {p.name: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(StoreOpenError, match=f"damaged at byte {start}: good records follow"):
        open_store(tmp_path)
    after = {p.name: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before


def test_a_damaged_length_in_the_middle_is_refused(tmp_path: Path) -> None:
    records = write_pending(tmp_path, 3)
    (segment,) = segments(tmp_path)
    overwrite(segment, records[0][0] + 4, (10**6).to_bytes(4, "big"))
    with pytest.raises(StoreOpenError, match="damaged at byte 0"):
        open_store(tmp_path)


def test_segments_rotate_by_size_and_go_once_applied(tmp_path: Path) -> None:
    store = open_store(tmp_path, segment_bytes=4096)
    for i in range(60):
        send(store, message(f"m{i}", body=b"x" * 200))
    assert len(segments(tmp_path)) >= 3
    store.catch_up(10.0)
    assert len(segments(tmp_path)) == 1  # the one being written
    assert (tmp_path / "wal" / "prepared.tmp").exists()  # the next one, zero-filled ahead
    for i in range(60, 80):
        send(store, message(f"m{i}", body=b"x" * 200))
    assert not (tmp_path / "wal" / "prepared.tmp").exists()  # taken by the rotation
    store.catch_up(10.0)  # prepares the next one again
    crash(store)
    store = open_store(tmp_path, segment_bytes=4096)
    assert stored_ids(store) == [f"m{i}" for i in range(80)]
    assert store._wal._prepared  # the prepared segment of the last run is used
    store.close()
    assert len(segments(tmp_path)) == 1


def test_a_record_bigger_than_a_segment_gets_one_of_its_own(tmp_path: Path) -> None:
    store = open_store(tmp_path, segment_bytes=4096)
    send(store, message("small"))
    send(store, message("big", body=b"b" * 10_000))
    send(store, message("after"))
    files = segments(tmp_path)
    assert len(files) == 3 and 10_000 < files[1].stat().st_size < 10_400
    crash(store)
    store = open_store(tmp_path, segment_bytes=4096)
    assert stored_ids(store) == ["small", "big", "after"]
    store.close()


def test_a_big_record_that_replaces_an_empty_segment_is_kept(tmp_path: Path) -> None:
    """The new segment of a record bigger than a segment takes the name of an empty one
    (both are named after that record): the empty one must not be released over it."""
    store = open_store(tmp_path, segment_bytes=4096)
    send(store, message("big", body=b"b" * 10_000))
    assert len(segments(tmp_path)) == 1
    store._wal.release(0)  # nothing applied yet: nothing may go
    crash(store)
    store = open_store(tmp_path, segment_bytes=4096)
    assert stored_ids(store) == ["big"]
    store.catch_up(10.0)
    send(store, message("after"))
    store.close()
    store = open_store(tmp_path, segment_bytes=4096)
    assert stored_ids(store) == ["big", "after"]
    store.close()


def test_a_large_message_is_not_kept_in_the_database_caches(tmp_path: Path) -> None:
    """Written by the catch-up and read back, a large body's pieces leave the cache at once
    (each holds a view of the whole body when written, so one left would keep it all in
    memory), and the cache is trimmed to its byte bound (as many bytes as its object count
    of full blocks) after each transaction."""
    small_cache = Location((tmp_path / "persqueue.fs").as_uri(), 10.0, 100)
    store = WalStore(
        tmp_path / "wal",
        small_cache,
        location((tmp_path / "topics.fs").as_uri()),
        **{**WAL_OPTIONS, "segment_bytes": 1 << 16},
    )
    cache = store._parts[0].session._connection._cache

    def held() -> list[object]:
        return [o for _, o in cache.items() if isinstance(o, BodyPiece) and o._p_state >= 0]

    body = os.urandom(3 * BODY_PIECE_BYTES + 1)
    send(store, message("big", body=body))
    store.catch_up(10.0)
    assert len([o for _, o in cache.items() if isinstance(o, BodyPiece)]) == 4
    assert held() == []
    batch = store.read("/queue/a", now_ms=0, after_seq=0, limit=10, max_bytes=1)
    assert [m.body for _, m in batch.messages] == [body]
    assert held() == [] and cache.total_estimated_size < 100 * BLOCK_BYTES
    store.close()


def test_a_first_record_bigger_than_a_segment_replaces_the_empty_one(tmp_path: Path) -> None:
    store = open_store(tmp_path, segment_bytes=4096)
    send(store, message("big", body=b"b" * 10_000))
    assert len(segments(tmp_path)) == 1
    crash(store)
    store = open_store(tmp_path, segment_bytes=4096)
    assert stored_ids(store) == ["big"]
    store.close()


def test_large_bodies_are_written_beside_their_record_and_replayed_intact(
    tmp_path: Path,
) -> None:
    """A body from OUT_OF_BAND_FROM on follows its record's pickle as it is (the message's
    own bytes object is what gets written, not a copy joined to the record); a replay after
    a crash puts each back in its message."""
    store = open_store(tmp_path)
    large, small = os.urandom(OUT_OF_BAND_FROM), os.urandom(OUT_OF_BAND_FROM - 1)
    larger = os.urandom(3 * OUT_OF_BAND_FROM)
    appends = (message("large", body=large), message("small", body=small))
    pending = store.begin(
        [
            StoreTransaction(appends=appends),
            StoreTransaction(appends=(message("larger", body=larger),)),
        ]
    )
    assert pending.write is not None
    assert [id(part) for part in pending.write.parts[1:]] == [id(large), id(larger)]
    store.write(pending)
    store.finish(pending)
    crash(store)
    (segment,) = segments(tmp_path)
    assert segment.read_bytes()[HEADER.size : HEADER.size + 1] == OUT_OF_BAND
    store = open_store(tmp_path)
    batch = store.read("/queue/a", now_ms=0, after_seq=0, limit=10, max_bytes=1 << 30)
    assert [(m.message_id, m.body) for _, m in batch.messages] == [
        ("large", large),
        ("small", small),
        ("larger", larger),
    ]
    store.close()


@pytest.mark.parametrize("segment_bytes", [1 << 20, 1 << 16], ids=["shared", "own segment"])
def test_a_large_record_just_committed_is_applied_from_memory_not_read_back(
    tmp_path: Path, segment_bytes: int
) -> None:
    """The catch-up applies the last record with large bodies as the commit decided it
    (the log's copy is spoilt here, so reading it would fail its CRC) and reads on past it
    by its header, in its segment or in the next one."""
    store = open_store(tmp_path, segment_bytes=segment_bytes)
    body = os.urandom(2 * OUT_OF_BAND_FROM)
    send(store, message("before"))  # read from the log, in the batch that stops at it
    send(store, message("large", body=body))
    send(store, message("after"))
    first = segments(tmp_path)[0]
    large = spans(first)[1][0] if segment_bytes > len(body) else 0
    flip(segments(tmp_path)[segment_bytes < len(body)], large + HEADER.size + 100)
    store.catch_up(10.0)
    batch = store.read("/queue/a", now_ms=0, after_seq=0, limit=10, max_bytes=1 << 30)
    assert [(m.message_id, m.body) for _, m in batch.messages] == [
        ("before", b"body"),
        ("large", body),
        ("after", b"body"),
    ]
    assert store._held is None  # let go of once applied
    store.close()


def test_a_catch_up_commit_leaves_no_garbage_holding_what_it_wrote(tmp_path: Path) -> None:
    """ZODB's object writers make a reference cycle, each holding its last pickle (a large
    body's block) until the cycle collector runs; the store's connections break it."""
    store = open_store(tmp_path)
    send(store, message("large", body=os.urandom(2 * OUT_OF_BAND_FROM)))
    gc.collect()
    gc.disable()
    try:
        store.catch_up(10.0)
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        left = [o for o in gc.garbage if isinstance(o, ObjectWriter)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert left == []
    store.close()


def test_a_missing_segment_is_refused(tmp_path: Path) -> None:
    store = open_store(tmp_path, segment_bytes=4096)
    for i in range(40):
        send(store, message(f"m{i}", body=b"x" * 200))
    crash(store)
    files = segments(tmp_path)
    files[1].unlink()
    with pytest.raises(StoreOpenError, match="was next"):
        open_store(tmp_path, segment_bytes=4096)


def test_a_log_in_use_is_refused(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    try:
        with pytest.raises(StoreOpenError, match="in use by another process"):
            WalStore(
                tmp_path / "wal",
                location((tmp_path / "q.fs").as_uri()),
                location((tmp_path / "t.fs").as_uri()),
                **WAL_OPTIONS,
            )
    finally:
        store.close()


def test_a_log_removed_after_a_clean_close_starts_after_what_was_applied(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path)
    send(store, message("m0"), message("m1"))
    send(store, message("m2"))
    store.close()
    shutil.rmtree(tmp_path / "wal")
    store = open_store(tmp_path)
    send(store, message("m3"))
    assert store._wal.durable_lsn == 3  # past the two records the databases have applied
    crash(store)
    store = open_store(tmp_path)
    assert stored_ids(store) == ["m0", "m1", "m2", "m3"]
    store.close()


def test_stores_that_disagree_without_the_log_to_reconcile_them_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(tmp_path)
    commit(store, subscribes=((("c", "s"), "/topic/t", ""),))
    store.catch_up(1.0)
    send(store, message("q"), message("t", "/topic/t"))
    apply = type(store._parts[1]).apply
    monkeypatch.setattr(
        type(store._parts[1]),
        "apply",
        lambda part, records: apply(part, records) if part is store._parts[0] else 0,
    )
    store.catch_up(0.0)  # only the queue store's records are applied
    monkeypatch.setattr(type(store._parts[1]), "apply", apply)
    crash(store)
    shutil.rmtree(tmp_path / "wal")
    with pytest.raises(StoreOpenError, match="the records between are in neither the log"):
        open_store(tmp_path)


def test_catch_up_stops_when_its_time_is_up(tmp_path: Path) -> None:
    ticks: Iterator[float] = itertools.count(0.0, 1.0)  # each look: a second later
    store = open_store(tmp_path, catch_up_bytes=1, clock=ticks.__next__)
    for i in range(5):
        send(store, message(f"m{i}"))
    assert store.catch_up(0.5) == 1  # one batch of one record
    assert store._parts[0].applied == 1
    assert store.catch_up(100.0) == 4
    store.close()


def test_a_failed_write_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(tmp_path)
    send(store, message("kept"))
    write = wal_module.WriteAheadLog._write_record

    def half_then_fail(self: Any, fd: int, parts: Sequence[bytes], offset: int) -> None:
        record = b"".join(parts)
        write(self, fd, (record[: len(record) // 2],), offset)
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(wal_module.WriteAheadLog, "_write_record", half_then_fail)
    with pytest.raises(StoreError, match="Input/output error"):
        send(store, message("lost"))
    monkeypatch.undo()
    assert store.count("/queue/a")[0] == 1
    crash(store)
    with capture_logs() as logs:
        store = open_store(tmp_path)
    assert torn_events(logs) == []  # the half record was zeroed again
    assert stored_ids(store) == ["kept"]
    store.close()


def test_a_failed_sync_that_cannot_be_taken_back_stops_every_later_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(tmp_path)
    send(store, message("kept"))

    def broken_disk(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(wal_module, "sync_data", broken_disk)
    with pytest.raises(StoreError, match="Input/output error"):
        send(store, message("unknown"))
    monkeypatch.undo()
    with pytest.raises(StoreError, match="failed earlier .* restart"):
        send(store, message("refused"))
    assert store.count("/queue/a")[0] == 1
    crash(store)
    store = open_store(tmp_path)
    assert stored_ids(store)[0] == "kept" and "refused" not in stored_ids(store)
    store.close()


def test_a_message_too_big_to_count_is_refused(tmp_path: Path) -> None:
    class Huge(bytes):
        def __len__(self) -> int:
            return 2**32

    store = open_store(tmp_path)
    with pytest.raises(StoreError, match="too big"):
        send(store, message("huge", body=Huge(b"x")))
    assert store.totals("/queue/") == (0, 0)
    store.close()


def test_segment_names_follow_their_first_record(tmp_path: Path) -> None:
    store = open_store(tmp_path, segment_bytes=4096)
    for i in range(30):
        send(store, message(f"m{i}", body=b"x" * 200))
    for path in segments(tmp_path):
        first = spans(path)[0][0]
        data = path.read_bytes()
        assert HEADER.unpack_from(data, first)[2] == int(path.stem)
    store.close()


def test_a_torn_catch_up_commit_is_replayed_and_not_called_a_loss(tmp_path: Path) -> None:
    path = tmp_path / "persqueue.fs"
    store = open_store(tmp_path)
    send(store, message("m0"))
    store.catch_up(1.0)
    applied_once = path.stat().st_size
    send(store, message("m1"))
    store.catch_up(1.0)
    applied_twice = path.stat().st_size
    crash(store)
    os.truncate(path, (applied_once + applied_twice) // 2)  # the last catch-up half written
    with capture_logs() as logs:
        store = open_store(tmp_path)
    (event,) = recovery_events(logs)
    assert "apply write-ahead log 2..2" in event["transaction_note"]
    assert event["meaning"].startswith("a catch-up from the write-ahead log was cut off")
    assert [e["records"] for e in logs if e["event"] == "wal.replayed"] == [1]
    assert stored_ids(store) == ["m0", "m1"]
    store.close()


def test_commits_and_catch_up_on_two_threads_end_where_the_commits_said(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path, segment_bytes=8192, catch_up_bytes=2048)
    commit(store, subscribes=((("c", "s"), "/topic/t", ""),))
    done = threading.Event()
    failures: list[BaseException] = []

    def worker() -> None:  # the store worker: catch-up, reads and the expiry query
        try:
            while not done.is_set():
                store.catch_up(0.005)
                store.read("/queue/a", now_ms=0, after_seq=0, limit=50, max_bytes=10**6)
                store.expired("/queue/", 10, 20)
                store.expired("/topic/", 10, 20)
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=worker)
    thread.start()
    kept: dict[int, str] = {}
    try:
        for i in range(400):
            result = commit(
                store,
                appends=(message(f"q{i}", expires=5 * (i % 5 == 0)), message(f"t{i}", "/topic/t")),
                removals=tuple(("/queue/a", seq) for seq in list(kept)[::3] if i % 4 == 0),
                acknowledgements=((("c", "s"), max(0, i - 10)),),
            )
            kept[result.positions[0]] = f"q{i}"  # type: ignore[index]
            for _, seq in result.removed:
                del kept[seq]
    finally:
        done.set()
        thread.join(30)
    assert not failures, failures
    assert store.count("/queue/a")[0] == len(kept)
    crash(store)
    store = open_store(tmp_path, segment_bytes=8192)
    assert stored_ids(store) == list(kept.values())
    assert stored_ids(store, "/topic/t") == [f"t{i}" for i in range(389, 400)]
    assert len(segments(tmp_path)) == 1
    store.close()


def test_a_log_that_cannot_start_a_segment_is_refused_at_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_space(path: Path, size: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(wal_module, "_create_zeroed", no_space)
    with pytest.raises(StoreOpenError, match="cannot use the write-ahead log .* No space left"):
        open_store(tmp_path)
    monkeypatch.undo()
    store = open_store(tmp_path)  # everything was let go: the folder is not locked
    send(store, message("m"))
    store.close()


def test_a_segment_that_cannot_be_prepared_for_lack_of_space_leaves_nothing(
    tmp_path: Path,
) -> None:
    with small_tmpfs(tmp_path / "disk", 4 * MIB) as disk:
        log = wal_module.WriteAheadLog(disk / "wal", segment_bytes=MIB)
        log.start(1)
        fill_up(disk / "filler")
        with pytest.raises(OSError):
            log.prepare()
        assert [p.name for p in (disk / "wal").iterdir() if p.suffix == ".tmp"] == []
        (disk / "filler").unlink()
        log.prepare()  # tried again: there is room now
        assert (disk / "wal" / "prepared.tmp").stat().st_size == MIB
        log.close()


def test_databases_a_full_disk_keeps_behind_the_log_are_read_as_the_log_has_them(
    tmp_path: Path,
) -> None:
    """Another process fills the disk while the databases lack records (their catch-up
    lagged): reads, the expiry query, an open and a close go on from the log, and the
    databases catch up once there is room."""
    body = b"x" * (64 * 1024)
    with small_tmpfs(tmp_path / "disk", 16 * MIB) as disk:
        store = open_store(disk, segment_bytes=MIB)
        seqs = send(store, *(message(f"m{i}", body=body) for i in range(40)))
        send(store, message("soon", expires=5))
        commit(store, removals=(("/queue/a", seqs[0]),))
        wanted = [f"m{i}" for i in range(1, 40)] + ["soon"]
        reserve = disk / "reserve"  # what the server gives back on a full disk
        reserve.write_bytes(b"\1" * MIB)
        fill_up(disk / "filler")
        reserve.unlink()
        with capture_logs() as logs:
            assert stored_ids(store) == wanted  # its 2.5 MiB cannot be applied in 1 MiB
            assert [m.message_id for _, m in store.expired("/queue/", 10, 10)] == ["soon"]
            store.close()  # (applies what it can: nothing)
            store = open_store(disk, segment_bytes=MIB)
            assert stored_ids(store) == wanted
            assert store.count("/queue/a")[0] == 40
        events = [e["event"] for e in logs]
        assert events.count("wal.apply_postponed") == 2, events  # once per open store
        (disk / "filler").unlink()
        with capture_logs() as logs:
            store.catch_up(60.0)
        assert [e["event"] for e in logs if e["event"].startswith("wal.apply")] == [
            "wal.apply_resumed"
        ]
        store.close()
        with capture_logs() as logs:
            store = open_store(disk, segment_bytes=MIB)
        assert not [e for e in logs if e["event"] == "wal.replayed"]  # nothing left to apply
        assert stored_ids(store) == wanted
        store.close()
