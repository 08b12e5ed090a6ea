"""``wiremq audit conservation|cleanup`` and ``wiremq export``: the commands of the audits.

Each audit reads the journal (``--journal``, by default ``DATA/journal``; any
path or URL Spark reads, given once per node of an HA pair, or a folder holding
them all) and the snapshot ``wiremq export`` wrote
(``--snapshot``, by default ``DATA/snapshot.parquet``), runs on ``--master``
(``local[*]`` by default, ``spark://HOST:PORT`` for a cluster), writes its
tables (Parquet and CSV) and ``report.html`` in ``--out`` (by default
``DATA/audit/<audit>``), prints its verdict (one JSON object with ``--json``)
and exits 0 when the audit passed, 1 when it failed, 2 when it could not run.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .report import write_page

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from .progress import Progress
    from .tables import Tables

PASSED, FAILED, CANNOT_RUN = 0, 1, 2
SNAPSHOT_FILE = "snapshot.parquet"
RUNS_SHOWN = 200  # the report's chart of removals per run shows the last ones
HISTOGRAM_BINS = 64  # lag bins double in width: 64 reach past any lag
REPORT = "report.html"


class CannotRun(RuntimeError):
    """The audit cannot run (no journal, no Java, a journal of a newer schema...)."""


def add_export(commands: Any) -> None:
    export = commands.add_parser(
        "export",
        help="write a snapshot of what the stores hold (Parquet), for the audits",
        description="Write a snapshot of every message the stores still hold (message id, "
        "destination, store, position, expiry, sizes) as Parquet. Stop the server first.",
    )
    export.add_argument("--data", metavar="DIR", required=True, help="the server's data folder")
    export.add_argument("--config", metavar="FILE", help="the server's config.xml (its stores)")
    export.add_argument("--out", metavar="FILE", help=f"where to write (DIR/{SNAPSHOT_FILE})")


def add_audit(commands: Any) -> None:
    audit = commands.add_parser(
        "audit",
        help="run a Spark audit over the journal and the snapshot",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    kinds = audit.add_subparsers(dest="audit", required=True, metavar="AUDIT")
    conservation = kinds.add_parser(
        "conservation",
        help="prove every message's fate",
        description="Prove every message's fate: acknowledged, expired, dead-lettered, "
        "discarded (with the reason), refused or still stored; name every message that has "
        "none, or fates that cannot go together (docs/journal.md).",
    )
    cleanup = kinds.add_parser(
        "cleanup",
        help="prove every cleanup removed only expired messages, in time",
        description="Per store and destination: removals of messages not yet expired, expired "
        "messages left longer than the cleanup allows, cleanup lag, removals per run, runs over "
        "cleanuptransactiontime (docs/journal.md).",
    )
    for parser in (conservation, cleanup):
        parser.add_argument("--data", metavar="DIR", help="the server's data folder")
        parser.add_argument(
            "--journal",
            metavar="PATH",
            action="append",
            help="journal files (DIR/journal); again for each node of an HA pair",
        )
        parser.add_argument(
            "--snapshot", metavar="PATH", help=f"the export's Parquet (DIR/{SNAPSHOT_FILE})"
        )
        parser.add_argument(
            "--no-snapshot",
            action="store_true",
            help="audit without a snapshot (as if the stores were empty)",
        )
        parser.add_argument("--out", metavar="DIR", help="tables and report (DIR/audit/AUDIT)")
        parser.add_argument(
            "--master", default="local[*]", help="Spark master URL (default local[*])"
        )
        parser.add_argument(
            "--driver-memory", default="2g", help="the Spark driver's memory (default 2g)"
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument(
            "--limit",
            type=int,
            default=1000,
            help="messages listed at most per list in the output and the report (1000)",
        )
        parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    cleanup.add_argument(
        "--tolerance",
        type=int,
        default=1000,
        metavar="MS",
        help="timer lateness allowed before an expired message counts as outlived (1000 ms)",
    )


@dataclass(frozen=True)
class Paths:
    journals: list[str]
    snapshot: str | None
    out: str
    report: Path  # local: where report.html goes

    @classmethod
    def of(cls, args: argparse.Namespace) -> Paths:
        data = Path(args.data) if args.data else None
        if args.journal is None and data is None:
            raise CannotRun("give --data DIR (or --journal PATH and --out DIR)")
        journals = args.journal or [str(data / "journal")]  # type: ignore[operator]
        for journal in journals:
            if "://" not in journal and not Path(journal).exists():
                raise CannotRun(f"no journal at {journal}")
        snapshot = None
        if not args.no_snapshot:
            snapshot = args.snapshot or (str(data / SNAPSHOT_FILE) if data else None)
            if snapshot is None or ("://" not in snapshot and not Path(snapshot).exists()):
                raise CannotRun(
                    f"no snapshot at {snapshot}: run `wiremq export --data DIR` with the server "
                    "stopped, or give --no-snapshot"
                )
        out = args.out or (str(data / "audit" / args.audit) if data else None)
        if out is None:
            raise CannotRun("give --out DIR")
        if "://" in out and not out.startswith("file://"):
            report = Path(".") / f"audit-{args.audit}"
        else:
            report = Path(out.removeprefix("file://"))
        return cls(journals, snapshot, out, report)

    @property
    def journal(self) -> str:
        """The journals, for messages."""
        return ", ".join(self.journals)


def main(args: argparse.Namespace, spark: SparkSession | None = None) -> int:
    """Run ``wiremq export`` or ``wiremq audit ...`` (on ``spark`` when given, else on a
    session of its own); the exit code."""
    if args.command == "export":
        return _export(args)
    try:
        paths = Paths.of(args)
        if spark is None:
            from .spark import JavaMissing, start_session

            try:
                spark = start_session(args.master, f"wiremq {args.audit} audit", args.driver_memory)
            except JavaMissing as error:
                raise CannotRun(str(error)) from error
        return AUDITS[args.audit](args, paths, spark)
    except CannotRun as error:
        print(f"wiremq audit: {error}", file=sys.stderr)
        return CANNOT_RUN


def _export(args: argparse.Namespace) -> int:
    from wiremq.config.xmlconfig import ConfigError, load_config
    from wiremq.server.logging import configure_logging
    from wiremq.stores.errors import StoreError

    from .export import export

    try:
        config = load_config(args.config, {"Server.datadir": args.data})
    except ConfigError as error:
        print(f"wiremq export: configuration error: {error}", file=sys.stderr)
        return CANNOT_RUN
    out = Path(args.out) if args.out else Path(args.data) / SNAPSHOT_FILE
    configure_logging("warning")
    try:
        done = export(config.settings, out)
    except (StoreError, OSError) as error:
        print(
            f"wiremq export: cannot read the stores ({error}); is the server still running?",
            file=sys.stderr,
        )
        return CANNOT_RUN
    print(
        f"wiremq export: {done.messages:,} stored messages of {done.destinations:,} "
        f"destinations -> {done.path}"
    )
    return PASSED


# -- the audits -------------------------------------------------------------------------------


def _journal(
    spark: SparkSession, paths: Paths, tables: Tables, progress: Progress
) -> tuple[DataFrame, dict[str, Any]]:
    """The readable journal and the facts about it (records, unreadable lines, ...).

    The JSON is parsed once, into the audit's ``journal`` table (Parquet): parsing is
    most of an audit's work, and everything after reads the columns it needs from it.
    """
    from . import journal

    progress.step(f"reading the journal at {paths.journal}")
    records = tables.write("journal", journal.read_journal(spark, paths.journals), csv=False)
    facts = _first(journal.checks(records))
    if not facts["records"]:
        raise CannotRun(f"the journal at {paths.journal} has no records")
    if facts["newer_schema"]:
        raise CannotRun(
            f"{facts['newer_schema']:,} journal records are of a newer schema than this "
            "audit reads: use the wiremq that wrote them"
        )
    return journal.readable(records), facts


def _snapshot(spark: SparkSession, paths: Paths) -> DataFrame | None:
    from .journal import read_snapshot

    return read_snapshot(spark, paths.snapshot) if paths.snapshot else None


def _listed(frame: DataFrame, limit: int) -> list[dict[str, Any]]:
    return [row.asDict() for row in frame.limit(limit).collect()]


def _finish(args: argparse.Namespace, verdict: dict[str, Any], human: list[str]) -> int:
    if args.json:
        print(json.dumps(verdict, default=str))
    else:
        print("\n".join(human))
    return PASSED if verdict["ok"] else FAILED


def conservation_audit(args: argparse.Namespace, paths: Paths, spark: SparkSession) -> int:
    from . import conservation
    from .pages import conservation_page
    from .progress import Progress
    from .tables import Tables

    tables = Tables(paths.out)
    with Progress(spark, quiet=args.quiet) as progress:
        journal, facts = _journal(spark, paths, tables, progress)
        progress.step("grouping the journal by message")
        partitions = int(spark.conf.get("spark.sql.shuffle.partitions") or "8")
        verdicts = tables.write(
            "messages", conservation.audit(journal, _snapshot(spark, paths), partitions)
        )
        progress.step("counting fates")
        summary = _first(tables.write("summary", conservation.summary(verdicts)))
        destinations = tables.write("fates_by_destination", conservation.by_destination(verdicts))
        unexplained = tables.write("unexplained", conservation.unexplained(verdicts))
        listed = _listed(unexplained, args.limit)
        per_destination = _listed(destinations, args.limit)
    fates = (*conservation.FATES, conservation.UNEXPLAINED)
    page = conservation_page(_facts(paths, facts), summary, fates, per_destination, listed)
    write_page(paths.report, page)
    verdict = {
        "audit": "conservation",
        "ok": page.verdict,
        **{k: summary[k] for k in ("messages", "received", *conservation.FATES)},
        "unexplained": [row["message_id"] for row in listed],
        "unexplained_count": summary["unexplained"],
        "unexplained_details": listed,
        "journal_records": facts["records"],
        "unreadable_lines": facts["unreadable"],
        "tables": paths.out,
        "report": str(paths.report / REPORT),
    }
    human = [
        f"conservation audit: {'PASSED' if page.verdict else 'FAILED'}",
        f"  received {summary['received']:,} messages: "
        + ", ".join(f"{summary[f]:,} {f.replace('_', ' ')}" for f in conservation.FATES),
        f"  unexplained: {summary['unexplained']:,}",
        *(f"    {r['message_id']} {r['destination']}: {r['problems']}" for r in listed[:20]),
        *_where(facts, paths),
    ]
    return _finish(args, verdict, human)


def cleanup_audit(args: argparse.Namespace, paths: Paths, spark: SparkSession) -> int:
    from . import cleanup
    from .pages import cleanup_page
    from .progress import Progress
    from .tables import Tables

    tables = Tables(paths.out)
    with Progress(spark, quiet=args.quiet) as progress:
        journal, facts = _journal(spark, paths, tables, progress)
        progress.step("taking the records of cleanups and expiries")
        records = tables.write("records", cleanup.relevant(journal), csv=False)
        sessions = cleanup.sessions(records)
        origins = cleanup.origins(records)
        progress.step("runs and removals")
        runs = tables.write("runs", cleanup.runs(records))
        removals = cleanup.removals(records, origins)
        per_run = tables.write("removals_per_run", cleanup.removals_per_run(runs, removals))
        premature = tables.write("premature_removals", cleanup.premature(removals))
        progress.step("lags and outlived messages")
        outlived = tables.write(
            "outlived",
            cleanup.outlived(
                cleanup.expiries(records, origins),
                cleanup.still_there(records, origins, _snapshot(spark, paths), sessions),
                runs,
                sessions,
                args.tolerance,
            ),
        )
        lags = cleanup.lags(removals, sessions)
        percentiles = tables.write("lag_percentiles", cleanup.lag_percentiles(lags))
        histogram = _listed(cleanup.lag_histogram(lags), HISTOGRAM_BINS)
        overran = tables.write("overran_runs", cleanup.overran(runs))
        disagreeing = per_run.where("NOT agrees")
        found = {
            "premature": premature,
            "outlived": outlived,
            "overran": overran,
            "disagreeing": disagreeing,
        }
        counts = {key: frame.count() for key, frame in found.items()}
        counts.update(runs=runs.count(), removals=removals.count())
        listed = {key: _listed(frame, args.limit) for key, frame in found.items()}
        listed["percentiles"] = _listed(percentiles, args.limit)
        listed["per_run"] = _listed(per_run.orderBy(per_run.started_ts.desc()), RUNS_SHOWN)
    ok = not any(counts[key] for key in found) and facts["unreadable"] == 0
    write_page(paths.report, cleanup_page(_facts(paths, facts), counts, listed, histogram, ok))
    verdict = {
        "audit": "cleanup",
        "ok": ok,
        "runs": counts["runs"],
        "removals": counts["removals"],
        "premature_removals": listed["premature"],
        "premature_count": counts["premature"],
        "outlived": listed["outlived"],
        "outlived_count": counts["outlived"],
        "lag_percentiles": listed["percentiles"],
        "overran_runs": listed["overran"],
        "overran_count": counts["overran"],
        "runs_disagreeing": listed["disagreeing"],
        "journal_records": facts["records"],
        "unreadable_lines": facts["unreadable"],
        "tables": paths.out,
        "report": str(paths.report / REPORT),
    }
    human = [
        f"cleanup audit: {'PASSED' if ok else 'FAILED'}",
        f"  {counts['runs']:,} cleanup runs removed {counts['removals']:,} messages",
        f"  removed before they expired: {counts['premature']:,}",
        *(
            f"    {r['message_id']} {r['destination']} by {r['run']}"
            for r in listed["premature"][:20]
        ),
        f"  expired and left too long: {counts['outlived']:,}",
        *(
            f"    {r['message_id']} {r['destination']}: {r['lag_ms']:,} ms after expiring"
            for r in listed["outlived"][:20]
        ),
        f"  runs over cleanuptransactiontime: {counts['overran']:,}",
        f"  runs whose count disagrees with the journal: {counts['disagreeing']:,}",
        *(
            f"  lag {r['store']} {r['destination']}: p50 {r['p50_ms']} ms, p99 {r['p99_ms']} "
            f"ms, max {r['max_ms']} ms over {r['removals']:,} removals"
            for r in listed["percentiles"][:10]
        ),
        *_where(facts, paths),
    ]
    return _finish(args, verdict, human)


def _first(frame: DataFrame) -> dict[str, Any]:
    row = frame.first()
    assert row is not None
    return row.asDict()


def _facts(paths: Paths, facts: dict[str, Any]) -> dict[str, Any]:
    """What the report says of its input."""
    return {
        "journal": paths.journal,
        "snapshot": paths.snapshot or "none",
        "journal records": facts["records"],
        "unreadable lines": facts["unreadable"],
    }


def _where(facts: dict[str, Any], paths: Paths) -> list[str]:
    return [
        f"  unreadable journal lines: {facts['unreadable']:,}",
        f"  tables: {paths.out}",
        f"  report: {paths.report / REPORT}",
    ]


AUDITS: dict[str, Callable[[argparse.Namespace, Paths, SparkSession], int]] = {
    "conservation": conservation_audit,
    "cleanup": cleanup_audit,
}
