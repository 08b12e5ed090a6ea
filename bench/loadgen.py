"""wiremq benchmark load generator.

Drives a wiremq server over real TCP from separate client processes (one per
producer/consumer) and prints, per scenario, throughput, consumer-side latency
percentiles and the server's CPU time per message.  See bench/README.md.

    python bench/loadgen.py [--scenario NAME ...] [--messages N] [--host H --port P]

Without --host/--port it starts its own ``wiremq serve`` on a free port with a
fresh data directory and stops it at the end.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import platform
import queue
import secrets
import signal
import sys
import threading
import time
from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

import psutil
from clients import (
    PREFIX_LEN,
    ClientResult,
    ConsumerPlan,
    ProducerPlan,
    RoundtripPlan,
    Shared,
    client_main,
    run_consumer,
    run_producer,
    run_roundtrip,
)
from server_proc import ManagedServer, ServerStartError, server_cpu_seconds


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    destination: str
    body_size: int
    default_messages: int  # sized for roughly 5-15 s on a 2-core machine
    subscribers: int = 1
    ack: str = "auto"
    roundtrip: bool = False

    @property
    def fanout(self) -> int:
        """Deliveries per sent message: every topic subscriber gets each one."""
        return self.subscribers if self.destination.startswith("/topic/") else 1


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in [
        Scenario(
            "queue-128",
            "1 producer -> queue -> 1 consumer, 128 B, auto ack",
            "/queue/bench",
            128,
            1_500_000,
        ),
        Scenario(
            "queue-4k",
            "1 producer -> queue -> 1 consumer, 4096 B, auto ack",
            "/queue/bench",
            4096,
            1_000_000,
        ),
        Scenario(
            "topic-fanout-4",
            "1 publisher -> topic -> 4 subscribers, 128 B",
            "/topic/bench",
            128,
            1_000_000,
            subscribers=4,
        ),
        Scenario(
            "queue-ack-individual",
            "1 producer -> queue -> 1 consumer, ACK per message",
            "/queue/bench",
            128,
            1_000_000,
            ack="client-individual",
        ),
        Scenario(
            "roundtrip",
            "send one, wait for it to come back, repeat (latency)",
            "/queue/rt",
            128,
            200_000,
            roundtrip=True,
        ),
    ]
}


@dataclass(frozen=True)
class Target:
    """Where the server listens and, when known, its process for CPU figures."""

    host: str
    port: int
    process: psutil.Process | None


@dataclass(frozen=True)
class Tuning:
    batch: int
    window: int
    windows_ahead: int
    max_backlog: int
    stall_timeout: float
    setup_timeout: float
    grace: float


@dataclass
class Figures:
    scenario: str
    messages: int
    deliveries: int
    elapsed_s: float = math.nan
    deliveries_per_s: float = math.nan
    latency_p50_us: float = math.nan
    latency_p95_us: float = math.nan
    latency_p99_us: float = math.nan
    server_cpu_s: float | None = None
    server_cpu_us_per_delivery: float | None = None
    server_rss_mb: float | None = None
    busiest_client_cpu_pct: float = math.nan  # near 100: the load generator is the bottleneck
    ok: bool = True
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def line(self) -> str:
        unit, each = (
            ("deliveries", "delivery") if self.deliveries != self.messages else ("msgs", "msg")
        )
        cpu = (
            f"{self.server_cpu_us_per_delivery:7.1f} us/{each}"
            if self.server_cpu_us_per_delivery is not None
            else "      n/a"
        )
        rss = f"{self.server_rss_mb:6.0f} MB" if self.server_rss_mb is not None else "   n/a"
        return (
            f"{self.scenario:<21} {unit + '=' + str(self.deliveries):<19} "
            f"elapsed={self.elapsed_s:7.2f} s  {self.deliveries_per_s:9.0f} {unit}/s  "
            f"latency p50/p95/p99={self.latency_p50_us:8.0f} /{self.latency_p95_us:8.0f} "
            f"/{self.latency_p99_us:8.0f} us  server cpu={cpu}  server rss={rss}  "
            f"busiest client cpu={self.busiest_client_cpu_pct:3.0f}%"
            + ("" if self.ok else "  FAILED")
        )


def percentile(sorted_values: Sequence[int], pct: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(pct / 100 * len(sorted_values)))
    return float(sorted_values[rank - 1])


Work = Callable[[Any, Shared, ClientResult], None]


@dataclass
class Run:
    """What one set of client processes produced."""

    results: list[ClientResult]
    cpu_s: float | None = None
    rss_mb: float | None = None


def run_clients(
    clients: list[tuple[str, Work, Any]], consumers: int, target: Target, tuning: Tuning
) -> Run:
    """Start one process per client, release them together, collect their results.

    The server's CPU is sampled after every client has connected and subscribed
    and before the go signal, and again when all have reported, so connection
    set-up is not charged to the scenario.
    """
    ctx = mp.get_context("spawn")
    shared = Shared(
        ready=ctx.Barrier(len(clients) + 1),
        go=ctx.Event(),
        results=ctx.Queue(),
        progress=ctx.Array("q", max(consumers, 1), lock=False),
        setup_timeout=tuning.setup_timeout,
    )
    procs = {
        name: ctx.Process(
            target=client_main, args=(work, plan, shared, name), name=name, daemon=True
        )
        for name, work, plan in clients
    }
    for proc in procs.values():
        proc.start()
    run = Run([])
    try:
        cpu_before = None
        try:
            shared.ready.wait(tuning.setup_timeout)
        except threading.BrokenBarrierError:
            pass  # a client failed while setting up; its result says why
        else:
            cpu_before = sample_cpu(target)
            shared.go.set()
        run.results = collect(shared.results, procs)
        cpu_after = sample_cpu(target)
        if cpu_before is not None and cpu_after is not None:
            run.cpu_s = cpu_after - cpu_before
        run.rss_mb = sample_rss_mb(target)
    finally:
        for proc in procs.values():
            proc.join(5)
            if proc.is_alive():
                proc.terminate()
                proc.join()
    return run


def sample_cpu(target: Target) -> float | None:
    if target.process is None:
        return None
    try:
        return server_cpu_seconds(target.process)
    except psutil.Error:  # the server is gone; the scenario reports why
        return None


def sample_rss_mb(target: Target) -> float | None:
    if target.process is None:
        return None
    try:
        if target.process.status() == psutil.STATUS_ZOMBIE:
            return None
        return float(target.process.memory_info().rss) / 2**20
    except psutil.Error:
        return None


def collect(results: Queue[ClientResult], procs: Mapping[str, BaseProcess]) -> list[ClientResult]:
    """Wait for every client's result; a client that died silently gets an error result.

    There is no overall deadline: each client bounds its own waits with the
    stall timeout, so a slow-but-progressing run is never cut short.
    """
    got: dict[str, ClientResult] = {}
    quiet_since: float | None = None
    while len(got) < len(procs):
        try:
            result = results.get(timeout=0.5)
            got[result.name] = result
            quiet_since = None
            continue
        except queue.Empty:
            pass
        missing = [name for name in procs if name not in got]
        if all(procs[name].exitcode is not None for name in missing):
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since > 2:
                for name in missing:
                    got[name] = ClientResult(
                        name,
                        error=f"process exited with code {procs[name].exitcode} without reporting",
                    )
    return [got[name] for name in procs]


def run_stream(scenario: Scenario, messages: int, target: Target, tuning: Tuning) -> Figures:
    """Producer(s) and consumer(s) pushing ``messages`` through one destination."""
    tag = secrets.token_hex(4).encode()
    destination = scenario.destination.encode()
    clients: list[tuple[str, Work, Any]] = [
        (
            f"consumer-{i}",
            run_consumer,
            ConsumerPlan(
                target.host,
                target.port,
                destination,
                i,
                messages,
                scenario.body_size,
                tag,
                scenario.ack.encode(),
                tuning.grace,
                tuning.stall_timeout,
            ),
        )
        for i in range(scenario.subscribers)
    ]
    clients.append(
        (
            "producer",
            run_producer,
            ProducerPlan(
                target.host,
                target.port,
                destination,
                messages,
                scenario.body_size,
                tag,
                tuning.batch,
                tuning.window,
                tuning.windows_ahead,
                tuning.max_backlog,
                scenario.fanout,
                tuning.stall_timeout,
            ),
        )
    )
    run = run_clients(clients, scenario.subscribers, target, tuning)
    consumers = [r for r in run.results if r.name.startswith("consumer")]
    for r in consumers:
        if r.error is None and r.received != messages:
            r.problems.append(f"received {r.received} of {messages} messages")
    return figures(scenario, messages, messages * scenario.fanout, run, consumers)


def run_roundtrip_scenario(
    scenario: Scenario, iterations: int, target: Target, tuning: Tuning
) -> Figures:
    plan = RoundtripPlan(
        target.host,
        target.port,
        scenario.destination.encode(),
        iterations,
        scenario.body_size,
        secrets.token_hex(4).encode(),
        tuning.stall_timeout,
    )
    run = run_clients([("roundtrip", run_roundtrip, plan)], 0, target, tuning)
    return figures(scenario, iterations, iterations, run, run.results)


def figures(
    scenario: Scenario, messages: int, deliveries: int, run: Run, receivers: list[ClientResult]
) -> Figures:
    """Turn client results into figures; elapsed runs from the go signal to the last delivery."""
    fig = Figures(
        scenario.name, messages, deliveries, server_cpu_s=run.cpu_s, server_rss_mb=run.rss_mb
    )
    for r in run.results:
        if r.error is not None:
            fig.problems.append(f"{r.name}: {r.error}")
        fig.problems += [f"{r.name}: {p}" for p in r.problems]
        fig.warnings += [f"{r.name}: {w}" for w in r.warnings]
    fig.ok = not fig.problems
    if not fig.ok:
        return fig
    started = min(r.started_ns for r in run.results)
    finished = max(r.finished_ns for r in receivers)
    fig.elapsed_s = (finished - started) / 1e9
    fig.deliveries_per_s = deliveries / fig.elapsed_s
    fig.busiest_client_cpu_pct = max(r.cpu_s for r in run.results) / fig.elapsed_s * 100
    latencies = array("q")
    for r in receivers:
        latencies.frombytes(r.latencies_ns)
    ordered = sorted(latencies)
    fig.latency_p50_us = percentile(ordered, 50) / 1000
    fig.latency_p95_us = percentile(ordered, 95) / 1000
    fig.latency_p99_us = percentile(ordered, 99) / 1000
    if run.cpu_s is not None:
        fig.server_cpu_us_per_delivery = run.cpu_s * 1e6 / deliveries
    return fig


def machine_info() -> dict[str, Any]:
    return {
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="wiremq STOMP load generator (see bench/README.md)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="scenarios (default message count):\n"
        + "\n".join(
            f"  {s.name:<21} {s.summary} ({s.default_messages:,})" for s in SCENARIOS.values()
        ),
    )
    parser.add_argument(
        "--scenario",
        action="extend",
        nargs="+",
        choices=list(SCENARIOS),
        metavar="NAME",
        help=f"scenarios to run (default: all): {', '.join(SCENARIOS)}",
    )
    parser.add_argument(
        "--messages",
        type=int,
        help="messages per scenario (round trips for roundtrip); "
        "default: per scenario, sized for ~5-15 s on 2 cores",
    )
    parser.add_argument("--host", help="use a running server instead of starting one")
    parser.add_argument("--port", type=int)
    parser.add_argument(
        "--server-pid", type=int, help="with --host/--port: the server's pid, for CPU figures"
    )
    parser.add_argument(
        "--wiremq",
        default=str(Path(sys.executable).parent / "wiremq"),
        help="wiremq executable to start (default: next to this python)",
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write figures as JSON")
    parser.add_argument("--batch", type=int, default=200, help="SEND frames per write")
    parser.add_argument("--window", type=int, default=1000, help="messages per receipt window")
    parser.add_argument(
        "--windows-ahead",
        type=int,
        default=4,
        help="windows the producer may send beyond the last RECEIPT",
    )
    parser.add_argument(
        "--max-backlog",
        type=int,
        default=10_000,
        help="messages the producer may be ahead of the slowest consumer",
    )
    parser.add_argument(
        "--stall-timeout",
        type=float,
        default=30.0,
        help="seconds without progress before a client gives up",
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=0.5,
        help="seconds consumers keep listening for duplicates at the end",
    )
    args = parser.parse_args(argv)
    if (args.host is None) != (args.port is None):
        parser.error("--host and --port go together")
    if args.server_pid is not None and args.host is None:
        parser.error("--server-pid only makes sense with --host/--port")
    if args.messages is not None and args.messages < 1:
        parser.error("--messages must be at least 1")
    if min(args.batch, args.window, args.windows_ahead, args.max_backlog) < 1:
        parser.error("--batch, --window, --windows-ahead and --max-backlog must be >= 1")
    return args


def run_all(
    args: argparse.Namespace, target: Target, server: ManagedServer | None, tuning: Tuning
) -> tuple[list[Figures], bool]:
    """Run the chosen scenarios in order; the flag is False if the server died early."""
    results: list[Figures] = []
    for name in args.scenario or list(SCENARIOS):
        scenario = SCENARIOS[name]
        assert scenario.body_size >= PREFIX_LEN
        count = args.messages or scenario.default_messages
        runner = run_roundtrip_scenario if scenario.roundtrip else run_stream
        fig = runner(scenario, count, target, tuning)
        results.append(fig)
        print(fig.line(), flush=True)
        for problem in fig.problems:
            print(f"    problem: {problem}", flush=True)
        for warning in fig.warnings:
            print(f"    warning: {warning}", flush=True)
        if server is not None and not server.alive():
            print(
                f"server died (exit code {server.stop()}); log {server.log_path}:\n"
                f"{server.log_tail()}",
                flush=True,
            )
            server.keep_workdir = True
            return results, False
    return results, True


def json_safe(value: Any) -> Any:
    """NaN is not JSON: figures that could not be measured become null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value


def run_own_server(args: argparse.Namespace, tuning: Tuning) -> tuple[Target, list[Figures], bool]:
    """Run the scenarios against a server started for this run, then stop it."""
    with ManagedServer(args.wiremq) as server:
        print(
            f"server: {' '.join(server.command())} (pid {server.pid}, log {server.log_path})",
            flush=True,
        )
        target = Target(server.host, server.port, psutil.Process(server.pid))
        results, complete = run_all(args, target, server, tuning)
        server.keep_workdir = server.keep_workdir or not all(f.ok for f in results)
    code = server.proc.returncode if server.proc else None
    if complete and code not in (0, -signal.SIGTERM):
        print(f"warning: server exited with code {code} after SIGTERM; log {server.log_path}")
    return target, results, complete


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tuning = Tuning(
        args.batch,
        args.window,
        args.windows_ahead,
        args.max_backlog,
        args.stall_timeout,
        setup_timeout=max(30.0, args.stall_timeout),
        grace=args.grace,
    )
    machine = machine_info()
    print(
        f"wiremq loadgen: {machine['logical_cores']} logical / {machine['physical_cores']} "
        f"physical cores, {machine['python']}, {machine['platform']}",
        flush=True,
    )
    if args.host is None:
        try:
            target, results, complete = run_own_server(args, tuning)
        except ServerStartError as exc:
            print(f"error: could not start the server: {exc}", file=sys.stderr)
            return 2
    else:
        process = psutil.Process(args.server_pid) if args.server_pid else None
        target = Target(args.host, args.port, process)
        print(
            f"server: {args.host}:{args.port}"
            + (f" (pid {args.server_pid})" if process else " (pid unknown: no CPU figures)")
        )
        results, complete = run_all(args, target, None, tuning)
    if args.json:
        report = {
            "machine": machine,
            "server": {"host": target.host, "port": target.port},
            "complete": complete,
            "scenarios": [asdict(f) for f in results],
        }
        args.json.write_text(json.dumps(json_safe(report), indent=2, allow_nan=False) + "\n")
    failures = [f.scenario for f in results if not f.ok]
    if not complete:
        print("FAILED: the server died; remaining scenarios were not run", file=sys.stderr)
        return 1
    if failures:
        print(
            f"FAILED: {', '.join(failures)} (messages lost, duplicated, reordered or a "
            "client error; see the problem lines above)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
