"""The conservation audit: every message received has one fate, and nothing else happened.

A message is a (message id, destination): a dead message queue's copy of an
expired message keeps its id and is received there as a message of its own.
Its fate is what ended its stay: acknowledged, expired (discarded), moved to
the dead message queue, moved elsewhere by an operator (its copy received
there), discarded (with the reason), refused, or still stored
(it is in the snapshot ``wiremq export`` took). A queue message must have
exactly one; a topic message ends with each of its subscribers (acknowledged,
dropped for a subscriber, ...) unless it expired, was dead-lettered, refused,
discarded as a whole (no subscribers) or is still stored for a durable
subscriber.

Every delivery must be settled: acknowledged, NACKed, given back (requeued) or
dropped for its subscriber (an auto-mode ``consumed`` record is a delivery and
its acknowledgement at once); an acknowledgement undone by a failed transaction
gives the message back and settles nothing more. A message is unexplained when
it has no fate, fates that cannot go together, a delivery never settled, a
settlement without a delivery, or no ``received`` record; each such message is
named with its problems.

The journal may come from several server runs and several folders (the nodes of
an HA pair): a message is followed across them by its id, and each record knows
the run that wrote it (``journal.SERVER_RUN``). A run that began and never
stopped cleanly ended abruptly (killed, crashed, or an HA node stepping down),
and took with it what it held that no store held: a delivery it had not
settled is settled by its end; an acknowledgement it took whose message was
delivered again on a later run never reached the store (its removal was not
committed); and a message whose every record is on such runs, never stored,
with no other fate, is ``lost`` with it (a non-persistent message, or one
whose commit, hence whose RECEIPT, never came). A stored message with no fate
is still unexplained: in HA mode every change a store holds was journaled
before it got there (``server/ha.py``).

Everything here is a function from DataFrames to DataFrames: the journal is
grouped by message in one shuffle (the snapshot joins the same stream as
pseudo-events), and nothing but the summary and the unexplained messages ever
reaches the driver.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from .journal import SERVER_RUN

KEY = ["message_id", "destination"]
SUBSCRIPTION_KEY = [*KEY, "session", "subscription"]
IN_SNAPSHOT = "in_snapshot"  # the pseudo-event a snapshot row becomes
DELIVERIES = ("delivered", "redelivered", "consumed")
ACKNOWLEDGEMENTS = ("acknowledged", "consumed")  # consumed: auto mode's delivered and acked

# The fates, in the order a message's is decided (a queue message may have only one).
FATES = (
    "refused",
    "still_stored",
    "dead_lettered",
    "moved",
    "expired",
    "acknowledged",
    "discarded",
    "lost",
)
UNEXPLAINED = "unexplained"
ENDED_WITH_ITS_SERVER = "ended-with-its-server"  # the reason of a message ``lost``

_EVENT_COLUMNS = [
    "message_id",
    "destination",
    "event",
    "ts",
    "size",
    "persistent",
    "expires",
    "session",
    "subscription",
    "requeue",
    "reason",
    SERVER_RUN,
]


_NULLS = (  # the columns a snapshot row has no value for
    ("session", "string"),
    ("subscription", "string"),
    ("requeue", "boolean"),
    ("reason", "string"),
    (SERVER_RUN, "string"),
)


def _count(condition: Column) -> Column:
    return F.sum(F.when(condition, 1).otherwise(0))


def abrupt_runs(journal: DataFrame) -> DataFrame:
    """The server runs that began and never stopped cleanly (``server_run``, ``abrupt``)."""
    event = F.col("event")
    return (
        journal.where(event.isin("server_started", "server_stopped") & (F.col(SERVER_RUN) != ""))
        .groupBy(SERVER_RUN)
        .agg(_count(event == "server_stopped").alias("stops"))
        .where(F.col("stops") == 0)
        .select(SERVER_RUN, F.lit(True).alias("abrupt"))
    )


def message_events(journal: DataFrame, snapshot: DataFrame | None) -> DataFrame:
    """The journal's message records, each saying whether its run ended abruptly, and each
    message of the snapshot as an ``in_snapshot`` record, in the columns the audit reads."""
    events = (
        journal.where(F.col("message_id").isNotNull())
        .select(*_EVENT_COLUMNS)
        .join(F.broadcast(abrupt_runs(journal)), SERVER_RUN, "left")
        .fillna(False, ["abrupt"])
    )
    if snapshot is None:
        return events
    stored = snapshot.select(
        "message_id",
        "destination",
        F.lit(IN_SNAPSHOT).alias("event"),
        F.lit(None).cast("long").alias("ts"),
        F.col("size"),
        F.lit(True).alias("persistent"),
        F.col("expires"),
        *(F.lit(None).cast(t).alias(c) for c, t in _NULLS),
        F.lit(False).alias("abrupt"),
    )
    return events.unionByName(stored)


def deliveries(events: DataFrame) -> DataFrame:
    """Per message and subscription: its deliveries, what settled them, and the problem
    (null when none)."""
    event = F.col("event")
    grouped = (
        events.where(F.col("session").isNotNull())
        .groupBy(*SUBSCRIPTION_KEY)
        .agg(
            _count(event.isin(*DELIVERIES)).alias("delivered"),
            _count(event.isin(*ACKNOWLEDGEMENTS)).alias("acknowledged"),
            _count((event == "nacked") & F.col("requeue")).alias("nacked_requeue"),
            _count((event == "nacked") & ~F.col("requeue")).alias("nacked_drop"),
            _count(event == "requeued").alias("requeued"),
            _count(event == "unacknowledged").alias("unacknowledged"),
            _count(event == "discarded").alias("discarded"),
            F.max(F.when(event == "discarded", F.col("reason"))).alias("discard_reason"),
            # A session lives in one process: all its records are of one run.
            F.max(SERVER_RUN).alias(SERVER_RUN),
            F.max("abrupt").alias("abrupt"),
            F.max(F.when(event.isin(*DELIVERIES), F.col("ts"))).alias("last_delivery_ts"),
        )
    )
    settled = (
        F.col("acknowledged")
        + F.col("nacked_requeue")
        + F.col("nacked_drop")
        + F.col("requeued")
        + F.col("discarded")
    )
    who = F.concat(F.col("session"), F.lit("/"), F.col("subscription"))
    answered = (
        F.col("acknowledged")
        + F.col("nacked_requeue")
        + F.col("nacked_drop")
        + F.col("requeued")
        + F.col("unacknowledged")
    )
    problem = (
        F.when(
            (F.col("delivered") == 0) & (answered > 0),
            F.concat(F.lit("acknowledged without a delivery to "), who),
        )
        .when(
            (F.col("delivered") > 0) & (settled < F.col("delivered")) & ~F.col("abrupt"),
            F.concat(F.lit("delivery to "), who, F.lit(" never settled")),
        )
        .when(
            (F.col("delivered") > 0) & (settled > F.col("delivered")),
            F.concat(F.lit("settled more often than delivered to "), who),
        )
    )
    return grouped.withColumn("problem", problem)


def messages(events: DataFrame) -> DataFrame:
    """Per message: how often each event happened to it (message-level events only, not
    those of one subscriber), and what it was."""
    event = F.col("event")
    whole = F.col("session").isNull()
    return events.groupBy(*KEY).agg(
        _count(event == "received").alias("received"),
        F.max(F.when(event == "received", F.col("expires"))).alias("expires"),
        F.max(F.col("persistent")).alias("persistent"),
        F.max(F.col("size")).alias("size"),
        F.min(F.col("ts")).alias("first_ts"),
        F.max(F.col("ts")).alias("last_ts"),
        _count(event == "stored").alias("stored"),
        _count(event == "expired").alias("expired"),
        _count(event == "dead_lettered").alias("dead_lettered"),
        _count(event == "moved").alias("moved"),
        _count(event == "removed").alias("removed"),
        _count((event == "discarded") & whole).alias("discarded"),
        F.max(F.when((event == "discarded") & whole, F.col("reason"))).alias("discard_reason"),
        _count(event == "refused").alias("refused"),
        F.max(F.when(event == "refused", F.col("reason"))).alias("refusal"),
        _count(event == IN_SNAPSHOT).alias(IN_SNAPSHOT),
        F.min(F.col("abrupt").cast("int")).alias("only_on_ended_runs"),
    )


def per_message(deliveries: DataFrame) -> DataFrame:
    """The deliveries of each message, summed over its subscriptions. An acknowledgement
    taken on a run that ended abruptly, of a message delivered again on a later run, does
    not count: its removal never reached the store."""
    last_run = F.max_by(SERVER_RUN, "last_delivery_ts").over(Window.partitionBy(*KEY))
    void = F.col("abrupt") & F.coalesce(F.col(SERVER_RUN) != F.col("last_run"), F.lit(False))
    counted = F.when(void, 0).otherwise(F.col("acknowledged") - F.col("unacknowledged"))
    return (
        deliveries.withColumn("last_run", last_run)
        .groupBy(*KEY)
        .agg(
            F.sum("delivered").alias("deliveries"),
            F.sum(counted).alias("acknowledgements"),
            F.sum("nacked_drop").alias("nack_drops"),
            F.sum("discarded").alias("subscriber_discards"),
            F.max("discard_reason").alias("subscriber_discard_reason"),
            F.collect_list("problem").alias("delivery_problems"),  # the nulls left out
        )
    )


def verdicts(messages: DataFrame, delivered: DataFrame) -> DataFrame:
    """Each message with its fate (or ``unexplained``), the reason where one applies, and
    its problems (empty when explained)."""
    joined = messages.join(delivered, KEY, "left").fillna(
        0, ["deliveries", "acknowledgements", "nack_drops", "subscriber_discards"]
    )
    c = F.col
    topic = c("destination").startswith("/topic/")
    refused = c("refused") > 0
    stored = c(IN_SNAPSHOT) > 0
    dead = c("dead_lettered") > 0
    moved = c("moved") > 0
    expired = (c("expired") > 0) & ~dead
    acknowledged = c("acknowledgements") > 0
    discarded = c("discarded") > 0
    nack_dropped = c("nack_drops") > 0
    dropped_for_each = (c("subscriber_discards") > 0) | nack_dropped
    queue_fates = [
        (refused, "refused"),
        (stored, "still stored"),
        (dead, "dead-lettered"),
        (moved, "moved"),
        (expired, "expired"),
        (discarded, "discarded"),
        (acknowledged, "acknowledged"),
        # a NACK without requeue moves the message to the dead message queue (dropped there)
        (nack_dropped & ~dead & ~discarded, "NACKed without requeue"),
    ]
    names = F.filter(
        F.array(*(F.when(flag, F.lit(name)) for flag, name in queue_fates)),
        lambda n: n.isNotNull(),
    )
    ended = refused | stored | dead | moved | expired | discarded
    any_topic_end = ended | acknowledged | dropped_for_each
    no_fate = ~topic & (F.size(names) == 0) | topic & ~any_topic_end
    # Every record on runs that ended abruptly, never stored: gone with its server.
    lost = no_fate & (c("only_on_ended_runs") == 1) & (c("stored") == 0)
    problem_list = [
        F.when(c("received") == 0, F.lit("no received record")),
        F.when(c("received") > 1, F.lit("received more than once")),
        F.when(no_fate & ~lost, F.lit("no fate")),
        F.when(
            ~topic & (F.size(names) > 1),
            F.concat(F.lit("fates that cannot go together: "), F.array_join(names, ", ")),
        ),
        F.when(
            topic & refused & (stored | (c("deliveries") > 0)),
            F.lit("refused, yet stored or delivered"),
        ),
        F.when(
            topic & stored & (dead | expired),
            F.lit("fates that cannot go together: expired, still stored"),
        ),
        F.when(~topic & (c("acknowledgements") > 1), F.lit("acknowledged more than once")),
        F.when(c("expired") > 1, F.lit("expired more than once")),
        F.when(c("dead_lettered") > 1, F.lit("dead-lettered more than once")),
        F.when(c("moved") > 1, F.lit("moved more than once")),
        F.when(
            (c("removed") > 0) & (c("expired") == 0),
            F.lit("removed by a cleanup run, yet never expired"),
        ),
        F.when((c("removed") > 0) & stored, F.lit("removed by a cleanup run, yet still stored")),
    ]
    problems = F.concat(
        F.filter(F.array(*problem_list), lambda p: p.isNotNull()),
        F.coalesce(c("delivery_problems"), F.array().cast("array<string>")),
    )
    fate = (
        F.when(F.size(problems) > 0, F.lit(UNEXPLAINED))
        .when(refused, F.lit("refused"))
        .when(stored, F.lit("still_stored"))
        .when(topic & acknowledged, F.lit("acknowledged"))
        .when(dead, F.lit("dead_lettered"))
        .when(moved, F.lit("moved"))
        .when(expired, F.lit("expired"))
        .when(acknowledged, F.lit("acknowledged"))
        .when(lost, F.lit("lost"))
        .otherwise(F.lit("discarded"))
    )
    reason = (
        F.when(fate == "refused", c("refusal"))
        .when(fate == "lost", F.lit(ENDED_WITH_ITS_SERVER))
        .when(fate != "discarded", F.lit(None))
        .when(discarded, c("discard_reason"))
        .when(c("subscriber_discards") > 0, c("subscriber_discard_reason"))
        .otherwise(F.lit("nacked"))
    )
    return joined.select(
        *KEY,
        "persistent",
        "size",
        "expires",
        "first_ts",
        "last_ts",
        "received",
        "deliveries",
        "acknowledgements",
        fate.alias("fate"),
        reason.alias("reason"),
        problems.alias("problems"),
    )


def audit(journal: DataFrame, snapshot: DataFrame | None, partitions: int) -> DataFrame:
    """Every message's verdict: the journal (and snapshot) grouped by message once."""
    events = message_events(journal, snapshot).repartition(partitions, *KEY)
    return verdicts(messages(events), per_message(deliveries(events)))


def summary(verdicts: DataFrame) -> DataFrame:
    """One row: messages, received, each fate's count, unexplained."""
    fate = F.col("fate")
    return verdicts.agg(
        F.count(F.lit(1)).alias("messages"),
        _count(F.col("received") > 0).alias("received"),
        *(_count(fate == name).alias(name) for name in FATES),
        _count(fate == UNEXPLAINED).alias(UNEXPLAINED),
    )


def by_destination(verdicts: DataFrame) -> DataFrame:
    """Fates per destination: one row per destination, a column per fate."""
    fate = F.col("fate")
    return (
        verdicts.groupBy("destination")
        .agg(
            F.count(F.lit(1)).alias("messages"),
            *(_count(fate == name).alias(name) for name in (*FATES, UNEXPLAINED)),
        )
        .orderBy(F.desc("messages"), "destination")
    )


def unexplained(verdicts: DataFrame) -> DataFrame:
    """The unexplained messages with their problems, in the order they began."""
    return (
        verdicts.where(F.col("fate") == UNEXPLAINED)
        .select(*KEY, "first_ts", "last_ts", F.array_join("problems", "; ").alias("problems"))
        .orderBy("first_ts", *KEY)
    )
