"""The cleanup audit's functions on small hand-made journals."""

from __future__ import annotations

from typing import Any

from tests.spark.conftest import journal_frame, record, snapshot_frame
from wiremq.analytics import cleanup

Q = "/queue/q"
SECOND = 1000
START = 1_000_000  # the server run's start (ms)


def run(run_id: str, store: str, started: int, ended: int, removed: int, **more: Any) -> list:
    return [
        record(
            "cleanup_started",
            started,
            store=store,
            run=run_id,
            interval=more.get("interval", 10 * SECOND),
            transaction_time=more.get("transaction_time", SECOND),
            transaction_size=500,
        ),
        record("cleanup_ended", ended, store=store, run=run_id, scanned=removed, removed=removed),
    ]


def message(message_id: str, expires: int, destination: str = Q) -> dict[str, Any]:
    return {"message_id": message_id, "destination": destination, "size": 1, "expires": expires}


def removal(message_id: str, at: int, run_id: str, expires: int, store: str = "persqueue"):
    return [
        record("expired", at, **message(message_id, expires), store=store, run=run_id),
        record("removed", at, **message(message_id, expires), store=store, run=run_id),
    ]


def audit_of(spark: Any, records: list, stored: list | None = None, tolerance: int = 100):
    records = [
        record("server_started", START, server="s"),
        *records,
        record("server_stopped", START + 100 * SECOND, server="s"),
    ]
    relevant = cleanup.relevant(journal_frame(spark, records))
    origins = cleanup.origins(relevant)
    sessions = cleanup.sessions(relevant)
    runs = cleanup.runs(relevant)
    removals = cleanup.removals(relevant, origins)
    snapshot = snapshot_frame(spark, stored) if stored is not None else None
    outlived = cleanup.outlived(
        cleanup.expiries(relevant, origins),
        cleanup.still_there(relevant, origins, snapshot, sessions),
        runs,
        sessions,
        tolerance,
    )
    return runs, removals, outlived, sessions


def ids(frame: Any) -> list[str]:
    return sorted(r["message_id"] for r in frame.collect())


def test_a_removal_before_the_expiry_it_was_received_with_is_premature(spark):
    late = START + 60 * SECOND
    records = [
        record("received", START, **message("due", START + 5 * SECOND)),
        record("received", START, **message("early", late)),
        record("received", START, **message("never", 0)),
        *run("r1", "persqueue", START + 10 * SECOND, START + 10 * SECOND + 50, 3),
        *removal("due", START + 10 * SECOND, "r1", START + 5 * SECOND),
        *removal("early", START + 10 * SECOND, "r1", START + 5 * SECOND),  # it says it was due
        *removal("never", START + 10 * SECOND, "r1", START + 5 * SECOND),
    ]
    _, removals, _, _ = audit_of(spark, records)
    premature = cleanup.premature(removals)
    assert ids(premature) == ["early", "never"]
    assert {r["expires"] for r in premature.collect()} == {late, 0}


def test_an_expired_message_may_wait_an_interval_and_the_runs_around_its_removal(spark):
    interval = 10 * SECOND
    e = START + 20 * SECOND
    records = [
        *run("r1", "persqueue", START + 10 * SECOND, START + 10 * SECOND + 200, 0),
        *run("r2", "persqueue", START + 20 * SECOND + 200, START + 20 * SECOND + 700, 1),
        *run("r3", "persqueue", START + 40 * SECOND, START + 40 * SECOND + 100, 1),
        record("received", START, **message("in-time", e)),
        record("received", START, **message("late", e)),
        # r2 found it after the interval and both runs' lengths: allowed
        *removal("in-time", e + interval + 600, "r2", e),
        # r3 removed one that expired a whole interval before r2 began: outlived
        *removal("late", START + 40 * SECOND + 50, "r3", e),
    ]
    _, _, outlived, _ = audit_of(spark, records)
    rows = outlived.collect()
    assert [r["message_id"] for r in rows] == ["late"]
    assert rows[0]["lag_ms"] == 20 * SECOND + 50
    assert rows[0]["bound_ms"] == interval + 100 + 500


def test_a_message_that_expired_while_the_server_was_down_counts_from_its_start(spark):
    records = [
        record("received", 1, **message("old", 2)),  # expired long before the start
        *run("r1", "persqueue", START + 10 * SECOND, START + 10 * SECOND + 10, 1),
        *removal("old", START + 10 * SECOND + 5, "r1", 2),
    ]
    _, _, outlived, _ = audit_of(spark, records)
    assert ids(outlived) == []


def test_expired_messages_left_at_the_stop_have_outlived_the_cleanup(spark):
    stop = START + 100 * SECOND
    records = [
        *run("r1", "persqueue", START + 10 * SECOND, START + 10 * SECOND + 100, 0),
        *run("v1", "volqueue", START + 10 * SECOND, START + 10 * SECOND + 1, 0),
        record("received", START, **message("stored-long", START + 5 * SECOND)),
        record("received", START, **message("stored-recent", stop - SECOND)),
        record("received", START, **message("dropped-long", START + 5 * SECOND)),
        record("discarded", stop, **message("dropped-long", 0), reason="server-stopped"),
    ]
    stored = [
        {
            "message_id": "stored-long",
            "destination": Q,
            "store": "persqueue",
            "expires": START + 5 * SECOND,
        },
        {
            "message_id": "stored-recent",
            "destination": Q,
            "store": "persqueue",
            "expires": stop - SECOND,
        },
        {"message_id": "forever", "destination": Q, "store": "persqueue", "expires": 0},
    ]
    _, _, outlived, _ = audit_of(spark, records, stored)
    assert ids(outlived) == ["dropped-long", "stored-long"]


def test_runs_their_lengths_overruns_and_counts_that_disagree(spark):
    records = [
        *run("r1", "persqueue", START, START + 300, 1, transaction_time=1000),
        *run("r2", "persqueue", START + 10 * SECOND, START + 12 * SECOND, 2),
        *run("v1", "volqueue", START, START + 5, 0, transaction_time=None),
        *removal("a", START + 100, "r1", START),
        *removal("b", START + 11 * SECOND, "r2", START),
    ]
    runs, removals, _, _ = audit_of(spark, records)
    by_run = {r["run"]: r for r in cleanup.removals_per_run(runs, removals).collect()}
    assert by_run["r1"]["duration_ms"] == 300 and by_run["r1"]["agrees"]
    assert by_run["r2"]["previous_duration_ms"] == 300
    assert (by_run["r2"]["removed_reported"], by_run["r2"]["removals_recorded"]) == (2, 1)
    assert not by_run["r2"]["agrees"]
    assert [r["run"] for r in cleanup.overran(runs).collect()] == ["r2"]


def test_cleanup_lag_per_store_and_destination(spark):
    records = [
        *run("r1", "persqueue", START, START + 10, 10),
        *(removal(f"m{i}", START + 100 * i, "r1", START) for i in range(1, 11)),
    ]
    records = [r for group in records for r in (group if isinstance(group, list) else [group])]
    _, removals, _, sessions = audit_of(spark, records)
    lags = cleanup.lags(removals, sessions)
    (row,) = cleanup.lag_percentiles(lags).collect()
    assert (row["store"], row["destination"], row["removals"]) == ("persqueue", Q, 10)
    assert (row["p50_ms"], row["p90_ms"], row["max_ms"]) == (500, 900, 1000)
    histogram = {r["from_ms"]: r["removals"] for r in cleanup.lag_histogram(lags).collect()}
    assert histogram == {64: 1, 128: 1, 256: 3, 512: 5}
