"""A message's life story on a large journal: what the index by message id costs and how fast a
lookup is.

The journal (about ``--gigabytes`` of JSON Lines, 64 MiB files) is written by the server's
own encoder and file writer, records like the hooks make (``journal_audit.py``'s simulated
server), so the writer keeps its index beside each file as the server's does. The bench
prints:

- the writer's cost: ``index_lines`` (C, run without the interpreter lock on the journal's
  worker thread) per MB and per line, timed over the same batches apart from the writing,
  and sorting a closed file's entries (``sort_index``, likewise);
- the index's size against the journal's;
- building the indexes of a journal that has none (as a journal of an older version gets
  them on its first lookup);
- lookups of random messages by id, through the sorted indexes: median, 95th percentile
  and worst, with the files in the page cache (as on a server that writes them).

    flock /tmp/wiremq-bench.lock .venv/bin/python bench/journal_story.py
    .venv/bin/python bench/journal_story.py --gigabytes 0.2 --lookups 20
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from journal_audit import ALL, T0, Generator

from wiremq.config.groups import JournalSettings
from wiremq.config.parameters import REGISTRY
from wiremq.config.settings import Settings
from wiremq.modules.journal import encoding as kinds
from wiremq.modules.journal._encode import index_lines, sort_index
from wiremq.modules.journal.encoding import encode
from wiremq.modules.journal.files import JournalFiles
from wiremq.modules.journal.index import SUFFIX, JournalIndex, index_path

MB = 1 << 20


def generate(folder: Path, gigabytes: float, seed: int) -> tuple[int, int, float, float]:
    """Write the journal; (bytes, lines, seconds writing in all, seconds indexing alone)."""
    settings = JournalSettings.read(Settings(REGISTRY), "Journal")
    files = JournalFiles(folder, settings.maxfilesize, "bench")
    generator = Generator(seed)
    written = lines = 0
    indexing = 0.0
    started = time.perf_counter()

    def write(records: list[tuple[Any, ...]]) -> None:
        nonlocal written, lines, indexing
        data = encode(records, ALL)
        begun = time.perf_counter()
        index_lines(data, 0)  # what the writer does after each batch, timed on its own
        indexing += time.perf_counter() - begun
        files.write(data)
        written += len(data)
        lines += data.count(b"\n")

    write([(kinds.SERVER_STARTED, T0 - 1, "bench")])
    while written < gigabytes * 1024 * MB:
        write(generator.batch(20_000))
    write([(kinds.SERVER_STOPPED, generator.now + 10, "bench")])
    files.close()
    return written, lines, time.perf_counter() - started, indexing


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gigabytes", type=float, default=1.0)
    parser.add_argument("--lookups", type=int, default=50)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", metavar="DIR", help="write the journal there and keep it")
    args = parser.parse_args()
    holder = None if args.keep else tempfile.TemporaryDirectory(prefix="wiremq-story-")
    folder = Path(args.keep or holder.name) / "journal"  # type: ignore[union-attr]

    size, lines, writing, indexing = generate(folder, args.gigabytes, args.seed)
    journals = sorted(folder.glob("*" + SUFFIX))
    indexes = sum(index_path(p).stat().st_size for p in journals)
    print(f"journal: {size / MB:,.0f} MiB in {len(journals)} files, {lines:,} lines")
    print(f"written in {writing:.1f} s (encoding, indexing and writing)")
    print(
        f"index_lines: {indexing:.2f} s for the journal: {size / MB / indexing:,.0f} MiB/s, "
        f"{indexing / lines * 1e9:,.0f} ns a line (the journal's worker thread, no GIL)"
    )
    print(
        f"indexes: {indexes / MB:,.1f} MiB, {indexes / size * 100:.1f} % of the journal, "
        f"{indexes / lines:.1f} bytes a line"
    )

    largest = max((index_path(p) for p in journals), key=lambda p: p.stat().st_size)
    entries = largest.read_bytes()
    begun = time.perf_counter()
    sort_index(entries)
    print(
        f"sorting a closed file's entries ({len(entries) // 8:,}): "
        f"{(time.perf_counter() - begun) * 1000:.0f} ms (the worker thread, no GIL)"
    )

    rng = random.Random(args.seed)
    wanted = [f"wmq-bench-{rng.randrange(1, lines // 5)}" for _ in range(args.lookups)]
    index = JournalIndex(folder)
    for path in journals:
        index_path(path).unlink()
    begun = time.perf_counter()
    first = index.story(wanted[0])
    building = time.perf_counter() - begun
    print(
        f"first lookup of a journal without indexes (builds {first.indexed} of them): "
        f"{building:.2f} s, {size / MB / building:,.0f} MiB/s; {len(first.records)} records"
    )
    seconds = []
    found = []
    for message_id in wanted:
        story = index.story(message_id)
        seconds.append(story.seconds)
        found.append(len(story.records))
        assert story.records and all(r["message_id"] == message_id for r in story.records)
    seconds.sort()
    p95 = seconds[min(len(seconds) - 1, int(len(seconds) * 0.95))]
    print(
        f"{len(wanted)} lookups by id: median {statistics.median(seconds) * 1000:.1f} ms, "
        f"95th percentile {p95 * 1000:.1f} ms, worst {seconds[-1] * 1000:.1f} ms "
        f"({statistics.mean(found):.1f} records a message, {len(journals)} files each)"
    )
    if holder is not None:
        holder.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
