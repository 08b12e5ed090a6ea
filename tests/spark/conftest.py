"""One SparkSession (local[2]) for the whole test run, and journals built by hand."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from wiremq.analytics.journal import journal_schema, snapshot_schema
from wiremq.analytics.spark import JavaMissing, start_session


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The run's one SparkSession; the Spark tests fail with a clear message without Java."""
    try:
        session = start_session("local[2]", "wiremq tests", "1g")
    except JavaMissing as missing:
        pytest.fail(str(missing))
    session.conf.set("spark.sql.shuffle.partitions", "4")
    yield session
    session.stop()


def record(event: str, ts: int | None = None, **fields: Any) -> dict[str, Any]:
    return {"v": 1, "event": event, "ts": ts, **fields}


def journal_frame(spark: Any, records: list[dict[str, Any]]) -> Any:
    """A journal DataFrame of these records, typed as the audits read the journal."""
    schema = journal_schema()
    unknown = {k for r in records for k in r} - set(schema.fieldNames())
    assert not unknown, f"not in the schema: {unknown}"
    rows = [tuple(r.get(name) for name in schema.fieldNames()) for r in records]
    return spark.createDataFrame(rows, schema).drop("_corrupt_record")


def snapshot_frame(spark: Any, rows: list[dict[str, Any]]) -> Any:
    schema = snapshot_schema()
    return spark.createDataFrame(
        [tuple(r.get(name) for name in schema.fieldNames()) for r in rows], schema
    )
