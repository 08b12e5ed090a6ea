"""wiremq benchmark load generator.

Drives a wiremq server over real TCP from separate client processes (one per
producer/consumer) and prints, per scenario phase (a persistent queue is
filled, then drained), throughput, consumer-side latency percentiles, the
server's CPU time per message and its peak memory.  See bench/README.md.

    python bench/loadgen.py [--scenario NAME ...] [--messages N] [--host H --port P]

Without --host/--port it starts a ``wiremq serve`` of its own for each
scenario, on a free port with a fresh data directory, and stops it afterwards.
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
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any, Protocol

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
from server_proc import ManagedServer, PeriodicSampler, ServerStartError, server_cpu_seconds


@dataclass(frozen=True)
class Receipts:
    """How a producer paces itself: a receipt every ``every`` SENDs, ``outstanding`` in flight."""

    every: int
    outstanding: int


EACH_RECEIPT = Receipts(1, 1)  # wait for every SEND's receipt: one commit (fsync) each
WINDOWED = Receipts(100, 4)  # a receipt on every 100th SEND, 4 windows of 100 in flight
CUMULATIVE_ACK_EVERY = 100  # ack:client consumers ACK every 100th message (and the last)


@dataclass(frozen=True)
class Phase:
    """One timed step of a scenario: its producers and consumers are released together.

    A scenario's phases run in order against one server, so a phase can read
    what an earlier one stored: fill a queue with receipts, then drain it.
    """

    name: str
    destination: str
    scale: int = 1  # messages = scale x the scenario's message count
    producers: int = 1  # producer processes; with from_store, those that stored the messages
    consumers: int = 1  # 0: nothing is delivered, the messages stay stored for a later phase
    ack: str = "auto"  # live consumers'; consumers of stored messages use --drain-ack
    persistent: bool = False
    receipts: Receipts | None = None  # None: --window / --windows-ahead
    pace: float = 0.0  # msgs/s of all producers together; 0: as fast as receipts allow
    # No producer runs; consumers subscribe after the go signal and read what
    # earlier phases stored, so the time from subscribing to the last message is measured.
    from_store: bool = False
    durable: bool = False  # consumers are durable topic subscribers (client-id + name)
    # > 0: messages expire this many s after the last one is sent; that end must
    # be known in advance, so the send needs a pace.
    expire_after: float = 0.0
    roundtrip: bool = False

    def __post_init__(self) -> None:
        assert self.pace or not self.expire_after, f"{self.name}: expire_after needs a pace"

    @property
    def fanout(self) -> int:
        """Deliveries per sent message: every topic subscriber gets each one; 0 for a fill."""
        if self.destination.startswith("/topic/"):
            return self.consumers
        return min(self.consumers, 1)


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    body_size: int
    default_messages: int  # sized for roughly 5-15 s per phase on a 2-core machine
    phases: tuple[Phase, ...]
    settings: tuple[str, ...] = ()  # server parameters it needs, as GROUP.NAME=VALUE


def fill_and_drain(destination: str, producers: int, receipts: Receipts) -> tuple[Phase, ...]:
    """Store with receipts and no consumer, then read everything back.

    With a consumer keeping up, a broker may hand messages over before they
    reach the disk; filling first makes every message go through the store.
    """
    return (
        Phase(
            "fill",
            destination,
            producers=producers,
            consumers=0,
            persistent=True,
            receipts=receipts,
        ),
        Phase("drain", destination, producers=producers, from_store=True),
    )


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in [
        Scenario(
            "queue-128",
            "1 producer -> queue -> 1 consumer, 128 B, auto ack",
            128,
            1_500_000,
            (Phase("stream", "/queue/bench"),),
        ),
        Scenario(
            "queue-4k",
            "1 producer -> queue -> 1 consumer, 4096 B, auto ack",
            4096,
            1_000_000,
            (Phase("stream", "/queue/bench"),),
        ),
        Scenario(
            "topic-fanout-4",
            "1 publisher -> topic -> 4 subscribers, 128 B",
            128,
            1_000_000,
            (Phase("stream", "/topic/bench", consumers=4),),
        ),
        Scenario(
            "queue-ack-individual",
            "1 producer -> queue -> 1 consumer, ACK per message",
            128,
            1_000_000,
            (Phase("stream", "/queue/bench", ack="client-individual"),),
        ),
        Scenario(
            "roundtrip",
            "send one, wait for it to come back, repeat (latency)",
            128,
            200_000,
            (Phase("roundtrip", "/queue/rt", roundtrip=True),),
        ),
        Scenario(
            "persist-1p-each",
            "persistent: 1 producer waiting on every receipt fills a queue, then drain",
            128,
            20_000,
            fill_and_drain("/queue/p1", 1, EACH_RECEIPT),
        ),
        Scenario(
            "persist-8p-each",
            "persistent: 8 producers, each waiting on every receipt, fill a queue, then drain",
            128,
            60_000,
            fill_and_drain("/queue/p8", 8, EACH_RECEIPT),
        ),
        Scenario(
            "persist-window",
            "persistent: receipt every 100th SEND, 4 in flight, fill a queue, then drain",
            128,
            200_000,
            fill_and_drain("/queue/pw", 1, WINDOWED),
        ),
        Scenario(
            "durable-replay",
            "durable subscriber away while persistent messages are published, then replayed",
            128,
            100_000,
            (
                Phase("subscribe", "/topic/durable", scale=0, from_store=True, durable=True),
                Phase("publish", "/topic/durable", consumers=0, persistent=True, receipts=WINDOWED),
                Phase("replay", "/topic/durable", from_store=True, durable=True),
            ),
        ),
        Scenario(
            "cleanup-cost",
            "live queue-128 stream (15x the count) before and while N expired messages are "
            "cleaned up",
            128,
            100_000,
            (
                Phase("baseline", "/queue/bench", scale=15),
                Phase(
                    "fill",
                    "/queue/expiring",
                    consumers=0,
                    persistent=True,
                    receipts=WINDOWED,
                    pace=2_500,
                    expire_after=2.0,
                ),
                Phase("cleanup", "/queue/bench", scale=15),
                Phase("expired", "/queue/expiring", scale=0, from_store=True),
            ),
            settings=("PersQueueFileStore.cleanupinterval=0.5",),
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
    drain_ack: str  # how consumers of stored messages acknowledge


@dataclass
class Figures:
    scenario: str
    phase: str | None  # None for a scenario of a single phase
    messages: int
    deliveries: int
    elapsed_s: float = math.nan
    deliveries_per_s: float = math.nan
    latency_p50_us: float = math.nan
    latency_p95_us: float = math.nan
    latency_p99_us: float = math.nan
    server_cpu_s: float | None = None
    server_cpu_us_per_delivery: float | None = None
    server_peak_rss_mb: float | None = None
    busiest_client_cpu_pct: float = math.nan  # near 100: the load generator is the bottleneck
    expires_ms: int = 0  # when the last message sent with an expiry expires (ms since the epoch)
    ok: bool = True
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.scenario if self.phase is None else f"{self.scenario}/{self.phase}"

    def line(self) -> str:
        unit, each = (
            ("deliveries", "delivery") if self.deliveries != self.messages else ("msgs", "msg")
        )
        cpu = (
            f"{self.server_cpu_us_per_delivery:7.1f} us/{each}"
            if self.server_cpu_us_per_delivery is not None
            else "      n/a"
        )
        rss = (
            f"{self.server_peak_rss_mb:6.0f} MB"
            if self.server_peak_rss_mb is not None
            else "   n/a"
        )
        return (
            f"{self.label:<24} {unit + '=' + str(self.deliveries):<19} "
            f"elapsed={shown(self.elapsed_s, 7, 2)} s  {shown(self.deliveries_per_s, 9)} "
            f"{unit}/s  latency p50/p95/p99={shown(self.latency_p50_us, 8)} "
            f"/{shown(self.latency_p95_us, 8)} /{shown(self.latency_p99_us, 8)} us  "
            f"server cpu={cpu}  server peak rss={rss}  "
            f"busiest client cpu={shown(self.busiest_client_cpu_pct, 3)}%"
            + ("" if self.ok else "  FAILED")
        )


def shown(value: float, width: int, decimals: int = 0) -> str:
    """A figure for the report line; n/a where it was not measured (NaN)."""
    return f"{'n/a':>{width}}" if math.isnan(value) else f"{value:{width}.{decimals}f}"


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
    peak_rss_mb: float | None = None


class PeakSource(Protocol):
    """Something sampling the server's resident memory while the clients run."""

    @property
    def peak_mb(self) -> float | None: ...


class PeakRss(PeriodicSampler):
    """The server's largest resident memory while clients run, sampled every 50 ms.

    A drain or a replay can hold far more in memory midway than at its end.
    """

    def __init__(self, target: Target) -> None:
        super().__init__(0.05, "rss")
        self.target = target
        self.peak_mb: float | None = None

    def sample(self) -> None:
        rss = sample_rss_mb(self.target)
        if rss is not None and (self.peak_mb is None or rss > self.peak_mb):
            self.peak_mb = rss


def run_clients(
    clients: list[tuple[str, Work, Any]],
    consumers: int,
    target: Target,
    tuning: Tuning,
    rss: PeakSource | None = None,
) -> Run:
    """Start one process per client, release them together, collect their results.

    The server's CPU is sampled after every client has connected and subscribed
    and before the go signal, and again when all have reported, so connection
    set-up is not charged to the scenario; its memory is sampled throughout, by
    ``rss`` when the caller already samples it around this call (one sampler, not
    two at once), else by a ``PeakRss`` of its own.
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
        with PeakRss(target) if rss is None else nullcontext(rss) as memory:
            run.results = collect(shared.results, procs)
        cpu_after = sample_cpu(target)
        if cpu_before is not None and cpu_after is not None:
            run.cpu_s = cpu_after - cpu_before
        run.peak_rss_mb = memory.peak_mb
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


def run_phase(
    scenario: Scenario, phase: Phase, count: int, tag: bytes, target: Target, tuning: Tuning
) -> Figures:
    """Producer(s) and consumer(s) moving ``count`` x ``phase.scale`` messages."""
    messages = count * phase.scale
    label = None if len(scenario.phases) == 1 else phase.name
    if phase.roundtrip:
        return run_roundtrip_phase(scenario, phase, label, messages, target, tuning)
    destination = phase.destination.encode()
    ack = tuning.drain_ack if phase.from_store else phase.ack
    durable_id = b"bench-" + tag if phase.durable else None
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
                phase.producers,
                scenario.body_size,
                tag,
                ack.encode(),
                CUMULATIVE_ACK_EVERY if ack == "client" else 1,
                phase.from_store,
                durable_id,
                tuning.grace,
                tuning.stall_timeout,
            ),
        )
        for i in range(phase.consumers)
    ]
    receipts = phase.receipts or Receipts(tuning.window, tuning.windows_ahead)
    clients += [
        (
            f"producer-{p}",
            run_producer,
            ProducerPlan(
                target.host,
                target.port,
                destination,
                messages,
                p,
                phase.producers,
                scenario.body_size,
                tag,
                phase.persistent,
                phase.pace / phase.producers,
                phase.expire_after,
                tuning.batch,
                receipts.every,
                receipts.outstanding,
                tuning.max_backlog,
                phase.fanout,
                tuning.stall_timeout,
            ),
        )
        for p in range(0 if phase.from_store else phase.producers)
    ]
    run = run_clients(clients, phase.consumers, target, tuning)
    consumers = [r for r in run.results if r.name.startswith("consumer")]
    for r in consumers:
        if r.error is None and r.received != messages:
            r.problems.append(f"received {r.received} of {messages} messages")
    # Stored messages waited in the store on purpose: their send-to-receive time is no latency.
    live = [] if phase.from_store else consumers
    return figures(
        scenario.name,
        label,
        messages,
        messages * max(phase.fanout, 1),
        run,
        consumers or run.results,
        live,
    )


def run_roundtrip_phase(
    scenario: Scenario,
    phase: Phase,
    label: str | None,
    iterations: int,
    target: Target,
    tuning: Tuning,
) -> Figures:
    plan = RoundtripPlan(
        target.host,
        target.port,
        phase.destination.encode(),
        iterations,
        scenario.body_size,
        secrets.token_hex(4).encode(),
        tuning.stall_timeout,
    )
    run = run_clients([("roundtrip", run_roundtrip, plan)], 0, target, tuning)
    return figures(scenario.name, label, iterations, iterations, run, run.results, run.results)


def figures(
    scenario: str,
    phase: str | None,
    messages: int,
    deliveries: int,
    run: Run,
    receivers: list[ClientResult],
    live: list[ClientResult],
) -> Figures:
    """Turn client results into figures; elapsed runs from the go signal to the last delivery.

    ``receivers`` finish the phase (the producers, for a fill with no consumer);
    latencies come from the ``live`` ones.
    """
    fig = Figures(
        scenario,
        phase,
        messages,
        deliveries,
        server_cpu_s=run.cpu_s,
        server_peak_rss_mb=run.peak_rss_mb,
        expires_ms=max(r.expires_ms for r in run.results),
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
    if not deliveries:  # a phase that checks that nothing arrives: no rates
        return fig
    fig.deliveries_per_s = deliveries / fig.elapsed_s
    fig.busiest_client_cpu_pct = max(r.cpu_s for r in run.results) / fig.elapsed_s * 100
    latencies = array("q")
    for r in live:
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
        )
        + "\n\nEach scenario runs against a fresh server of its own unless --host is given.",
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
        help="messages per scenario (round trips for roundtrip; some phases use a multiple); "
        "default: per scenario, sized for ~5-15 s per phase on 2 cores",
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
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="GROUP.NAME=VALUE",
        help="server parameter for every server the load generator starts (repeatable), "
        "e.g. P2PStore.maxdelay=2",
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
        "--drain-ack",
        choices=["client", "client-individual"],
        default="client",
        help="how consumers of stored messages (drain, replay) acknowledge: client = a "
        f"cumulative ACK every {CUMULATIVE_ACK_EVERY} messages, client-individual = an ACK "
        "per message (default: %(default)s)",
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
    if args.set and args.host is not None:
        parser.error("--set is for servers the load generator starts, not with --host/--port")
    if args.messages is not None and args.messages < 1:
        parser.error("--messages must be at least 1")
    if min(args.batch, args.window, args.windows_ahead, args.max_backlog) < 1:
        parser.error("--batch, --window, --windows-ahead and --max-backlog must be >= 1")
    return args


def run_all(args: argparse.Namespace, target: Target | None, tuning: Tuning) -> list[Figures]:
    """Run the chosen scenarios in order, each on a fresh server unless ``target`` is given."""
    results: list[Figures] = []
    for name in args.scenario or list(SCENARIOS):
        scenario = SCENARIOS[name]
        assert scenario.body_size >= PREFIX_LEN
        count = args.messages or scenario.default_messages
        if target is None:
            results += run_on_own_server(scenario, count, args, tuning)
            continue
        if scenario.settings:
            print(
                f"warning: {name} expects the server to run with "
                f"{', '.join(scenario.settings)}; its figures assume so",
                flush=True,
            )
        results += run_scenario(scenario, count, target, None, tuning)
    return results


def run_scenario(
    scenario: Scenario, count: int, target: Target, server: ManagedServer | None, tuning: Tuning
) -> list[Figures]:
    """Run the phases in order; a failed phase ends the scenario, as later ones build on it."""
    tag = secrets.token_hex(4).encode()  # shared by the phases: a drain checks the fill's messages
    results: list[Figures] = []
    expires_ms = 0
    for phase in scenario.phases:
        # What earlier phases sent with an expiry expires first: the next phase then runs
        # while the cleanup removes it, and a consumer cannot get one still valid.
        time.sleep(max(0.0, expires_ms / 1000 - time.time()))
        fig = run_phase(scenario, phase, count, tag, target, tuning)
        expires_ms = max(expires_ms, fig.expires_ms)
        if server is not None and not server.alive():
            fig.problems.append(
                f"server died (exit code {server.stop()}); log {server.log_path}:\n"
                f"{server.log_tail()}"
            )
            fig.ok = False
        results.append(fig)
        print(fig.line(), flush=True)
        for problem in fig.problems:
            print(f"    problem: {problem}", flush=True)
        for warning in fig.warnings:
            print(f"    warning: {warning}", flush=True)
        if not fig.ok:
            break
    return results


def json_safe(value: Any) -> Any:
    """NaN is not JSON: figures that could not be measured become null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value


def run_on_own_server(
    scenario: Scenario, count: int, args: argparse.Namespace, tuning: Tuning
) -> list[Figures]:
    """Run a scenario against a server started for it, with empty stores, then stop it."""
    with ManagedServer(args.wiremq, [*scenario.settings, *args.set]) as server:
        print(
            f"server: {' '.join(server.command())} (pid {server.pid}, log {server.log_path})",
            flush=True,
        )
        target = Target(server.host, server.port, psutil.Process(server.pid))
        results = run_scenario(scenario, count, target, server, tuning)
        server.keep_workdir = server.keep_workdir or not all(f.ok for f in results)
    code = server.proc.returncode if server.proc else None
    if all(f.ok for f in results) and code not in (0, -signal.SIGTERM):
        print(f"warning: server exited with code {code} after SIGTERM; log {server.log_path}")
    return results


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
        drain_ack=args.drain_ack,
    )
    machine = machine_info()
    print(
        f"wiremq loadgen: {machine['logical_cores']} logical / {machine['physical_cores']} "
        f"physical cores, {machine['python']}, {machine['platform']}",
        flush=True,
    )
    target = None
    if args.host is not None:
        process = psutil.Process(args.server_pid) if args.server_pid else None
        target = Target(args.host, args.port, process)
        print(
            f"server: {args.host}:{args.port}"
            + (f" (pid {args.server_pid})" if process else " (pid unknown: no CPU figures)")
        )
    try:
        results = run_all(args, target, tuning)
    except ServerStartError as exc:
        print(f"error: could not start the server: {exc}", file=sys.stderr)
        return 2
    if args.json:
        report = {
            "machine": machine,
            "server": "started per scenario" if target is None else f"{args.host}:{args.port}",
            "scenarios": [asdict(f) for f in results],
        }
        args.json.write_text(json.dumps(json_safe(report), indent=2, allow_nan=False) + "\n")
    failures = [f.label for f in results if not f.ok]
    if failures:
        print(
            f"FAILED: {', '.join(failures)} (messages lost, duplicated, reordered, the server "
            "died or a client error; see the problem lines above)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
