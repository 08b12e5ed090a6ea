"""The cleanup audit: every removal by a cleanup run was due, and nothing expired stayed.

Per store (persqueue, topics, volqueue) and destination:

- **premature removals**: messages a cleanup run removed that had not expired
  when it removed them (their expiry as received, else as the removal says);
  there must be none.
- **outlived**: expired messages that stayed longer than a cleanup could
  take to find them: the store's ``cleanupinterval`` plus the length of the
  run that removed them and of the run before it (the one that just missed
  them), plus a tolerance for timer lateness; counted from their expiry, or
  from the server's start for messages that expired while it was down. Those
  never removed count up to the server's stop: still in the snapshot, or
  non-persistent ones dropped at shutdown. An expiry found some other way (on
  delivery, on a read) is judged by the store's longest runs.
- **cleanup lag**: how long after expiring removed messages were removed, as
  percentiles per store and destination;
- **removals per run**, and runs whose own count disagrees with the removals
  the journal records for them;
- **runs that overran** ``cleanuptransactiontime``.

Functions from DataFrames to DataFrames; the audit needs a small part of the
journal, which it takes first (``relevant``).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from wiremq.modules.journal.schema import SERVER_STOPPED, VOLQUEUE

KEY = ["message_id", "destination"]
RELEVANT_EVENTS = (
    "server_started",
    "server_stopped",
    "cleanup_started",
    "cleanup_ended",
    "expired",
    "removed",
)
PERCENTILES = (0.5, 0.9, 0.99)


def relevant(journal: DataFrame) -> DataFrame:
    """The records this audit reads: server runs, cleanup runs, expiries and removals,
    what every message was received with (a removal of one that never expires is the
    worst kind), and non-persistent messages dropped at a shutdown."""
    event = F.col("event")
    return journal.where(
        event.isin("received", *RELEVANT_EVENTS)
        | ((event == "discarded") & (F.col("reason") == SERVER_STOPPED))
    ).select(
        "event",
        "ts",
        "message_id",
        "destination",
        "size",
        "expires",
        "store",
        "run",
        "interval",
        "transaction_time",
        "transaction_size",
        "scanned",
        "removed",
        "server",
        "reason",
    )


def sessions(records: DataFrame) -> DataFrame:
    """Each server run: when it started, when it stopped cleanly (null after a crash), and
    until when it counts (its stop, else the next run's start)."""
    event = F.col("event")
    runs = (
        records.where(event.isin("server_started", "server_stopped"))
        .groupBy("server")
        .agg(
            F.min(F.when(event == "server_started", F.col("ts"))).alias("started_ts"),
            F.max(F.when(event == "server_stopped", F.col("ts"))).alias("stopped_ts"),
        )
        .where(F.col("started_ts").isNotNull())
    )
    following = Window.orderBy("started_ts")  # a handful of rows: one partition is right
    return runs.withColumn(
        "until_ts", F.coalesce(F.col("stopped_ts"), F.lead("started_ts").over(following))
    )


def runs(records: DataFrame) -> DataFrame:
    """Every cleanup run: its store, parameters, start, end, length, the length of the
    store's run before it, what it examined and what it says it removed."""
    started = records.where(F.col("event") == "cleanup_started").select(
        "run",
        "store",
        F.col("ts").alias("started_ts"),
        "interval",
        "transaction_time",
        "transaction_size",
    )
    ended = records.where(F.col("event") == "cleanup_ended").select(
        "run",
        F.col("ts").alias("ended_ts"),
        "scanned",
        F.col("removed").alias("removed_reported"),
    )
    joined = started.join(ended, "run", "left").withColumn(
        "duration_ms", F.col("ended_ts") - F.col("started_ts")
    )
    before = Window.partitionBy("store").orderBy("started_ts", "run")
    return joined.withColumn(
        "previous_duration_ms", F.coalesce(F.lag("duration_ms").over(before), F.lit(0))
    )


def origins(records: DataFrame) -> DataFrame:
    """The expiry each message with one was received with."""
    return (
        records.where(F.col("event") == "received")
        .groupBy(*KEY)
        .agg(F.max("expires").alias("origin_expires"))
    )


def removals(records: DataFrame, origins: DataFrame) -> DataFrame:
    """Every removal by a cleanup run, with the message's expiry (as received)."""
    removed = records.where(F.col("event") == "removed").select(
        *KEY, "store", "run", "ts", F.col("expires").alias("record_expires"), "size"
    )
    return removed.join(origins, KEY, "left").withColumn(
        "expires", F.coalesce(F.col("origin_expires"), F.col("record_expires"))
    )


def premature(removals: DataFrame) -> DataFrame:
    """Removals of messages that had not expired when they were removed."""
    expires = F.col("expires")
    return removals.where(expires.isNull() | (expires == 0) | (expires > F.col("ts"))).select(
        *KEY, "store", "run", F.col("ts").alias("removed_ts"), "expires"
    )


def _since(expires: Column, started: Column) -> Column:
    """From when a message's stay is counted: its expiry, or the server's start."""
    return F.greatest(expires, F.coalesce(started, expires))


def _in_session(frame: DataFrame, sessions: DataFrame, ts: str) -> DataFrame:
    """``frame`` with the start of the server run its ``ts`` falls in."""
    run = sessions.select("started_ts", "until_ts")
    within = (F.col(ts) >= F.col("started_ts")) & (
        F.col("until_ts").isNull() | (F.col(ts) <= F.col("until_ts"))
    )
    return frame.join(F.broadcast(run), within, "left")


def store_bounds(runs: DataFrame) -> DataFrame:
    """Per store: its cleanup interval and its longest run."""
    return runs.groupBy("store").agg(
        F.max("interval").alias("store_interval"),
        F.max("duration_ms").alias("longest_ms"),
    )


def expiries(records: DataFrame, origins: DataFrame) -> DataFrame:
    """Every expiry in a store, with the expiry the message was received with."""
    expired = records.where((F.col("event") == "expired") & F.col("store").isNotNull()).select(
        *KEY, "store", "run", "ts", F.col("expires").alias("record_expires")
    )
    return expired.join(origins, KEY, "left").withColumn(
        "expires", F.coalesce(F.col("origin_expires"), F.col("record_expires"))
    )


def outlived(
    expiries: DataFrame,
    still_there: DataFrame,
    runs: DataFrame,
    sessions: DataFrame,
    tolerance_ms: int,
) -> DataFrame:
    """Expired messages that stayed longer than their store's cleanup allows.

    ``expiries``: as ``expiries`` returns; ``still_there``: (message_id, destination,
    store, expires, end_ts) of expired messages never removed, ``end_ts`` the last moment
    the server held them."""
    timed = runs.select("run", "interval", "duration_ms", "previous_duration_ms")
    bounds = F.broadcast(store_bounds(runs))
    removed = (
        _in_session(expiries, sessions, "ts")
        .join(timed, "run", "left")
        .join(bounds, "store", "left")
        .select(
            *KEY,
            "store",
            "run",
            "expires",
            F.col("ts").alias("gone_ts"),
            (F.col("ts") - _since(F.col("expires"), F.col("started_ts"))).alias("lag_ms"),
            (
                F.coalesce(F.col("interval"), F.col("store_interval"))
                + F.coalesce(
                    F.col("duration_ms") + F.col("previous_duration_ms"), 2 * F.col("longest_ms")
                )
            ).alias("bound_ms"),
        )
    )
    stayed = (
        _in_session(still_there, sessions, "end_ts")
        .join(bounds, "store", "left")
        .where(F.col("expires") < F.col("end_ts"))
        .select(
            *KEY,
            "store",
            F.lit(None).cast("string").alias("run"),
            "expires",
            F.lit(None).cast("long").alias("gone_ts"),
            (F.col("end_ts") - _since(F.col("expires"), F.col("started_ts"))).alias("lag_ms"),
            (F.col("store_interval") + 2 * F.col("longest_ms")).alias("bound_ms"),
        )
    )
    return (
        removed.unionByName(stayed)
        .where((F.col("expires") > 0) & (F.col("lag_ms") > F.col("bound_ms") + tolerance_ms))
        .orderBy("expires", *KEY)
    )


def still_there(
    records: DataFrame, origins: DataFrame, snapshot: DataFrame | None, sessions: DataFrame
) -> DataFrame:
    """Messages with an expiry the server still held when it stopped: those in the
    snapshot (as of the last clean stop) and non-persistent ones dropped at a shutdown."""
    dropped = (
        records.where(F.col("event") == "discarded")
        .join(origins, KEY)
        .select(
            *KEY,
            F.lit(VOLQUEUE).alias("store"),
            F.col("origin_expires").alias("expires"),
            F.col("ts").alias("end_ts"),
        )
    )
    if snapshot is None:
        return dropped
    last_stop = sessions.agg(F.max("stopped_ts").alias("end_ts"))
    stored = (
        snapshot.where(F.col("expires") > 0)
        .crossJoin(F.broadcast(last_stop))
        .select(*KEY, "store", "expires", "end_ts")
        .where(F.col("end_ts").isNotNull())
    )
    return dropped.unionByName(stored)


def lags(removals: DataFrame, sessions: DataFrame) -> DataFrame:
    """Each removal by a cleanup run that was due, with its lag after the expiry."""
    return (
        _in_session(removals.where(F.col("expires") > 0), sessions, "ts")
        .where(F.col("expires") <= F.col("ts"))
        .select(
            *KEY,
            "store",
            "run",
            (F.col("ts") - _since(F.col("expires"), F.col("started_ts"))).alias("lag_ms"),
        )
    )


def lag_percentiles(lags: DataFrame) -> DataFrame:
    """Cleanup lag per store and destination: removals, percentiles, the longest."""
    return (
        lags.groupBy("store", "destination")
        .agg(
            F.count(F.lit(1)).alias("removals"),
            F.percentile_approx("lag_ms", list(PERCENTILES), 1000).alias("p"),
            F.max("lag_ms").alias("max_ms"),
        )
        .select(
            "store",
            "destination",
            "removals",
            *(F.col("p")[i].alias(f"p{round(q * 100)}_ms") for i, q in enumerate(PERCENTILES)),
            "max_ms",
        )
        .orderBy("store", "destination")
    )


def lag_histogram(lags: DataFrame) -> DataFrame:
    """Removals per store by lag, in bins doubling in width (ms: 0, 1, 2-3, 4-7, ...)."""
    bin_floor = F.when(F.col("lag_ms") <= 0, F.lit(0)).otherwise(
        F.pow(F.lit(2), F.floor(F.log2(F.col("lag_ms")))).cast("long")
    )
    return (
        lags.groupBy("store", bin_floor.alias("from_ms"))
        .agg(F.count(F.lit(1)).alias("removals"))
        .orderBy("store", "from_ms")
    )


def removals_per_run(runs: DataFrame, removals: DataFrame) -> DataFrame:
    """Each run with the removals the journal records for it, and whether its own count
    agrees."""
    counted = removals.groupBy("run").agg(F.count(F.lit(1)).alias("removals_recorded"))
    return (
        runs.join(counted, "run", "left")
        .fillna(0, ["removals_recorded"])
        .withColumn(
            "agrees",
            F.col("removed_reported").isNull()
            | (F.col("removed_reported") == F.col("removals_recorded")),
        )
        .orderBy("started_ts", "run")
    )


def overran(runs: DataFrame) -> DataFrame:
    """Runs that lasted longer than their store's cleanuptransactiontime."""
    return runs.where(
        F.col("transaction_time").isNotNull() & (F.col("duration_ms") > F.col("transaction_time"))
    ).orderBy("started_ts", "run")
