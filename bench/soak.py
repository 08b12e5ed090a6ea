"""wiremq soak (issue #9): clients that misbehave for minutes, then the bill.

One ``wiremq serve`` on a free port with a data folder of its own, and for
``--minutes`` a mix of real STOMP clients over TCP, each a thread opening
session after session (``soak_clients``): persistent and non-persistent
producers on four queues and a topic with three durable subscribers,
transacted producers (COMMIT, ABORT, or the connection closed with the
transaction open), consumers in auto, client and client-individual mode
(NACKs, ACKs inside committed or aborted transactions, deliveries held for
seconds, slow readers, readers that stall with a tiny receive buffer), every
session ending gracefully, with a FIN or with a RST while holding
unacknowledged messages; clients that send half a frame and hang up, and one
that sends half a CONNECT and then nothing. Optionally the server is stopped
(SIGTERM) or killed (SIGKILL) halfway and restarted on the same data.

Then every queue and durable subscription is drained, checked once more for
stragglers, and drained again after a restart (a message found only then was
stuck, lost to the clients until the restart); the ledger (``soak_ledger``) is
checked: nothing confirmed lost, nothing acknowledged delivered again, nothing
aborted or half-sent delivered, nothing delivered while an earlier delivery of it
was still held;
the server's memory (``soak_watch``) stayed under a limit and stopped growing,
its descriptors went back to where they were before the clients came, it
closed the silent connection, logged no error and exited cleanly.

    python bench/soak.py [--minutes 3] [--restart none|term|kill] [--seed N]
                         [--set GROUP.NAME=VALUE ...] [--json FILE]

Exits 1 if any check fails; the server's log is then kept and its path printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from memory import LOG_LINE, FlowLog
from server_proc import ManagedServer, server_cpu_seconds
from soak_clients import (
    Consumer,
    ConsumerStyle,
    Drain,
    HalfFrames,
    Producer,
    Silent,
    Soak,
    TransactedProducer,
    Worker,
)
from soak_ledger import Ledger, report
from soak_watch import Watch, descriptors, growth_mb
from stomp_wire import StompConnection

HOST = "127.0.0.1"
QUEUES = ("/queue/soak-0", "/queue/soak-1", "/queue/soak-2", "/queue/soak-3")
TOPIC = "/topic/soak"
DURABLES = ("D0", "D1", "D2")
# A queue that delivered nothing for a second gives its live buffer back to the store
# (default: a minute), so that path runs many times in a soak of minutes; issue #9's
# double delivery goes through it.
SOAK_SETTINGS = (
    "DestinationManager.qlbcleanuptimetolive=1",
    "DestinationManager.qlbcleanupinterval=0.5",
)
RESTART_GRACE = 5.0  # s after a restart during which clients may see any socket error


def workers(soak: Soak, seed: int, silent_wait: float) -> list[Worker]:
    """The mix of clients (see the module's docstring)."""
    auto, client, individual = "auto", "client", "client-individual"
    made: list[Worker] = [
        *(Producer(soak, f"p{i}", seed + i, persistent=True) for i in range(3)),
        Producer(soak, "np", seed + 3, persistent=False),
        *(TransactedProducer(soak, f"tx{i}", seed + 4 + i) for i in range(2)),
        Consumer(soak, "c-auto", seed + 6, ConsumerStyle(auto, stall=0.3)),
        Consumer(soak, "c-client", seed + 7, ConsumerStyle(client, hold=3)),
        Consumer(soak, "c-ind", seed + 8, ConsumerStyle(individual, 0.05, 2, transacted=0.3)),
        Consumer(soak, "c-slow", seed + 9, ConsumerStyle(individual, hold=1, slow=0.05)),
        Consumer(soak, "d0", seed + 10, ConsumerStyle(individual, nack=0.05, hold=1), "D0"),
        Consumer(soak, "d1", seed + 11, ConsumerStyle(client, hold=2), "D1"),
        Consumer(soak, "d2", seed + 12, ConsumerStyle(auto, stall=0.2), "D2"),
        Consumer(soak, "t", seed + 13, ConsumerStyle(auto), topic=True),
        HalfFrames(soak, "h", seed + 14),
        Silent(soak, "s", seed + 15, silent_wait),
    ]
    return made


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class Run:
    """What happened to the server, beside what the ledger holds."""

    load_seconds: float = 0.0
    drain_seconds: float = 0.0
    restart: str = "none"  # what the planned restart was
    restart_exit: int | None = None  # exit status of the planned stop (SIGTERM)
    died: str = ""  # the server ended when it should not have
    stuck: list[str] | None = None  # client threads that did not end
    baseline: Counter[str] | None = None
    end_fds: Counter[str] | None = None
    exit_code: int | None = None
    cpu_seconds: float | None = None
    load_window: tuple[int, float, float] = (0, 0.0, 0.0)  # pid, start, end of steady load


def register_durables(soak: Soak) -> None:
    """Each durable subscription exists before the first message, so every persistent
    topic message is owed to all of them."""
    for name in DURABLES:
        conn = StompConnection(soak.host, soak.port(), soak.timeout)
        conn.connect(f"soak-{name}".encode())
        conn.subscribe(
            TOPIC.encode(), b"client-individual", {b"activemq.subscriptionName": name.encode()}
        )
        conn.disconnect()


def load(args: argparse.Namespace, server: ManagedServer, soak: Soak, run: Run) -> None:
    """The clients for ``--minutes``, with the restart halfway if asked."""
    clients = workers(soak, args.seed, args.silent_wait)
    started = time.monotonic()
    window_start = started
    for client in clients:
        client.start()
    end = started + args.minutes * 60
    restart_at = started + args.minutes * 30 if args.restart != "none" else float("inf")
    while time.monotonic() < end:
        time.sleep(0.5)
        if time.monotonic() >= restart_at:
            restart_at = float("inf")
            soak.restarting.set()
            soak.ledger.restarted()
            if args.restart == "kill":
                server.kill()
            else:
                run.restart_exit = server.stop()
            server.start()
            window_start = time.monotonic()
            run.restart = f"{args.restart} at {window_start - started:.0f} s" + (
                f", exit status {run.restart_exit}" if args.restart == "term" else ""
            )
            print(f"    restarted: {run.restart}", flush=True)
            threading.Timer(RESTART_GRACE, soak.restarting.clear).start()
        elif not server.alive():
            run.died = f"the server exited ({server.proc and server.proc.returncode}) under load"
            break
    run.load_window = (server.pid, window_start + 10, time.monotonic())
    soak.stop.set()
    for client in clients:
        client.join(args.timeout + args.silent_wait)
    run.stuck = [c.name for c in clients if c.is_alive()]
    run.load_seconds = time.monotonic() - started


def drain(soak: Soak, phase: int, idle: float) -> None:
    """Every queue and durable subscription consumed to the end, in parallel."""
    soak.ledger.start_drain(phase)
    drains = [Drain(soak, f"drain{phase}-{q}", idle, None, q) for q in QUEUES]
    drains += [Drain(soak, f"drain{phase}-{d}", idle, d, None) for d in DURABLES]
    threads = [threading.Thread(target=d.drain, daemon=True) for d in drains]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def settled_fds(pid: int, baseline: Counter[str], wait: float) -> Counter[str]:
    """The server's descriptors once they are back to ``baseline``, or after ``wait`` s."""
    deadline = time.monotonic() + wait
    while True:
        now = descriptors(pid)
        if all(now[kind] <= baseline[kind] for kind in now) or time.monotonic() > deadline:
            return now
        time.sleep(0.2)


def shown(fds: Counter[str] | None) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted((fds or {}).items())) or "n/a"


def checks(
    args: argparse.Namespace, ledger: Ledger, run: Run, watch: Watch, log: FlowLog
) -> tuple[list[Check], list[str]]:
    """Every check, and the details of the failed ones."""
    broken = ledger.violations()
    confirmed = ledger.counts["confirmed"]
    found: list[Check] = []
    lost = broken.get("lost", [])
    back = sum(1 for story in lost if "(after the restart)" in story)
    found.append(
        Check(
            "lost",
            not lost,
            f"{len(lost)} of {confirmed} ({back} back only after a restart; "
            f"{ledger.unread} more excused as unread by auto consumers that hung up)",
        )
    )
    for rule in ("acked-returned", "cancelled-delivered", "held-twice", "unknown"):
        items = broken.get(rule, [])
        found.append(Check(rule, not items, f"{len(items)} messages"))
    found.append(
        Check("after-drain", "after-drain" not in broken, f"{len(broken.get('after-drain', []))}")
    )
    found.append(Check("client-errors", "client-error" not in broken, f"{len(ledger.errors)}"))
    if confirmed == 0:
        found.append(Check("load", False, "no message was confirmed: the soak tested nothing"))
    found.append(Check("server-alive", not run.died and not run.stuck, run.died or "yes"))
    if run.stuck:
        found.append(Check("clients-ended", False, f"still running: {', '.join(run.stuck)}"))
    peak = max((s.rss_mb for s in watch.samples), default=0.0)
    found.append(Check("rss-peak", peak <= args.rss_limit_mb, f"{peak:.0f} MB"))
    pid, start, end = run.load_window
    growth = growth_mb(watch.of(pid, start, end))
    found.append(Check("rss-growth", growth <= args.rss_growth_mb, f"{growth:+.1f} MB"))
    baseline, left = run.baseline or Counter(), run.end_fds or Counter()
    extra = {k: left[k] - baseline[k] for k in left if left[k] > baseline[k]}
    found.append(Check("fds-released", not extra and run.end_fds is not None, shown(left)))
    still_open = sum(v for k, v in ledger.counts.items() if k.startswith("silent: still open"))
    found.append(Check("connect-deadline", not still_open, f"{still_open} left open"))
    errors = [line for line in log.complaints if not _warning(line)]
    found.append(Check("server-log", not errors, f"{len(errors)} error lines"))
    clean = run.exit_code == 0 and run.restart_exit in (None, 0)
    found.append(Check("server-exit", clean, f"exit status {run.exit_code} ({run.restart})"))
    details = report(broken)
    if extra:
        details.append(f"  fds-released: more than before the clients came: {extra}")
    details += [f"  server-log: {line}" for line in errors[:10]]
    return found, details


def _warning(line: str) -> bool:
    match = LOG_LINE.match(line)
    return match is not None and match.group(1) == "warning"


def figures(ledger: Ledger, run: Run, watch: Watch, log: FlowLog) -> list[tuple[str, str]]:
    counts = ledger.counts
    seconds = max(run.load_seconds, 1e-9)
    sent = counts["sent persistent"] + counts["sent non-persistent"]
    deliveries = counts["first deliveries"] + counts["redeliveries"]
    first = watch.samples[0].rss_mb if watch.samples else 0.0
    peak = max((s.rss_mb for s in watch.samples), default=0.0)
    last = watch.samples[-1].rss_mb if watch.samples else 0.0
    peak_fds = max((sum(s.fds.values()) for s in watch.samples), default=0)
    pid, start, end = run.load_window
    sessions = Counter[str]()
    for key, n in ledger.sessions.items():
        sessions[key.split("/")[1]] += n
    warnings = Counter(
        m.group(2) for m in map(LOG_LINE.match, log.complaints) if m and m.group(1) == "warning"
    )
    return [
        ("load", f"{run.load_seconds:.0f} s, then drain and check {run.drain_seconds:.0f} s"),
        ("sessions", ", ".join(f"{k} {v}" for k, v in sorted(sessions.items()))),
        (
            "messages written",
            f"{sent} ({counts['sent persistent']} persistent), {sent / seconds:.0f}/s; "
            f"confirmed {counts['confirmed']}, aborted or half-sent {counts['cancelled']}",
        ),
        (
            "deliveries",
            f"{deliveries} ({counts['redeliveries']} redelivered), {deliveries / seconds:.0f}/s; "
            f"ACKs written {counts['ACKs written']}, receipted {counts['ACKs receipted']}, "
            f"NACKs {counts['NACKs']}",
        ),
        ("server rss", f"start {first:.0f} MB, peak {peak:.0f} MB, end {last:.0f} MB"),
        ("rss growth", f"{growth_mb(watch.of(pid, start, end)):+.1f} MB (last vs 2nd quarter)"),
        (
            "server fds",
            f"baseline {shown(run.baseline)}; peak {peak_fds}; end {shown(run.end_fds)}",
        ),
        ("server cpu", f"{run.cpu_seconds or 0:.0f} s"),
        ("silent", ", ".join(f"{k[8:]} {v}" for k, v in counts.items() if k.startswith("silent"))),
        ("restart", run.restart),
        ("log warnings", ", ".join(f"{k} {v}" for k, v in warnings.most_common()) or "none"),
    ]


def soak(args: argparse.Namespace, server: ManagedServer) -> tuple[Ledger, Run, Watch]:
    ledger = Ledger(durables=tuple(f"{TOPIC}#{d}" for d in DURABLES))
    clients = Soak(HOST, lambda: server.port, ledger, QUEUES, TOPIC, args.rate, args.timeout)
    run = Run()
    register_durables(clients)
    time.sleep(1)  # what the first commits opened stays open: part of the baseline
    run.baseline = descriptors(server.pid)
    with Watch(lambda: server.pid if server.alive() else None) as watch:
        print(f"    load for {args.minutes} min (restart: {args.restart})", flush=True)
        load(args, server, clients, run)
        if run.died:
            return ledger, run, watch
        began = time.monotonic()
        print("    draining", flush=True)
        drain(clients, 1, args.drain_idle)
        drain(clients, 2, args.drain_idle)
        run.end_fds = settled_fds(server.pid, run.baseline, args.fd_wait)
        run.drain_seconds = time.monotonic() - began
    run.cpu_seconds = server_cpu_seconds(psutil.Process(server.pid))
    run.exit_code = server.stop()
    server.start()  # what the drain did not find and a restart brings back was stuck
    drain(clients, 3, args.drain_idle)
    server.stop()
    return ledger, run, watch


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=3.0, help="load duration")
    parser.add_argument("--restart", choices=("none", "term", "kill"), default="none")
    parser.add_argument("--seed", type=int, default=9)
    parser.add_argument("--rate", type=float, default=25.0, help="msgs/s of each producer")
    parser.add_argument("--timeout", type=float, default=30.0, help="longest wait on the server")
    parser.add_argument("--drain-idle", type=float, default=3.0, help="s of quiet ending a drain")
    parser.add_argument("--silent-wait", type=float, default=15.0, help="s the silent client waits")
    parser.add_argument("--fd-wait", type=float, default=10.0, help="s for fds to go back")
    parser.add_argument("--rss-limit-mb", type=float, default=150.0)
    parser.add_argument("--rss-growth-mb", type=float, default=20.0)
    parser.add_argument("--set", action="append", default=[], metavar="GROUP.NAME=VALUE")
    parser.add_argument("--wiremq", default=str(Path(sys.executable).with_name("wiremq")))
    parser.add_argument("--json", type=Path, help="also write figures and checks here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    print(f"wiremq soak: {os.cpu_count()} cores, Python {sys.version.split()[0]}", flush=True)
    with ManagedServer(args.wiremq, [*SOAK_SETTINGS, *args.set]) as server:
        print(f"    {' '.join(server.command())}", flush=True)
        ledger, run, watch = soak(args, server)
        server.keep_workdir = not report_all(args, server, ledger, run, watch)
    return 0 if not server.keep_workdir else 1


def report_all(
    args: argparse.Namespace, server: ManagedServer, ledger: Ledger, run: Run, watch: Watch
) -> bool:
    """Print the figures and the checks (and write them as JSON); True if all passed."""
    log = FlowLog.read(server.log_path, 0)
    found, details = checks(args, ledger, run, watch, log)
    rows = figures(ledger, run, watch, log)
    width = max(len(name) for name, _ in rows)
    print("\nfigures")
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")
    print("\nchecks")
    for check in found:
        print(f"  {'PASS' if check.ok else 'FAIL'}  {check.name:<20} {check.detail}")
    passed = all(check.ok for check in found)
    if not passed:
        print("\nfailures\n" + "\n".join(details))
        print(f"\nserver log kept: {server.log_path}")
    if args.json:
        document: dict[str, Any] = {
            "figures": dict(rows),
            "checks": [check.__dict__ for check in found],
            "counts": dict(ledger.counts),
            "sessions": dict(ledger.sessions),
            "violations": ledger.violations(),
        }
        args.json.write_text(json.dumps(document, indent=2))
    return passed


if __name__ == "__main__":
    sys.exit(main())
