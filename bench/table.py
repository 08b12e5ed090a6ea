"""Issue 27's table: wiremq against its best peer in every scenario, as ratios over runs.

One command measures every row of the table, each row's brokers interleaved
(wiremq, ActiveMQ, RabbitMQ, the bare Twisted relay: A B C A B C ...), medians
of ``--repeats`` per run, and ``--runs`` such runs one after the other; it
prints each run's table and then every ratio as a range over the runs, beside
its target. The load comes from the peers' own load generator
(``../shared/peers/stompbench.py``: a process per client, pre-encoded frames),
128-byte bodies unless the row says otherwise:

- queue, non-persistent (128 B and 4 KiB), topic fan-out to 4 subscribers,
  client-individual ack of each message: msgs/s (deliveries/s), wiremq over
  the best peer's;
- round trip p50: the best peer's over wiremq's, and wiremq's over the relay's;
- a selector on the consumer (every message matches): wiremq over ActiveMQ,
  and over wiremq with no selector (the same messages, headers included);
- persistent, 128 B, a fill with no consumer (then a drain, not in the ratio):
  1 producer waiting on every receipt, 8 such producers, 1 producer with a
  receipt on every 100th SEND and 4 in flight: fill msgs/s over the best
  peer's (RabbitMQ included);
- server CPU per queued message (the 128 B queue row): wiremq's over the relay's;
- the lone persistent producer's fill against the sync floor's
  (``sync_floor.py``: a blocking thread that syncs each SEND inline and
  answers it, no broker, its file beside the server's data): wiremq's share
  of what the machine's disk allows in that run, and the best peer's.

Each (row, broker) is first probed and its message count set so a run lasts
about ``--target-seconds``; one ``wiremq serve`` (fresh data folder) serves a
whole command. ActiveMQ (127.0.0.1:61613) and RabbitMQ (:61614) must already
run (``../shared/peers/setup.sh``). Run it under ``flock /tmp/wiremq-bench.lock``.

    .venv/bin/python bench/table.py                      # 3 runs, about 25 minutes
    .venv/bin/python bench/table.py --runs 1 --only persist-1p,queue-128
    .venv/bin/python bench/table.py --rabbit             # RabbitMQ in every row

Every run's JSON line (with the machine's load) goes to ``--out``/runs.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from peers import (
    ACTIVEMQ,
    PEERS,
    RABBITMQ,
    listening,
    number,
    start_floor,
    start_relay,
    stompbench,
    sync_rate,
)
from server_proc import ManagedServer, free_port

SELECTOR = "region = 'EU' AND price > 100"
SELECTED = ["--header", "region:EU", "--header", "price:150"]
RABBIT_LOGIN = ["--login", "guest", "--passcode", "guest", "--vhost", "/"]


@dataclass(frozen=True)
class Workload:
    """One stompbench workload: its arguments, first probe size and least size."""

    args: tuple[str, ...]
    probe: int
    least: int
    rate_key: str = "msgs_per_s"


NP = ("--scenario", "queue-np", "--size", "128")
WORKLOADS = {
    "queue-128": Workload(NP, 5000, 2000),
    "queue-4k": Workload(("--scenario", "queue-np", "--size", "4096"), 5000, 2000),
    "topic-4": Workload(
        ("--scenario", "topic-fanout", "--subscribers", "4", "--size", "128"), 2000, 1000
    ),
    "ack-each": Workload(
        ("--scenario", "client-ack", "--ack-every", "1", "--size", "128"), 3000, 1000
    ),
    "roundtrip": Workload(
        ("--scenario", "latency", "--warmup", "200", "--size", "128"), 2000, 2000
    ),
    "plain": Workload((*NP, *SELECTED), 5000, 2000),
    "selector": Workload((*NP, *SELECTED, "--selector", SELECTOR), 5000, 2000),
    **{
        name: Workload(
            (
                "--scenario",
                "queue-p",
                "--drain-after",
                "--size",
                "128",
                "--producers",
                str(producers),
                "--receipt-every",
                str(every),
                "--receipt-window",
                str(window),
            ),
            probe,
            least,
            "send_msgs_per_s",
        )
        for name, producers, every, window, probe, least in (
            ("persist-1p", 1, 1, 1, 500, 500),
            ("persist-8p", 8, 1, 1, 2000, 2000),
            ("persist-r100", 1, 100, 4, 20_000, 10_000),
        )
    },
}


@dataclass(frozen=True)
class Row:
    """A row of the table: ``workload`` run against ``brokers``; the ratio is wiremq's
    figure over the best peer's (a latency: the best peer's over wiremq's)."""

    name: str
    title: str
    workload: str
    target: float | None
    brokers: tuple[str, ...] = ("wiremq", "amq")
    against: str = "best peer"  # or a broker label: the ratio is taken against it


ROWS = [
    Row("queue-128", "queue, non-persistent", "queue-128", 2.0, ("wiremq", "amq", "relay")),
    Row("queue-4k", "queue, 4 KiB", "queue-4k", None),
    Row("topic-4", "topic fan-out x4 (deliveries/s)", "topic-4", 2.0),
    Row("ack-each", "client-individual ack of each message", "ack-each", 2.0),
    Row(
        "roundtrip", "round trip p50 (peer's / ours)", "roundtrip", 2.0, ("wiremq", "amq", "relay")
    ),
    Row("selector", "selector on every consumer", "selector", 2.0),
    Row("selector-cost", "the same selector / no selector", "selector", 0.8, ("wiremq",), "plain"),
    Row(
        "persist-1p",
        "persistent, 1 producer waiting on every receipt",
        "persist-1p",
        1.5,
        ("wiremq", "amq", "rabbit", "floor"),
    ),
    Row(
        "persist-8p", "persistent, 8 such producers", "persist-8p", 2.0, ("wiremq", "amq", "rabbit")
    ),
    Row(
        "persist-r100",
        "persistent, receipt every 100th",
        "persist-r100",
        None,
        ("wiremq", "amq", "rabbit"),
    ),
]
FLOORS = ("relay", "floor")  # no broker beats them: never the best peer
ROUND_TRIP_TO_RELAY = 1.15  # wiremq's p50 over the relay's, at most
CPU_TO_RELAY = 1.5  # wiremq's server CPU per queued message over the relay's, at most


@dataclass
class Broker:
    label: str
    port: int
    extra: tuple[str, ...] = ()
    results: dict[str, list[dict[str, object]]] = field(default_factory=dict)


def median(values: list[float]) -> float | None:
    values = sorted(values)
    return values[len(values) // 2] if values else None


def figure(results: list[dict[str, object]], key: str) -> float | None:
    """The median of ``key`` over the runs that received everything."""
    return median(
        [
            float(v)
            for r in results
            if r.get("all_received") and isinstance(v := r.get(key), int | float)
        ]
    )


def cpu_us(results: list[dict[str, object]]) -> float | None:
    """Median server CPU per message (per delivery for a fan-out), in µs."""
    return median(
        [
            float(r["broker_cpu_s"]) / float(r.get("delivered_unique") or r["messages"]) * 1e6  # type: ignore[arg-type]
            for r in results
            if r.get("all_received") and isinstance(r.get("broker_cpu_s"), int | float)
        ]
    )


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f}"


class Table:
    """Runs the rows against the brokers, interleaved; see the module docstring."""

    def __init__(
        self, brokers: dict[str, Broker], rows: list[Row], args: argparse.Namespace
    ) -> None:
        self.brokers = brokers
        self.rows = rows
        self.args = args
        self.sizes: dict[tuple[str, str], int] = {}
        self.log = (Path(args.out) / "runs.jsonl").open("a")

    def cells(self) -> list[tuple[str, str]]:
        """(workload, broker) in the order they run: each workload's brokers together."""
        seen: dict[tuple[str, str], None] = {}
        for row in self.rows:
            for label in row.brokers:
                if label in self.brokers:
                    seen[(row.workload, label)] = None
            if row.against in WORKLOADS:
                seen[(row.against, "wiremq")] = None
        return list(seen)

    def run(self, workload: str, label: str, messages: int, run: int) -> dict[str, object]:
        broker, spec = self.brokers[label], WORKLOADS[workload]
        result = stompbench(
            broker.port,
            *spec.args,
            "--messages",
            str(messages),
            "--idle-timeout",
            "10",
            *broker.extra,
            timeout=900,
        )
        result.update(workload=workload, label=label, run=run, load=os.getloadavg())
        self.log.write(json.dumps(result) + "\n")
        self.log.flush()
        rate = result.get("p50_us") if workload == "roundtrip" else result.get(spec.rate_key)
        status = "" if result.get("all_received") else f"FAILED {result.get('errors')}"
        print(f"  {label:7} {workload:13} n={messages:<8} {rate} {status}", flush=True)
        return result

    def calibrate(self) -> None:
        """Size each (workload, broker) to last about ``--target-seconds``."""
        for workload, label in self.cells():
            spec = WORKLOADS[workload]
            messages = spec.probe
            for _ in range(4):
                probe = self.run(workload, label, messages, -1)
                seconds = probe.get("seconds")
                if not probe.get("all_received") or not isinstance(seconds, int | float):
                    break
                if seconds >= 0.8:
                    break
                messages *= 4
            seconds = probe.get("seconds")
            if isinstance(seconds, int | float) and seconds > 0:
                messages = int(messages * self.args.target_seconds / seconds)
            self.sizes[(workload, label)] = max(spec.least, min(messages, 3_000_000))

    def measure(self, run: int) -> None:
        """One run: ``--repeats`` rounds over every cell, interleaved."""
        for broker in self.brokers.values():
            broker.results = {}
        for _ in range(self.args.repeats):
            for workload, label in self.cells():
                result = self.run(workload, label, self.sizes[(workload, label)], run)
                self.brokers[label].results.setdefault(workload, []).append(result)

    def value(self, workload: str, label: str) -> float | None:
        broker = self.brokers.get(label)
        if broker is None:
            return None
        results = broker.results.get(workload, [])
        key = "p50_us" if workload == "roundtrip" else WORKLOADS[workload].rate_key
        return figure(results, key)

    def ratios(self) -> list[tuple[str, str, float | None, float | None, bool]]:
        """(what, figures, ratio, target, lower is better) per line of this run's table."""
        lines: list[tuple[str, str, float | None, float | None, bool]] = []
        for row in self.rows:
            ours = self.value(row.workload, "wiremq")
            known: dict[str, float] = {}
            if row.against in WORKLOADS:
                theirs, who = self.value(row.against, "wiremq"), "no selector"
            elif row.against in self.brokers:
                theirs, who = self.value(row.workload, row.against), row.against
            else:
                peers = {
                    label: self.value(row.workload, label)
                    for label in row.brokers
                    if label not in ("wiremq", *FLOORS)
                }
                known = {k: v for k, v in peers.items() if v}
                pick = min if row.workload == "roundtrip" else max
                who = pick(known, key=lambda k: known[k]) if known else "-"
                theirs = known.get(who)
            latency = row.workload == "roundtrip"
            unit = "us" if latency else "/s"
            figures = f"wiremq {number(ours)} {unit}, {who} {number(theirs)} {unit}"
            if latency:
                value = theirs / ours if ours and theirs else None
            else:
                value = ours / theirs if ours and theirs else None
            if row.against == "best peer" and len(known) > 1 and ours and not latency:
                figures += "; " + ", ".join(f"/ {k} {ours / v:.2f}" for k, v in known.items())
            lines.append((row.title, figures, value, row.target, False))
            if latency and "relay" in self.brokers:
                relay = self.value("roundtrip", "relay")
                lines.append(
                    (
                        "round trip p50, ours / the relay's",
                        f"wiremq {number(ours, 1)} us, relay {number(relay, 1)} us",
                        ours / relay if ours and relay else None,
                        ROUND_TRIP_TO_RELAY,
                        True,
                    )
                )
            floor = self.value(row.workload, "floor") if "floor" in row.brokers else None
            if floor and not latency:
                shares = f"wiremq {number(ours / floor, 2)}" if ours else "wiremq -"
                if theirs:
                    shares += f", {who} {theirs / floor:.2f}"
                lines.append(
                    (
                        f"{row.title}, ours / the sync floor's",
                        f"floor {number(floor)} /s; / floor: {shares}",
                        ours / floor if ours else None,
                        None,
                        False,
                    )
                )
            if row.workload == "queue-128" and "relay" in self.brokers:
                results = self.brokers["wiremq"].results.get("queue-128", [])
                relay_results = self.brokers["relay"].results.get("queue-128", [])
                ours_cpu, relay_cpu = cpu_us(results), cpu_us(relay_results)
                lines.append(
                    (
                        "server CPU per queued message, ours / relay's",
                        f"wiremq {number(ours_cpu, 1)} us, relay {number(relay_cpu, 1)} us",
                        ours_cpu / relay_cpu if ours_cpu and relay_cpu else None,
                        CPU_TO_RELAY,
                        True,
                    )
                )
        return lines


def verdict(value: float | None, target: float | None, lower: bool) -> str:
    if value is None or target is None:
        return ""
    return "ok" if (value <= target if lower else value >= target) else "MISSED"


def bound(target: float | None, lower: bool) -> str:
    return "keep" if target is None else f"{'<=' if lower else '>='} {target}"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3, help="whole runs, one after the other")
    parser.add_argument("--repeats", type=int, default=3, help="rounds per run (medians)")
    parser.add_argument("--target-seconds", type=float, default=2.0)
    parser.add_argument(
        "--only", default="", help="rows, comma-separated: " + ",".join(r.name for r in ROWS)
    )
    parser.add_argument("--rabbit", action="store_true", help="RabbitMQ in every row")
    parser.add_argument("--set", action="append", default=[], metavar="GROUP.NAME=VALUE")
    parser.add_argument("--out", default=f"/tmp/wiremq-table-{time.strftime('%Y%m%d-%H%M%S')}")
    args = parser.parse_args()
    rows = [r for r in ROWS if not args.only or r.name in args.only.split(",")]
    if args.rabbit:
        rows = [
            r
            if "rabbit" in r.brokers or r.brokers == ("wiremq",)
            else Row(r.name, r.title, r.workload, r.target, (*r.brokers, "rabbit"), r.against)
            for r in rows
        ]
    wanted = {label for row in rows for label in row.brokers}
    if not listening(ACTIVEMQ) or ("rabbit" in wanted and not listening(RABBITMQ)):
        print(
            f"ActiveMQ and RabbitMQ must run on loopback: run {PEERS / 'setup.sh'}", file=sys.stderr
        )
        return 2
    wiremq = shutil.which("wiremq", path=str(Path(sys.executable).parent))
    assert wiremq is not None, "run with the project's .venv/bin/python"
    Path(args.out).mkdir(parents=True, exist_ok=True)
    helpers: list[subprocess.Popen[bytes]] = []  # the relay, the sync floor
    outcomes: list[list[tuple[str, str, float | None, float | None, bool]]] = []
    try:
        with ManagedServer(wiremq, args.set) as server:
            brokers = {
                "wiremq": Broker("wiremq", server.port, ("--broker-pid", str(server.pid))),
                "amq": Broker("amq", ACTIVEMQ[1]),
                "rabbit": Broker("rabbit", RABBITMQ[1], tuple(RABBIT_LOGIN)),
            }
            if "relay" in wanted:
                port = free_port("127.0.0.1")
                relay = start_relay(port)
                helpers.append(relay)
                brokers["relay"] = Broker("relay", port, ("--broker-pid", str(relay.pid)))
            if "floor" in wanted:  # its file on the disk the server's data is on
                port = free_port("127.0.0.1")
                helpers.append(start_floor(port, server.workdir / "sync-floor.log"))
                brokers["floor"] = Broker("floor", port)
            brokers = {k: v for k, v in brokers.items() if k in wanted}
            table = Table(brokers, rows, args)
            print(
                f"{load()}; sync rate {sync_rate(server.workdir):,.0f}/s; calibrating", flush=True
            )
            table.calibrate()
            for run in range(args.runs):
                started = f"{load()}, sync rate {sync_rate(server.workdir):,.0f}/s"
                print(f"run {run + 1} of {args.runs} ({started})", flush=True)
                table.measure(run)
                outcomes.append(table.ratios())
                print(f"\nrun {run + 1}: {started} at the start, {load()} at the end")
                print("| scenario | figures (medians) | ratio | target | |")
                print("|---|---|---|---|---|")
                for what, figures, value, target, lower in outcomes[-1]:
                    print(
                        f"| {what} | {figures} | {number(value, 2)} | {bound(target, lower)} "
                        f"| {verdict(value, target, lower)} |"
                    )
                print(flush=True)
    finally:
        for helper in helpers:
            helper.kill()
            helper.wait()
    print(f"ratios over {len(outcomes)} runs (medians of {args.repeats} each):")
    print("| scenario | ratio, range over runs | target | every run |")
    print("|---|---|---|---|")
    for index, (what, _, _, target, lower) in enumerate(outcomes[0] if outcomes else []):
        values = [o[index][2] for o in outcomes]
        known = [v for v in values if v is not None]
        span = f"{min(known):.2f}-{max(known):.2f}" if known else "-"
        met = "" if target is None else "MISSED"
        if target is None or all(verdict(v, target, lower) == "ok" for v in values):
            met = "" if target is None else "ok"
        print(f"| {what} | {span} | {bound(target, lower)} | {met} |")
    print(f"\nevery run: {args.out}/runs.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
