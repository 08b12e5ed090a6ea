"""wiremq against its peers on this machine, in one interleaved run, as ratios.

Runs the peers' own load generator (``../shared/peers/compare.py``, which
interleaves brokers A B C A B C ... and takes medians of its repeats) against a
fresh ``wiremq serve``, ActiveMQ, RabbitMQ (where asked) and the bare Twisted
relay ``ceiling_relay.py``, then prints what the targets are stated in:

- throughput ratios wiremq / ActiveMQ (and / RabbitMQ) per scenario and size;
- round-trip p50 ratio, ActiveMQ's / wiremq's (above 1: wiremq is faster);
- server CPU per message, wiremq's over the relay's (the cost floor of a
  Twisted broker here), from the brokers' CPU time during the runs.

With ``--persistent`` it measures the persistent scenarios instead, the way
issue 10 states them: 128-byte persistent messages, a fill first (no consumer;
the fill rate counts receipted messages), then a drain, for 1 producer waiting
on every receipt, 8 producers each waiting on every receipt, and 1 producer
with a receipt on every 100th SEND and 4 receipts in flight; the peers' load
generator (``stompbench.py --drain-after``) run against each broker in turn,
interleaved, medians of the repeats, beside the machine's sync rate (a small
probe in the data folder's file system) and the server CPU per message.

ActiveMQ and RabbitMQ must already run on loopback: ``../shared/peers/setup.sh``
installs and starts them (STOMP 127.0.0.1:61613 and :61614). Example:

    .venv/bin/python bench/peers.py --scenarios queue-np,topic-fanout,latency,client-ack
    .venv/bin/python bench/peers.py --persistent --rabbit

Every figure it prints comes from compare.py's ``summary.json`` (kept, with
every run's JSON line, in the ``--out`` folder).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from server_proc import ManagedServer, free_port


def peers_folder() -> Path:
    """``shared/peers`` beside the checkout, however deep it is (``/work/main`` or a
    worktree such as ``/work/wt/<name>``)."""
    here = Path(__file__).resolve()
    found = [p / "shared" / "peers" for p in here.parents if (p / "shared" / "peers").is_dir()]
    return found[0] if found else here.parents[2] / "shared" / "peers"


PEERS = peers_folder()
ACTIVEMQ = ("127.0.0.1", 61613)
RABBITMQ = ("127.0.0.1", 61614)
RELAY_SCENARIOS = "queue-np+topic-fanout+latency"  # all the relay speaks


def listening(address: tuple[str, int]) -> bool:
    try:
        socket.create_connection(address, timeout=1).close()
    except OSError:
        return False
    return True


def start_listener(command: list[str], port: int, what: str) -> subprocess.Popen[bytes]:
    """Start ``command`` (a server on loopback ``port``) and wait until it accepts."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        if listening(("127.0.0.1", port)):
            return process
        time.sleep(0.1)
    process.kill()
    raise SystemExit(f"{what} did not start")


def start_relay(port: int) -> subprocess.Popen[bytes]:
    """The bare Twisted relay: the floor of a non-persistent round trip and its CPU."""
    command = [sys.executable, str(PEERS / "ceiling_relay.py"), "--port", str(port)]
    return start_listener(command, port, "the ceiling relay")


def start_floor(port: int, file: Path) -> subprocess.Popen[bytes]:
    """``sync_floor.py``, syncing into ``file``: the floor of a producer waiting on each
    persistent receipt (no broker, one sync)."""
    floor = Path(__file__).with_name("sync_floor.py")
    command = [sys.executable, str(floor), "--port", str(port), "--file", str(file)]
    return start_listener(command, port, "the sync floor")


PERSISTENT = {  # name -> (producers, receipt every, receipts in flight, messages)
    "1 producer, receipt on every SEND": (1, 1, 1, 3000),
    "8 producers, each waiting on every receipt": (8, 1, 1, 8000),
    "receipt every 100th, 4 in flight": (1, 100, 4, 100_000),
}


def stompbench(port: str | int, *args: str, timeout: float = 900) -> dict[str, object]:
    """One run of the peers' load generator against ``port``: its JSON result line (or
    what it printed on error)."""
    command = [sys.executable, str(PEERS / "stompbench.py"), "--port", str(port), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    lines = done.stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else {"errors": [done.stderr[-300:]]}


def sync_rate(folder: Path, seconds: float = 2.0) -> float:
    """Syncs per second of 128 bytes written in place and fdatasync'ed (the log's way)."""
    probe = folder / "sync-probe"
    fd = os.open(probe, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.ftruncate(fd, 1 << 20)
        os.fsync(fd)
        done, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            os.pwrite(fd, b"x" * 128, (done * 128) % (1 << 20))
            os.fdatasync(fd)
            done += 1
        return done / (time.perf_counter() - started)
    finally:
        os.close(fd)
        probe.unlink()


def persistent(brokers: list[dict[str, str]], repeats: int, out: Path) -> str:
    """The persistent scenarios, interleaved over ``brokers``; a table of medians, with the
    first broker's rate over each other's and its server CPU per message."""
    runs: dict[tuple[str, str], list[dict[str, object]]] = {}
    with (out / "persistent.jsonl").open("a") as log:
        for _ in range(repeats):
            for scenario, (producers, every, window, count) in PERSISTENT.items():
                for broker in brokers:
                    result = stompbench(
                        broker["port"],
                        "--scenario",
                        "queue-p",
                        "--drain-after",
                        "--producers",
                        str(producers),
                        "--receipt-every",
                        str(every),
                        "--receipt-window",
                        str(window),
                        "--messages",
                        str(count),
                        "--size",
                        "128",
                        *broker["extra"].split(),
                    )
                    result["scenario_name"] = scenario
                    log.write(json.dumps(result) + "\n")
                    runs.setdefault((scenario, broker["label"]), []).append(result)
                    print(
                        f"{broker['label']:8} {scenario:45} fill {result.get('send_msgs_per_s')} "
                        f"drain {result.get('drain_msgs_per_s')} {result.get('errors') or ''}",
                        flush=True,
                    )

    def median(scenario: str, label: str, key: str) -> float | None:
        values = [r.get(key) for r in runs.get((scenario, label), [])]
        numbers = sorted(float(v) for v in values if isinstance(v, int | float))
        return numbers[len(numbers) // 2] if numbers else None

    labels = [b["label"] for b in brokers]
    lines = [
        "| scenario | phase | "
        + " | ".join(f"{label} msgs/s" for label in labels)
        + " | "
        + " | ".join(f"{labels[0]}/{label}" for label in labels[1:])
        + f" | {labels[0]} us CPU/msg |",
        "|---|---|" + "---|" * (2 * len(labels) - 1) + "---|",
    ]
    for scenario in PERSISTENT:
        for phase, key in (("fill", "send_msgs_per_s"), ("drain", "drain_msgs_per_s")):
            rates = [median(scenario, label, key) for label in labels]
            cpu = median(scenario, labels[0], "broker_cpu_s")
            messages = PERSISTENT[scenario][3]
            per_message = f"{cpu / messages * 1e6:.0f} (fill and drain)" if cpu else "-"
            lines.append(
                f"| {scenario} | {phase} | "
                + " | ".join(number(r) for r in rates)
                + " | "
                + " | ".join(ratio(rates[0], r) for r in rates[1:])
                + f" | {per_message if phase == 'fill' else ''} |"
            )
    return "\n".join(lines)


def compare(brokers: list[str], args: argparse.Namespace, out: str | Path) -> None:
    """Run the peers' ``compare.py`` over ``brokers`` (its NAME=HOST:PORT,... forms) with
    the scenarios, sizes, repeats and run length of ``args``."""
    command = [
        sys.executable,
        str(PEERS / "compare.py"),
        *brokers,
        "--scenarios",
        args.scenarios,
        "--sizes",
        args.sizes,
        "--repeats",
        str(args.repeats),
        "--target-seconds",
        str(args.target_seconds),
        "--out",
        str(out),
    ]
    print("$", " ".join(command), flush=True)
    subprocess.run(command, check=True)


def number(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def ratio(numerator: float | None, denominator: float | None) -> str:
    if not numerator or not denominator:
        return "-"
    return f"{numerator / denominator:.2f}"


def report(summary: list[dict[str, object]], rabbit: bool) -> str:
    """The ratio table, from compare.py's summary rows."""
    cells: dict[tuple[str, int], dict[str, dict[str, object]]] = {}
    for row in summary:
        cells.setdefault((str(row["scenario"]), int(row["size"])), {})[str(row["broker"])] = row  # type: ignore[call-overload]
    header = "| scenario | size | wiremq msgs/s | ActiveMQ msgs/s | wiremq/ActiveMQ |"
    rule = "|---|---|---|---|---|"
    if rabbit:
        header += " RabbitMQ msgs/s | wiremq/RabbitMQ |"
        rule += "---|---|"
    header += " wiremq us CPU/msg | relay us CPU/msg | CPU wiremq/relay |"
    rule += "---|---|---|"
    lines = [header, rule]
    for (scenario, size), rows in cells.items():
        ours, amq, rmq, relay = (rows.get(b, {}) for b in ("wiremq", "amq", "rabbit", "relay"))

        def rate(row: dict[str, object]) -> float | None:
            value = row.get("median_msgs_per_s")
            return float(value) if isinstance(value, int | float) else None

        def cpu_per_message(row: dict[str, object]) -> float | None:
            cpu, seconds, r = row.get("broker_cpu_s"), row.get("seconds"), rate(row)
            if not isinstance(cpu, int | float) or not isinstance(seconds, int | float) or not r:
                return None
            return cpu / (seconds * r) * 1e6

        if scenario == "latency":
            ours_p50, amq_p50 = ours.get("p50_us"), amq.get("p50_us")
            name = f"latency p50 us: wiremq {ours_p50}, ActiveMQ {amq_p50}"
            cells_text = (
                f"| {name} | {size} | - | - | {ratio(amq_p50, ours_p50)} (ActiveMQ's/ours) |"  # type: ignore[arg-type]
            )
            if rabbit:
                cells_text += " - | - |"
            cells_text += " - | - | - |"
            lines.append(cells_text)
            continue
        ours_cpu, relay_cpu = cpu_per_message(ours), cpu_per_message(relay)
        text = (
            f"| {scenario} | {size} | {number(rate(ours))} | {number(rate(amq))} | "
            f"{ratio(rate(ours), rate(amq))} |"
        )
        if rabbit:
            text += f" {number(rate(rmq))} | {ratio(rate(ours), rate(rmq))} |"
        text += f" {number(ours_cpu, 1)} | {number(relay_cpu, 1)} | {ratio(ours_cpu, relay_cpu)} |"
        lines.append(text)
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--scenarios", default="queue-np,topic-fanout,latency,client-ack")
    parser.add_argument("--sizes", default="128,4096")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--target-seconds", type=float, default=3.0)
    parser.add_argument("--rabbit", action="store_true", help="RabbitMQ too")
    parser.add_argument(
        "--persistent", action="store_true", help="the persistent scenarios (see above)"
    )
    parser.add_argument("--set", action="append", default=[], metavar="GROUP.NAME=VALUE")
    parser.add_argument("--out", default=f"/tmp/wiremq-peers-{time.strftime('%Y%m%d-%H%M%S')}")
    args = parser.parse_args()
    if not listening(ACTIVEMQ) or (args.rabbit and not listening(RABBITMQ)):
        print(
            f"ActiveMQ (and RabbitMQ) must run on loopback: run {PEERS / 'setup.sh'}",
            file=sys.stderr,
        )
        return 2
    wiremq = shutil.which("wiremq", path=str(Path(sys.executable).parent))
    assert wiremq is not None, "run with the project's .venv/bin/python"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.persistent:
        with ManagedServer(wiremq, args.set) as server:
            print(f"sync rate of {server.workdir}: {sync_rate(server.workdir):,.0f} syncs/s")
            brokers = [
                {
                    "label": "wiremq",
                    "port": str(server.port),
                    "extra": f"--broker-pid {server.pid}",
                },
                {"label": "amq", "port": "61613", "extra": ""},
            ]
            if args.rabbit:
                brokers.append(
                    {
                        "label": "rabbit",
                        "port": "61614",
                        "extra": "--login guest --passcode guest --vhost /",
                    }
                )
            table = persistent(brokers, args.repeats, out)
            print(f"sync rate after: {sync_rate(server.workdir):,.0f} syncs/s")
        print()
        print(table)
        print(f"\nevery run: {out}/persistent.jsonl")
        return 0
    relay_port = free_port("127.0.0.1")
    relay = start_relay(relay_port)
    try:
        with ManagedServer(wiremq, args.set) as server:
            brokers = [
                f"wiremq=127.0.0.1:{server.port},pid={server.pid}",
                "amq=127.0.0.1:61613",
                f"relay=127.0.0.1:{relay_port},pid={relay.pid},only={RELAY_SCENARIOS}",
            ]
            if args.rabbit:
                brokers.insert(2, "rabbit=127.0.0.1:61614,login=guest,passcode=guest,vhost=/")
            compare(brokers, args, args.out)
    finally:
        relay.kill()
        relay.wait()
    summary = json.loads((Path(args.out) / "summary.json").read_text())
    print()
    print(report(summary, args.rabbit))
    print(f"\nevery run: {args.out}/runs.jsonl, compare.py's table: {args.out}/summary.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
