"""HA figures (issue 24): kill -9 failovers under load, and persistent throughput in HA mode.

``takeovers``: an HA pair (two ``wiremq serve`` processes, the default HA
parameters) on a throwaway PostgreSQL cluster with fsync and synchronous
commits on, under the load of the HA tests (two stomp.py producers each waiting
for every RECEIPT, one committing a transaction per message, two consumers
acknowledging each message with a RECEIPT, all failing over through a host
list); the active is killed with SIGKILL ``--failovers`` times, each time after
``--between`` more receipted messages, and started again as a standby. Per
failover: the time from the kill to the new active's STOMP port answering
(``port``), and to the first RECEIPT a producer got from it (``receipt``:
what a client feels, its reconnection included). Then the ledger's checks:
receipted messages lost, acknowledged ones delivered again, redeliveries not
flagged (all must be 0).

``throughput``: the persistent scenarios of ``bench/peers.py --persistent``
(1 producer waiting on every receipt, 8 such producers, a receipt every 100th
with 4 in flight; 128-byte messages, fill then drain), interleaved over a
wiremq in HA mode (a single node holding the lease, its stores and log on the
fsync-on cluster), a single-node wiremq (its local log) and ActiveMQ (KahaDB),
medians of ``--repeats``, ratios of HA over the others.

    .venv/bin/python bench/failover.py takeovers --failovers 50
    flock /tmp/wiremq-bench.lock .venv/bin/python bench/failover.py throughput --repeats 3

ActiveMQ must run on loopback for ``throughput`` (``../shared/peers/setup.sh``).
"""

from __future__ import annotations

import argparse
import logging
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' HA harness

from peers import ACTIVEMQ, listening, persistent  # noqa: E402
from server_proc import ManagedServer  # noqa: E402

from tests.ha.failover import Ledger, drained, load  # noqa: E402
from tests.ha.pair import Node, Pair, wait  # noqa: E402
from tests.stores.store_servers import PostgresServer  # noqa: E402


def takeovers(failovers: int, between: int) -> int:
    folder = Path(tempfile.mkdtemp(prefix="wiremq-failover-"))
    postgres = PostgresServer(durable=True)
    try:
        postgres.start()
        pair = Pair(folder, postgres.create_database("failover"))
        try:
            return _takeovers(pair, failovers, between)
        finally:
            pair.close()
    finally:
        postgres.remove()
        shutil.rmtree(folder, ignore_errors=True)


def _takeovers(pair: Pair, failovers: int, between: int) -> int:
    pair.start()
    ledger = Ledger()
    producers, consumers = load(pair.hosts, ledger)
    clients = [*producers, *consumers]
    port_times: list[float] = []
    receipt_times: list[float] = []
    active = pair.wait_active()
    try:
        for number in range(1, failovers + 1):
            goal = len(ledger.confirmed) + between
            wait(lambda goal=goal: len(ledger.confirmed) >= goal, 120, "load", *pair.nodes)
            before = len(ledger.confirmed)
            active.kill()
            killed = time.monotonic()
            (standby,) = [n for n in pair.nodes if n is not active]
            wait(standby.stomp_open, 60, "the takeover", *pair.nodes)
            port_times.append(time.monotonic() - killed)
            wait(lambda before=before: len(ledger.confirmed) > before, 60, "a receipt", standby)
            receipt_times.append(time.monotonic() - killed)
            print(
                f"failover {number:3}: port {port_times[-1]:.3f} s, "
                f"receipt {receipt_times[-1]:.3f} s",
                flush=True,
            )
            _restart(active)
            active = standby
        for producer in producers:
            producer.stop()
        settled = drained(ledger, 300)
    finally:
        for client in clients:
            client.stop()
    problems = ledger.problems()
    print()
    for name, times in (("port answers", port_times), ("first receipt", receipt_times)):
        print(
            f"kill -9 to {name:13}: p50 {statistics.median(times):.3f} s, "
            f"max {max(times):.3f} s, mean {statistics.fmean(times):.3f} s ({len(times)})"
        )
    print(
        f"{len(ledger.confirmed):,} messages receipted, {len(ledger.deliveries):,} deliveries, "
        f"{len(ledger.acked):,} acknowledgements receipted, all delivered: {settled}"
    )
    for name, found in problems.items():
        print(f"{name}: {len(found)}" + (f" (e.g. {found[:5]})" if found else ""))
    print(f"ERROR frames: {len(ledger.errors)}")
    return 0 if settled and not any(problems.values()) and not ledger.errors else 1


def _restart(node: Node) -> None:
    node.start()
    wait(lambda: node.role() == "standby", 60, "a standby again", node)


def throughput(repeats: int) -> int:
    if not listening(ACTIVEMQ):
        print("ActiveMQ must run on 127.0.0.1:61613 (../shared/peers/setup.sh)", file=sys.stderr)
        return 2
    wiremq = shutil.which("wiremq", path=str(Path(sys.executable).parent))
    assert wiremq is not None, "run with the project's .venv/bin/python"
    out = Path(tempfile.mkdtemp(prefix="wiremq-failover-throughput-"))
    postgres = PostgresServer(durable=True)
    try:
        postgres.start()
        uri = postgres.create_database("throughput")
        ha = [f"{group}.storageuri={uri}" for group in ("PersQueueFileStore", "TopicFileStore")]
        with (
            ManagedServer(wiremq, ["HA.enabled=true", *ha]) as node,
            ManagedServer(wiremq) as single,
        ):
            brokers = [
                {"label": "ha", "port": str(node.port), "extra": f"--broker-pid {node.pid}"},
                {"label": "single", "port": str(single.port), "extra": ""},
                {"label": "amq", "port": str(ACTIVEMQ[1]), "extra": ""},
            ]
            table = persistent(brokers, repeats, out)
    finally:
        postgres.remove()
    print()
    print(table)
    print(f"\nevery run: {out}/persistent.jsonl")
    return 0


def main() -> int:
    logging.getLogger("stomp.py").setLevel(logging.CRITICAL)  # every refused try, else
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    kill = commands.add_parser("takeovers", help="kill -9 failovers under load")
    kill.add_argument("--failovers", type=int, default=50)
    kill.add_argument("--between", type=int, default=100, help="receipts between two kills")
    rate = commands.add_parser("throughput", help="HA against single-node and ActiveMQ")
    rate.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.command == "takeovers":
        return takeovers(args.failovers, args.between)
    return throughput(args.repeats)


if __name__ == "__main__":
    sys.exit(main())
