"""``wiremq export``: a snapshot of what the stores still hold, as Parquet.

The audits compare the journal with what is left: a message still stored has
that fate. The export opens the stores as the server does (the write-ahead
log is replayed first), so the server must be stopped (every node of an HA
pair: the export takes the lease for the time it reads); it reads every queue's
and every topic's log in order, a page at a time, and writes one row per
stored message (``SNAPSHOT_COLUMNS``) with pyarrow, a row group at a time, so
that a large store never sits in memory. The Spark jobs read this file and
never open the stores themselves.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from wiremq.config.groups import QueueStoreSettings
from wiremq.config.settings import Settings
from wiremq.modules.journal.schema import BOOLEAN, LONG, STRING, store_of
from wiremq.server.ha import stopped_store
from wiremq.stores.api import QUEUE_PREFIX, TOPIC_PREFIX, MessageStore

from .journal import SNAPSHOT_COLUMNS

ROWS_PER_GROUP = 65_536
PAGE_BYTES = 16 << 20  # bytes of messages one read brings back at most
_ARROW_TYPES = {STRING: pa.string(), LONG: pa.int64(), BOOLEAN: pa.bool_()}
SCHEMA = pa.schema([(name, _ARROW_TYPES[kind]) for name, kind in SNAPSHOT_COLUMNS])


@dataclass(frozen=True)
class Exported:
    path: Path
    messages: int
    destinations: int
    exported_at: int  # ms since the epoch


def rows(store: MessageStore, page: int) -> Iterator[tuple[object, ...]]:
    """Every stored message, destination by destination, in store order."""
    for prefix in (QUEUE_PREFIX, TOPIC_PREFIX):
        for destination in store.destinations(prefix):
            after = 0
            while True:
                batch = store.read(
                    destination, now_ms=0, after_seq=after, limit=page, max_bytes=PAGE_BYTES
                )
                for seq, message in batch.messages:
                    yield (
                        message.message_id,
                        destination,
                        store_of(destination),
                        seq,
                        message.expires,
                        len(message.body),
                        message.size,
                        message.priority,
                        message.timestamp,
                    )
                if batch.at_end or batch.last_seq == after:
                    break
                after = batch.last_seq


def export(settings: Settings, out: Path) -> Exported:
    """Write the snapshot of the stores ``settings`` name to ``out`` (a Parquet file)."""
    exported_at = time.time_ns() // 1_000_000
    page = QueueStoreSettings.read(settings, "PersQueueFileStore").readmsgamount
    count = 0
    with stopped_store(settings) as store:
        destinations = len(store.destinations(QUEUE_PREFIX)) + len(store.destinations(TOPIC_PREFIX))
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_name(out.name + ".part")
        metadata = {b"wiremq.exported_at": str(exported_at).encode()}
        with pq.ParquetWriter(partial, SCHEMA.with_metadata(metadata)) as writer:
            group: list[tuple[object, ...]] = []
            for row in rows(store, page):
                group.append(row)
                if len(group) >= ROWS_PER_GROUP:
                    writer.write_table(_table(group))
                    count += len(group)
                    group = []
            writer.write_table(_table(group))
            count += len(group)
        partial.replace(out)
    return Exported(out, count, destinations, exported_at)


def _table(group: list[tuple[object, ...]]) -> pa.Table:
    """A row group as a table (columns from rows)."""
    columns: list[Sequence[object]] = [[] for _ in SCHEMA.names]
    if group:
        columns = list(zip(*group, strict=True))
    arrays = [
        pa.array(list(values), type=field.type)
        for field, values in zip(SCHEMA, columns, strict=True)
    ]
    return pa.Table.from_arrays(arrays, schema=SCHEMA)
