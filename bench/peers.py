"""wiremq against its peers on this machine, in one interleaved run, as ratios.

Runs the peers' own load generator (``../shared/peers/compare.py``, which
interleaves brokers A B C A B C ... and takes medians of its repeats) against a
fresh ``wiremq serve``, ActiveMQ, RabbitMQ (where asked) and the bare Twisted
relay ``ceiling_relay.py``, then prints what the targets are stated in:

- throughput ratios wiremq / ActiveMQ (and / RabbitMQ) per scenario and size;
- round-trip p50 ratio, ActiveMQ's / wiremq's (above 1: wiremq is faster);
- server CPU per message, wiremq's over the relay's (the cost floor of a
  Twisted broker here), from the brokers' CPU time during the runs.

ActiveMQ and RabbitMQ must already run on loopback: ``../shared/peers/setup.sh``
installs and starts them (STOMP 127.0.0.1:61613 and :61614). Example:

    .venv/bin/python bench/peers.py --scenarios queue-np,topic-fanout,latency,client-ack
    .venv/bin/python bench/peers.py --scenarios queue-p,queue-p-r100 --sizes 128 --rabbit

Every figure it prints comes from compare.py's ``summary.json`` (kept, with
every run's JSON line, in the ``--out`` folder).
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from server_proc import ManagedServer, free_port

PEERS = Path(__file__).resolve().parents[2] / "shared" / "peers"
ACTIVEMQ = ("127.0.0.1", 61613)
RABBITMQ = ("127.0.0.1", 61614)
RELAY_SCENARIOS = "queue-np+topic-fanout+latency"  # all the relay speaks


def listening(address: tuple[str, int]) -> bool:
    try:
        socket.create_connection(address, timeout=1).close()
    except OSError:
        return False
    return True


def start_relay(port: int) -> subprocess.Popen[bytes]:
    relay = subprocess.Popen(
        [sys.executable, str(PEERS / "ceiling_relay.py"), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(100):
        if listening(("127.0.0.1", port)):
            return relay
        time.sleep(0.1)
    relay.kill()
    raise SystemExit("the ceiling relay did not start")


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
                args.out,
            ]
            print("$", " ".join(command), flush=True)
            subprocess.run(command, check=True)
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
