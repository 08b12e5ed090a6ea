"""What the audit journal costs: the same scenarios with the journal on and off, one run.

Starts two fresh ``wiremq serve`` processes, one with the journal on (the
default) and one with ``Journal.enabled=false``, and runs the peers' load
generator (``../shared/peers/compare.py``) against both, interleaved (on, off,
on, off ...; medians of the repeats), then prints for each scenario the
throughput of each, the ratio on / off (the issue's target: at least 0.8 for
the non-persistent queue and topic scenarios), the server CPU per message of
each, and how much journal the server with it on wrote.

    flock /tmp/wiremq-bench.lock .venv/bin/python bench/journal_cost.py
    .venv/bin/python bench/journal_cost.py --scenarios queue-np --sizes 128 --repeats 5
    .venv/bin/python bench/journal_cost.py --on-set Journal.flushinterval=0.01
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from peers import compare, number, ratio
from server_proc import ManagedServer


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--scenarios", default="queue-np,topic-fanout")
    parser.add_argument("--sizes", default="128,4096")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--target-seconds", type=float, default=3.0)
    parser.add_argument(
        "--on-set",
        action="append",
        default=[],
        metavar="GROUP.NAME=VALUE",
        help="a parameter of the server with the journal on (a journal setting to try)",
    )
    parser.add_argument("--out", default=f"/tmp/wiremq-journal-{time.strftime('%Y%m%d-%H%M%S')}")
    args = parser.parse_args()
    wiremq = shutil.which("wiremq", path=str(Path(sys.executable).parent))
    assert wiremq is not None, "run with the project's .venv/bin/python"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with (
        ManagedServer(wiremq, args.on_set) as on,
        ManagedServer(wiremq, ["Journal.enabled=false"]) as off,
    ):
        compare(
            [f"on=127.0.0.1:{on.port},pid={on.pid}", f"off=127.0.0.1:{off.port},pid={off.pid}"],
            args,
            out,
        )
        on_journal = on.workdir / "data" / "journal"
        assert on_journal.exists(), "the server with the journal on wrote none"
        journal = folder_bytes(on_journal)
        assert not (off.workdir / "data" / "journal").exists(), "journal off still wrote one"
    summary = json.loads((out / "summary.json").read_text())
    cells: dict[tuple[str, int], dict[str, dict[str, object]]] = {}
    for row in summary:
        cells.setdefault((str(row["scenario"]), int(row["size"])), {})[str(row["broker"])] = row
    print()
    print(
        "| scenario | size | journal on msgs/s | journal off msgs/s | on / off | "
        "on us CPU/msg | off us CPU/msg |"
    )
    print("|---|---|---|---|---|---|---|")
    for (scenario, size), rows in cells.items():
        rates = [rows.get(b, {}).get("median_msgs_per_s") for b in ("on", "off")]
        cpus = []
        for broker in ("on", "off"):
            row = rows.get(broker, {})
            cpu, seconds, rate = (
                row.get("broker_cpu_s"),
                row.get("seconds"),
                row.get("median_msgs_per_s"),
            )
            if isinstance(cpu, int | float) and isinstance(seconds, int | float) and rate:
                cpus.append(number(cpu / (seconds * float(rate)) * 1e6, 2))  # type: ignore[arg-type]
            else:
                cpus.append("-")
        on_rate, off_rate = (float(r) if isinstance(r, int | float) else None for r in rates)
        print(
            f"| {scenario} | {size} | {number(on_rate)} | {number(off_rate)} | "
            f"{ratio(on_rate, off_rate)} | {cpus[0]} | {cpus[1]} |"
        )
    print(f"\njournal written by the server with it on: {journal / 1e6:,.0f} MB")
    print(f"every run: {out}/runs.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
