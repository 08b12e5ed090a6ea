"""Selectors against ActiveMQ and against no selector, in one interleaved run, as ratios.

Issue 11's speed targets: a non-persistent queue, 128-byte messages that all
carry ``region:EU`` and ``price:150``, every consumer subscribed with
``region = 'EU' AND price > 100`` (so every message matches), measured with
the peers' load generator (``../shared/peers/stompbench.py --header
--selector``):

- wiremq with the selector / wiremq without it: target >= 0.7;
- wiremq with the selector / ActiveMQ with the same selector: target >= 1.5.

The runs are interleaved (wiremq without, wiremq with, ActiveMQ with, ActiveMQ
without, and again), each sized by a probe to last about ``--target-seconds``,
medians of ``--repeats``; wiremq is a fresh ``wiremq serve`` whose CPU per
message is printed too. ``--consumers`` runs that many competing consumers
(all with the selector). ActiveMQ must run on 127.0.0.1:61613
(``../shared/peers/setup.sh``).

    .venv/bin/python bench/selector_peers.py
    .venv/bin/python bench/selector_peers.py --consumers 4 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from peers import ACTIVEMQ, PEERS, listening, number, ratio, stompbench
from server_proc import ManagedServer

SELECTOR = "region = 'EU' AND price > 100"
HEADERS = ["--header", "region:EU", "--header", "price:150"]
PROBE = 5000


def run(port: int, messages: int, consumers: int, extra: list[str]) -> dict[str, object]:
    """One stompbench run of the scenario (see the module docstring)."""
    return stompbench(
        port,
        "--scenario",
        "queue-np",
        "--size",
        "128",
        "--messages",
        str(messages),
        "--consumers",
        str(consumers),
        "--idle-timeout",
        "10",
        *HEADERS,
        *extra,
        timeout=600,
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--target-seconds", type=float, default=3.0)
    parser.add_argument("--consumers", type=int, default=1)
    parser.add_argument("--set", action="append", default=[], metavar="GROUP.NAME=VALUE")
    parser.add_argument("--out", default=f"/tmp/wiremq-selectors-{time.strftime('%Y%m%d-%H%M%S')}")
    args = parser.parse_args()
    if not listening(ACTIVEMQ):
        print(f"ActiveMQ must run on loopback: run {PEERS / 'setup.sh'}", file=sys.stderr)
        return 2
    wiremq = shutil.which("wiremq", path=str(Path(sys.executable).parent))
    assert wiremq is not None, "run with the project's .venv/bin/python"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    selector = ["--selector", SELECTOR]
    with ManagedServer(wiremq, args.set) as server:
        ours = ["--broker-pid", str(server.pid)]
        runs = {  # label -> (port, extra stompbench arguments)
            "wiremq, no selector": (server.port, ours),
            "wiremq, selector": (server.port, [*ours, *selector]),
            "ActiveMQ, selector": (ACTIVEMQ[1], selector),
            "ActiveMQ, no selector": (ACTIVEMQ[1], []),
        }
        sizes = {}
        for label, (port, extra) in runs.items():
            probe = run(port, PROBE, args.consumers, extra)
            rate = probe.get("msgs_per_s")
            if not isinstance(rate, int | float) or not probe.get("all_received"):
                print(f"{label}: the probe failed: {probe}", file=sys.stderr)
                return 1
            sizes[label] = max(PROBE, int(rate * args.target_seconds))
        results: dict[str, list[dict[str, object]]] = {label: [] for label in runs}
        with (out / "runs.jsonl").open("w") as log:
            for _ in range(args.repeats):
                for label, (port, extra) in runs.items():
                    result = run(port, sizes[label], args.consumers, extra)
                    result["label"] = label
                    log.write(json.dumps(result) + "\n")
                    results[label].append(result)
                    print(
                        f"{label:24} {result.get('msgs_per_s')} msgs/s "
                        f"{'' if result.get('all_received') else result.get('errors')}",
                        flush=True,
                    )

    def median(label: str, key: str) -> float | None:
        values = sorted(
            float(v) for r in results[label] if isinstance(v := r.get(key), int | float)
        )
        return values[len(values) // 2] if values else None

    def cpu_per_message(label: str) -> str:
        cpus = sorted(
            float(r["broker_cpu_s"]) / float(r["messages"])  # type: ignore[arg-type]
            for r in results[label]
            if isinstance(r.get("broker_cpu_s"), int | float)
        )
        return f"{cpus[len(cpus) // 2] * 1e6:.1f}" if cpus else "-"

    rates = {label: median(label, "msgs_per_s") for label in runs}
    print()
    print(f"{args.consumers} consumer(s), 128 B, selector {SELECTOR!r}, medians of {args.repeats}")
    print()
    print("| run | msgs/s | wiremq server us CPU/msg |")
    print("|---|---|---|")
    for label in runs:
        cpu = cpu_per_message(label) if label.startswith("wiremq") else ""
        print(f"| {label} | {number(rates[label])} | {cpu} |")
    print()
    print("| ratio | value | target |")
    print("|---|---|---|")
    with_ours, without = rates["wiremq, selector"], rates["wiremq, no selector"]
    print(f"| wiremq selector / wiremq no selector | {ratio(with_ours, without)} | >= 0.7 |")
    amq = rates["ActiveMQ, selector"]
    print(f"| wiremq selector / ActiveMQ selector | {ratio(with_ours, amq)} | >= 1.5 |")
    amq_plain = rates["ActiveMQ, no selector"]
    print(f"| ActiveMQ selector / ActiveMQ no selector | {ratio(amq, amq_plain)} | |")
    print(f"\nevery run: {out}/runs.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
