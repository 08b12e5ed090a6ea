"""Reading the audit journal and the store snapshot into DataFrames.

The journal's types come from the one schema the server writes by
(``wiremq.modules.journal.schema``); a line that is not a JSON object of that
schema is kept as unreadable (``_corrupt_record``), counted, and fails an
audit: a damaged journal proves nothing. The snapshot's columns are the ones
``wiremq export`` writes (``SNAPSHOT_COLUMNS``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F
from pyspark.sql import types as T

from wiremq.modules.journal.schema import BOOLEAN, FIELDS, LONG, SCHEMA_VERSION, STRING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

CORRUPT = "_corrupt_record"
# The server run that wrote a record, from its file's name (<time>-<run>-<n>.jsonl): which
# run a delivery or an acknowledgement happened on, across the nodes of an HA pair.
SERVER_RUN = "server_run"
_FILE_RUN = r"-([0-9a-f]{8})-[0-9]+\.jsonl$"
_SPARK_TYPES = {STRING: T.StringType(), LONG: T.LongType(), BOOLEAN: T.BooleanType()}

# What ``wiremq export`` writes for every stored message (analytics/export.py).
SNAPSHOT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("message_id", STRING),
    ("destination", STRING),
    ("store", STRING),
    ("seq", LONG),
    ("expires", LONG),
    ("size", LONG),
    ("stored_size", LONG),
    ("priority", LONG),
    ("timestamp", LONG),
)


def journal_schema() -> T.StructType:
    """The journal's record as Spark reads it: every field of the schema, nullable, and the
    server run that wrote it (``SERVER_RUN``)."""
    return T.StructType(
        [T.StructField(f.name, _SPARK_TYPES[f.type], True) for f in FIELDS]
        + [
            T.StructField(SERVER_RUN, T.StringType(), True),
            T.StructField(CORRUPT, T.StringType(), True),
        ]
    )


def snapshot_schema() -> T.StructType:
    return T.StructType(
        [T.StructField(name, _SPARK_TYPES[kind], True) for name, kind in SNAPSHOT_COLUMNS]
    )


def read_journal(spark: SparkSession, paths: list[str]) -> DataFrame:
    """Every record of the journal files at ``paths`` (folders, files, globs, any URL Spark
    reads: the journals of every node of an HA pair, say), with the server run that wrote
    it; unreadable lines have only ``_corrupt_record`` (and the run)."""
    return (
        spark.read.schema(journal_schema())
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .option("recursiveFileLookup", "true")
        .option("pathGlobFilter", "*.jsonl")
        .json(paths)
        .withColumn(SERVER_RUN, F.regexp_extract(F.input_file_name(), _FILE_RUN, 1))
    )


def read_snapshot(spark: SparkSession, path: str) -> DataFrame:
    return spark.read.schema(snapshot_schema()).parquet(path)


def checks(journal: DataFrame) -> DataFrame:
    """One row: records, unreadable lines, records of a newer schema, first and last ts."""
    return journal.agg(
        F.count(F.lit(1)).alias("records"),
        F.count(F.col(CORRUPT)).alias("unreadable"),
        F.count(F.when(F.col("v") > SCHEMA_VERSION, True)).alias("newer_schema"),
        F.min("ts").alias("first_ts"),
        F.max("ts").alias("last_ts"),
    )


def readable(journal: DataFrame) -> DataFrame:
    """The records that parsed (the unreadable ones are counted by ``checks``)."""
    return journal.where(F.col(CORRUPT).isNull()).drop(CORRUPT)
