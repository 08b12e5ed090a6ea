"""An audit's tables: each written as Parquet and as CSV, by Spark.

Written by Spark, so that on a cluster they go wherever its workers can write
(a local folder, HDFS, S3...): each table is a folder ``NAME.parquet`` and a
folder ``NAME.csv`` holding one CSV file with a header.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T


def csv_ready(frame: DataFrame) -> DataFrame:
    """The frame with array columns joined into text (CSV has no arrays)."""
    return frame.select(
        *(
            F.array_join(F.col(c.name), "; ").alias(c.name)
            if isinstance(c.dataType, T.ArrayType)
            else F.col(c.name)
            for c in frame.schema.fields
        )
    )


class Tables:
    """Writes an audit's tables under ``folder`` (a path or URL Spark writes to)."""

    def __init__(self, folder: str) -> None:
        self.folder = folder.rstrip("/")
        self.written: list[str] = []

    def path(self, name: str, kind: str) -> str:
        return f"{self.folder}/{name}.{kind}"

    def write(self, name: str, frame: DataFrame, csv: bool = True) -> DataFrame:
        """Write ``frame`` as Parquet, then (unless ``csv`` is false: the journal itself,
        say) as CSV from the Parquet just written, so that the work behind it runs once;
        returns the Parquet table."""
        parquet = self.path(name, "parquet")
        frame.write.mode("overwrite").parquet(parquet)
        table = frame.sparkSession.read.parquet(parquet)
        if csv:
            csv_ready(table).coalesce(1).write.mode("overwrite").option("header", "true").csv(
                self.path(name, "csv")
            )
        self.written.append(name)
        return table
