"""wiremq memory benchmark: does the server stay within its memory whatever clients do?

Issue 4's "Memory" section, as three scenarios, each against a fresh server of
its own (see bench/README.md, "Memory benchmark"):

- ``queue-flood``: with the default config, a producer floods 4 KiB
  non-persistent messages into one queue whose consumer reads at 1/10 of the
  producer's unthrottled rate; the VolQueueStore watermarks must stop and
  resume the producer, the server's RSS must stay under 150 MB, and every
  message must arrive exactly once, in order.
- ``topic-block``: a publisher and 8 subscriber processes on one topic, one of
  which stops reading for a while; under the default ``block`` policy the
  publisher is stopped at the topic live buffer's watermarks and resumes when
  the subscriber reads again, and every subscriber gets every message in order.
- ``topic-discard``: the same with ``slowsubscriberpolicy="discard-oldest"``:
  the seven others get every message at full speed, and the slow one sees
  ``discarded:N`` headers that account for exactly the messages it missed.

    python bench/memory.py [--scenario NAME ...] [--gigabytes G] [--json FILE]

The machinery (server start/stop, raw-socket STOMP, one process per client,
barrier and go signal) is the load generator's: ``server_proc``,
``stomp_wire``, ``clients`` and ``loadgen``.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import queue
import re
import secrets
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from ctypes import Array, c_longlong
from dataclasses import asdict, dataclass, field
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

import psutil
from clients import (
    PREFIX_LEN,
    SEQ_WIDTH,
    TAG_END,
    ClientResult,
    Shared,
    _finish,
    _note_stale,
    _start,
)
from loadgen import Target, Tuning, json_safe, machine_info, run_clients, sample_rss_mb
from server_proc import ManagedServer, PeriodicSampler, ServerStartError
from stomp_wire import Frame, ProtocolError, ServerError, StompConnection, describe

GIB = 2**30
MB = 2**20
RSS_LIMIT_MB = 150.0  # issue 4: peak server RSS stays under 150 MB
SAMPLE_INTERVAL = 0.1  # s between two samples of the server's RSS and the clients' counters
WAIT_MIN = 0.02  # s: a sendall() that took this long waited for the server to read again
SENT, TOTAL, FIRST_RECEIVER = 0, 1, 2  # slots of the shared counters
# topic-discard's publisher pace (msgs/s), about half of what 8 subscribers of 4 KiB messages
# take on 2 cores: unpaced, the subscribers that keep up share the CPU with the publisher and
# the slow one catching up, and now and then fall behind by more than an egress queue.
DISCARD_PUBLISH_RATE = 12_000
QUEUE = b"/queue/memory"
TOPIC = b"/topic/memory"
DISCARD_CONFIG = (
    "<wiremq>\n"
    f'  <Destination name="{TOPIC.decode()}" slowsubscriberpolicy="discard-oldest"/>\n'
    "</wiremq>\n"
)


# -- the server -----------------------------------------------------------------------------


class ConfiguredServer(ManagedServer):
    """A ``ManagedServer`` that also reads a config.xml (written into its work directory)."""

    def __init__(self, executable: str, config_xml: str | None, settings: Sequence[str]) -> None:
        super().__init__(executable, settings)
        self.config_path: Path | None = None
        if config_xml is not None:
            self.config_path = self.workdir / "config.xml"
            self.config_path.write_text(config_xml)

    def command(self) -> list[str]:
        command = super().command()
        if self.config_path is not None:
            command += ["--config", str(self.config_path)]
        return command


LOG_LINE = re.compile(r"^\S+ \[(\w+)\s*\] (\S+)(.*)$")
WATERMARK = re.compile(r"\bwatermark=('(?:[^'\\]|\\.)*'|\S+)")
BYTES = re.compile(r"\bbytes=(\d+)")


@dataclass
class FlowLog:
    """What the server logged during a scenario: flow state changes, warnings, errors."""

    stopped: Counter[str] = field(default_factory=Counter)  # flow.stopped per watermark
    started: Counter[str] = field(default_factory=Counter)  # flow.started per watermark
    max_bytes_at_stop: Counter[str] = field(default_factory=Counter)  # gauge bytes at a stop
    events: Counter[str] = field(default_factory=Counter)  # every event name, counted
    complaints: list[str] = field(default_factory=list)  # warning/error lines, tracebacks

    @classmethod
    def read(cls, path: Path, offset: int) -> FlowLog:
        flow = cls()
        try:
            with open(path, "rb") as log:
                log.seek(offset)
                text = log.read().decode(errors="replace")
        except OSError:
            return flow
        for line in text.splitlines():
            match = LOG_LINE.match(line)
            if match is None:
                if line.startswith("Traceback") or "Error" in line:
                    flow.complaints.append(line)
                continue
            level, event, rest = match.groups()
            flow.events[event] += 1
            if level in ("warning", "error", "critical"):
                flow.complaints.append(line)
            if event not in ("flow.stopped", "flow.started"):
                continue
            found = WATERMARK.search(rest)
            name = found.group(1).strip("'") if found else "?"
            if event == "flow.stopped":
                flow.stopped[name] += 1
                size = BYTES.search(rest)
                if size:
                    flow.max_bytes_at_stop[name] = max(
                        flow.max_bytes_at_stop[name], int(size.group(1))
                    )
            else:
                flow.started[name] += 1
        return flow

    def summary(self) -> str:
        names = sorted(set(self.stopped) | set(self.started))
        if not names:
            return "none"
        return ", ".join(f"{n} {self.stopped[n]}/{self.started[n]}" for n in names)


# -- the clients (one process each, run by loadgen.run_clients) -------------------------------


@dataclass(frozen=True)
class Link:
    """What every client of a scenario shares beyond ``clients.Shared``.

    ``counters`` (written without a lock, one writer per slot): ``SENT`` the
    messages sent so far, ``TOTAL`` how many the sender sent in all (-1 until
    it is done), ``FIRST_RECEIVER + i`` the messages receiver ``i`` got.
    Clients put their extra figures, a dict each, on ``report``.
    """

    host: str
    port: int
    destination: bytes
    body_size: int
    tag: bytes
    stall_timeout: float
    grace: float
    counters: Array[c_longlong]
    report: Queue[dict[str, Any]]


@dataclass(frozen=True)
class SenderPlan:
    link: Link
    messages: int  # send this many (0: no limit) ...
    seconds: float  # ... or for this long (0: no limit), whichever ends first
    batch: int  # SEND frames per sendall()
    rate: float  # send no faster than this many messages per second (0: no limit)


@dataclass(frozen=True)
class ReceiverPlan:
    link: Link
    index: int
    pace: float  # read at most this many messages per second (0: as fast as possible)
    pause_at: float  # s after the start: stop reading for pause s (< 0: never)
    pause: float
    discards_expected: bool  # gaps announced by discarded:N headers are no loss


def run_sender(plan: SenderPlan, shared: Shared, result: ClientResult) -> None:
    """Send as fast as the server lets it (or at ``rate``): no receipts, no backlog limit.

    When the server stops reading the socket (a watermark tripped), sendall()
    blocks; every sendall that took ``WAIT_MIN`` or more is recorded as a wait.
    A wait longer than the stall timeout ends the run with an error (the
    server never resumed reading). The DISCONNECT receipt at the end proves
    the server processed every SEND.
    """
    link = plan.link
    conn = StompConnection(link.host, link.port, link.stall_timeout)
    conn.connect()
    head = b"SEND\ndestination:%s\ncontent-length:%d\n\n" % (link.destination, link.body_size)
    padding = b"x" * (link.body_size - PREFIX_LEN) + b"\x00"
    counters = link.counters
    limit = plan.messages or sys.maxsize
    waits: list[tuple[float, float]] = []  # (start s after the go signal, duration s)
    sent = 0
    _start(shared, result)
    started = time.monotonic()
    deadline = started + plan.seconds if plan.seconds else math.inf
    while sent < limit and time.monotonic() < deadline:
        for frame in conn.poll_frames():
            if frame.command == b"ERROR":
                raise ServerError(frame)
            raise ProtocolError(f"sender got unexpected {describe(frame)}")
        end = min(sent + plan.batch, limit)
        rest = link.tag + b"%020d" % time.time_ns() + padding
        data = b"".join([part for s in range(sent, end) for part in (head, b"%016d" % s, rest)])
        before = time.monotonic()
        try:
            conn.send(data)
        except TimeoutError:
            raise TimeoutError(
                f"a sendall() was blocked for more than {link.stall_timeout} s after "
                f"{sent} messages: the server stopped reading and never resumed"
            ) from None
        took = time.monotonic() - before
        if took >= WAIT_MIN:
            waits.append((before - started, took))
        sent = end
        counters[SENT] = sent
        if plan.rate:
            ahead = started + sent / plan.rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
    counters[TOTAL] = sent
    _finish(result)
    conn.disconnect()
    result.received = sent
    link.report.put({"name": result.name, "sent": sent, "waits": waits})


def run_receiver(plan: ReceiverPlan, shared: Shared, result: ClientResult) -> None:
    """Subscribe (ack:auto, the server's default window) and check what arrives.

    Sequence numbers must rise by one from 0 to the sender's last: a repeat or
    a step back is a duplicate or a reordering, a gap is a loss, unless the
    message after it carries ``discarded:N`` with N the size of the gap and
    discards are expected (the slow subscriber under discard-oldest). Paced
    (``pace``) it sleeps so as to read no faster than that; with ``pause_at``
    it stops reading once, for ``pause`` seconds. After the last message it
    listens ``grace`` s more: anything then is one too many.
    """
    link = plan.link
    conn = StompConnection(link.host, link.port, link.stall_timeout)
    conn.connect()
    counters = link.counters
    slot = FIRST_RECEIVER + plan.index
    tag = link.tag
    stale = backwards = bad_size = 0
    silent_gaps = silent = 0  # gaps (and messages in them) no discarded header announced
    overclaims = 0  # discarded:N headers with N larger than the gap before them
    announced = announced_total = 0  # discarded:N headers seen, sum of N
    mismatched: list[str] = []  # the first few gaps whose header disagreed
    received = 0
    last = -1

    def handle(frames: list[Frame]) -> None:
        nonlocal stale, backwards, bad_size, silent_gaps, silent, overclaims
        nonlocal announced, announced_total
        nonlocal received, last
        for frame in frames:
            if frame.command != b"MESSAGE":
                if frame.command == b"ERROR":
                    raise ServerError(frame)
                raise ProtocolError(f"receiver got unexpected {describe(frame)}")
            body = frame.body
            if body[SEQ_WIDTH:TAG_END] != tag:
                stale += 1
                continue
            seq = int(body[:SEQ_WIDTH])
            if len(body) != link.body_size:
                bad_size += 1
            header = frame.header(b"discarded")
            count = int(header) if header is not None else 0
            if header is not None:
                announced += 1
                announced_total += count
            if seq <= last:
                backwards += 1
                continue
            gap = seq - last - 1
            if gap != count:
                if gap > count:
                    silent_gaps += 1
                    silent += gap - count
                else:
                    overclaims += 1
                if len(mismatched) < 5:
                    mismatched.append(f"seq {seq} after {last} with discarded:{count}")
            received += 1
            last = seq

    _note_stale(result, conn.subscribe(link.destination, b"auto"))
    _start(shared, result)
    started = time.monotonic()
    pause_start_ns = pause_end_ns = 0
    conn.sock.settimeout(0.2)
    progress_at = started
    while True:
        total = counters[TOTAL]
        if total >= 0 and last >= total - 1:
            break
        now = time.monotonic()
        if plan.pause_at >= 0 and not pause_start_ns and now - started >= plan.pause_at:
            pause_start_ns = time.time_ns()
            time.sleep(plan.pause)
            pause_end_ns = time.time_ns()
            progress_at = time.monotonic()
            continue
        try:
            frames = conn.recv_frames()
        except TimeoutError:
            if time.monotonic() - progress_at > link.stall_timeout:
                state = "still sending" if total < 0 else f"the sender sent {total} and stopped"
                raise TimeoutError(
                    f"got {received} messages (last seq {last}), then nothing for "
                    f"{link.stall_timeout} s; {state}"
                ) from None
            continue
        if frames:
            handle(frames)
            progress_at = time.monotonic()
            counters[slot] = received
        if plan.pace:
            ahead = started + received / plan.pace - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
    _finish(result)
    conn.sock.settimeout(link.grace)
    in_time, in_order = received, backwards
    try:
        while True:
            handle(conn.recv_frames())
    except TimeoutError:
        pass
    extra = received - in_time + backwards - in_order
    backwards = in_order
    conn.sock.settimeout(link.stall_timeout)
    late = len(conn.disconnect())

    total = counters[TOTAL]
    result.received = received
    if backwards or extra or late:
        result.problems.append(
            f"{backwards} duplicate or reordered deliveries, {extra} after the last message, "
            f"{late} more while disconnecting"
        )
    if silent_gaps or overclaims:
        result.problems.append(
            f"{silent} messages lost without a discard indication in {silent_gaps} gaps, "
            f"{overclaims} discarded:N headers announcing more than the gap before them: "
            + "; ".join(mismatched)
        )
    if announced and not plan.discards_expected:
        result.problems.append(
            f"{announced_total} messages discarded (announced by {announced} discarded:N "
            "headers) although this subscriber never paused: it fell more than its egress "
            "queue (ClientEgress.maxdepth) behind"
        )
    if received + announced_total != total:
        result.problems.append(
            f"received {received} + announced discards {announced_total} != {total} sent"
        )
    if bad_size:
        result.problems.append(f"{bad_size} bodies were not {link.body_size} bytes")
    if stale:
        result.warnings.append(f"{stale} messages from another run were ignored")
    link.report.put(
        {
            "name": result.name,
            "received": received,
            "discard_headers": announced,
            "discarded": announced_total,
            "pause_ns": [pause_start_ns, pause_end_ns] if pause_start_ns else None,
        }
    )


# -- the parent: sampling, running, figures ---------------------------------------------------


class Monitor(PeriodicSampler):
    """Samples the server's RSS and the clients' counters every 100 ms, in a thread.

    Every ``progress`` seconds (0: never) it prints a line, so a long flood
    shows it is alive.
    """

    def __init__(
        self,
        target: Target,
        counters: Array[c_longlong],
        receivers: int,
        body_size: int,
        progress: float,
    ) -> None:
        super().__init__(SAMPLE_INTERVAL, "monitor")
        self.target = target
        self.receivers = receivers
        self.counters = counters
        self.body_size = body_size
        self.progress = progress
        self.samples: list[tuple[int, float | None, list[int]]] = []  # (ns, rss MB, counters)
        self._began = time.monotonic()
        self._next_print = self._began + progress

    def sample(self) -> None:
        rss = sample_rss_mb(self.target)
        self.samples.append((time.time_ns(), rss, list(self.counters)))
        if self.progress and time.monotonic() >= self._next_print:
            self._next_print += self.progress
            sent = self.counters[SENT]
            got = min(self.counters[FIRST_RECEIVER : FIRST_RECEIVER + self.receivers])
            print(
                f"    ... {time.monotonic() - self._began:5.0f} s: sent {sent:,} "
                f"({sent * self.body_size / GIB:.2f} GiB), slowest receiver {got:,}, "
                f"rss {rss or 0:.0f} MB (peak {self.peak_mb or 0:.0f})",
                flush=True,
            )

    @property
    def peak_mb(self) -> float | None:
        values = [rss for _, rss, _ in self.samples if rss is not None]
        return max(values) if values else None

    def count_at(self, slot: int, ns: int) -> int:
        """A counter's value at the last sample taken at or before ``ns``."""
        value = 0
        for at, _, counters in self.samples:
            if at > ns:
                break
            value = counters[slot]
        return value

    def rate(self, slot: int, start_ns: int, end_ns: int) -> float:
        """Messages per second of a counter between two instants (from the samples)."""
        if end_ns <= start_ns:
            return math.nan
        counted = self.count_at(slot, end_ns) - self.count_at(slot, start_ns)
        return counted / ((end_ns - start_ns) / 1e9)

    def rss_trend(self, start_ns: int, end_ns: int) -> float:
        """Least-squares slope of RSS in MB/min over the last 2/3 of ``start_ns``-``end_ns``."""
        begin = start_ns + (end_ns - start_ns) // 3
        points = [(t / 1e9, r) for t, r, _ in self.samples if begin <= t <= end_ns and r]
        if len(points) < 10:
            return math.nan
        mean_t = sum(t for t, _ in points) / len(points)
        mean_r = sum(r for _, r in points) / len(points)
        num = sum((t - mean_t) * (r - mean_r) for t, r in points)
        den = sum((t - mean_t) ** 2 for t, _ in points)
        return num / den * 60 if den else math.nan


class ReportReader(PeriodicSampler):
    """Reads the clients' reports while they run.

    A report bigger than a pipe's buffer would otherwise keep its client from
    exiting (its queue's feeder thread waits for a reader) until the parent,
    done waiting, terminates it halfway through the message.
    """

    def __init__(self, reports: Queue[dict[str, Any]]) -> None:
        # a client killed mid-report leaves a message never completed: do not wait for it
        super().__init__(0.1, "reports", join_timeout=10)
        self.reports = reports
        self.items: dict[str, dict[str, Any]] = {}

    def sample(self) -> None:
        """Take every report that has arrived."""
        while True:
            try:
                item = self.reports.get_nowait()
            except queue.Empty:
                return
            self.items[item["name"]] = item


@dataclass
class Outcome:
    """One scenario's run: client results and reports, samples, server log."""

    results: list[ClientResult]
    reports: dict[str, dict[str, Any]]
    monitor: Monitor
    flow: FlowLog
    baseline_rss_mb: float | None
    started_ns: int = 0
    finished_ns: int = 0
    server_problems: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        found = list(self.server_problems)
        for r in self.results:
            if r.error is not None:
                found.append(f"{r.name}: {r.error}")
            found += [f"{r.name}: {p}" for p in r.problems]
        return found

    @property
    def warnings(self) -> list[str]:
        return [f"{r.name}: {w}" for r in self.results for w in r.warnings]

    @property
    def elapsed_s(self) -> float:
        return (self.finished_ns - self.started_ns) / 1e9


@dataclass(frozen=True)
class Options:
    wiremq: str
    settings: tuple[str, ...]
    body_size: int
    batch: int
    stall_timeout: float
    grace: float
    progress: float


def run_scenario(
    options: Options,
    config_xml: str | None,
    sender: Callable[[Link], SenderPlan],
    receivers: Callable[[Link], list[ReceiverPlan]],
    destination: bytes,
) -> tuple[Outcome, str]:
    """Start a fresh server, run a sender and its receivers, stop the server.

    Returns the outcome and the server's command line.
    """
    ctx = mp.get_context("spawn")
    with ConfiguredServer(options.wiremq, config_xml, options.settings) as server:
        command = " ".join(server.command())
        print(f"  server: {command} (pid {server.pid})", flush=True)
        target = Target(server.host, server.port, psutil.Process(server.pid))
        time.sleep(0.5)  # let it settle before the baseline sample
        baseline = sample_rss_mb(target)
        offset = server.log_path.stat().st_size
        report: Queue[dict[str, Any]] = ctx.Queue()
        link = Link(
            server.host,
            server.port,
            destination,
            options.body_size,
            secrets.token_hex(4).encode(),
            options.stall_timeout,
            options.grace,
            ctx.Array("q", 16, lock=False),
            report,
        )
        link.counters[TOTAL] = -1
        plans = receivers(link)
        clients: list[tuple[str, Any, Any]] = [
            (f"receiver-{p.index}", run_receiver, p) for p in plans
        ]
        clients.append(("sender", run_sender, sender(link)))
        # run_clients only uses the set-up timeout; the rest are loadgen's producer settings.
        tuning = Tuning(
            batch=options.batch,
            window=1,
            windows_ahead=1,
            max_backlog=1,
            stall_timeout=options.stall_timeout,
            setup_timeout=max(30.0, options.stall_timeout),
            grace=options.grace,
            drain_ack="client",
        )
        with (
            ReportReader(report) as reports,
            Monitor(
                target, link.counters, len(plans), options.body_size, options.progress
            ) as monitor,
        ):
            run = run_clients(clients, len(plans), target, tuning, rss=monitor)
        outcome = Outcome(run.results, reports.items, monitor, FlowLog(), baseline)
        started = [r.started_ns for r in run.results if r.started_ns]
        finished = [r.finished_ns for r in run.results if r.finished_ns]
        outcome.started_ns = min(started, default=0)
        outcome.finished_ns = max(finished, default=0)
        if not server.alive():
            outcome.server_problems.append(
                f"server died (exit code {server.stop()}); log {server.log_path}:\n"
                f"{server.log_tail()}"
            )
        outcome.flow = FlowLog.read(server.log_path, offset)
        server.keep_workdir = server.keep_workdir or bool(outcome.problems)
        if server.keep_workdir:
            print(f"  server log kept: {server.log_path}", flush=True)
    code = server.proc.returncode if server.proc else None
    if code not in (0, -signal.SIGTERM):
        outcome.server_problems.append(f"server exited with code {code} after SIGTERM")
    return outcome, command


@dataclass
class Result:
    """One scenario's figures, for the report line and the JSON file."""

    scenario: str
    command: str  # the server's command line
    ok: bool
    peak_rss_mb: float | None
    baseline_rss_mb: float | None
    elapsed_s: float
    messages: int  # sent
    msgs_per_s: float
    mb_per_s: float  # message bodies
    producer_stops: dict[str, int]  # flow.stopped per watermark, from the server log
    producer_starts: dict[str, int]
    figures: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    server_log: dict[str, Any] = field(default_factory=dict)
    rss_series: list[tuple[float, float | None]] = field(default_factory=list)

    def line(self) -> str:
        rss = f"{self.peak_rss_mb:5.0f} MB" if self.peak_rss_mb is not None else "  n/a"
        stops = sum(self.producer_stops.values())
        starts = sum(self.producer_starts.values())
        return (
            f"{self.scenario:<14} msgs={self.messages:<9} elapsed={self.elapsed_s:7.1f} s  "
            f"{self.msgs_per_s:8.0f} msgs/s {self.mb_per_s:7.1f} MB/s  "
            f"server peak rss={rss} (limit {RSS_LIMIT_MB:.0f})  "
            f"producer stops/starts={stops}/{starts}" + ("" if self.ok else "  FAILED")
        )


def base_result(name: str, command: str, outcome: Outcome, body_size: int) -> Result:
    sent = outcome.reports.get("sender", {}).get("sent", 0)
    elapsed = outcome.elapsed_s if outcome.finished_ns else math.nan
    peak = outcome.monitor.peak_mb
    result = Result(
        name,
        command,
        ok=True,
        peak_rss_mb=peak,
        baseline_rss_mb=outcome.baseline_rss_mb,
        elapsed_s=elapsed,
        messages=sent,
        msgs_per_s=sent / elapsed if elapsed else math.nan,
        mb_per_s=sent * body_size / MB / elapsed if elapsed else math.nan,
        producer_stops=dict(outcome.flow.stopped),
        producer_starts=dict(outcome.flow.started),
        problems=outcome.problems,
        warnings=outcome.warnings,
        server_log={
            "events": dict(outcome.flow.events),
            "max_bytes_at_stop": dict(outcome.flow.max_bytes_at_stop),
            "warnings_and_errors": outcome.flow.complaints[:50],
        },
        rss_series=[
            (round((t - outcome.started_ns) / 1e9, 2), None if r is None else round(r, 1))
            for t, r, _ in outcome.monitor.samples
        ],
    )
    if peak is not None and peak >= RSS_LIMIT_MB:
        result.problems.append(f"peak server RSS {peak:.0f} MB is over {RSS_LIMIT_MB:.0f} MB")
    waits: list[tuple[float, float]] = outcome.reports.get("sender", {}).get("waits", [])
    result.figures["sender_waits"] = len(waits)
    result.figures["sender_blocked_s"] = round(sum(d for _, d in waits), 2)
    result.figures["sender_longest_wait_s"] = round(max((d for _, d in waits), default=0.0), 2)
    result.ok = not result.problems
    return result


def whole(value: float) -> int | None:
    """A rate for the report, None where it could not be measured (NaN)."""
    return None if math.isnan(value) else round(value)


# -- the scenarios ------------------------------------------------------------------------------


def flood(
    options: Options, messages: int, pace: float
) -> tuple[Outcome, str]:  # one producer, one (paced) consumer on /queue/memory
    return run_scenario(
        options,
        None,
        lambda link: SenderPlan(link, messages, 0.0, options.batch, 0.0),
        lambda link: [ReceiverPlan(link, 0, pace, -1.0, 0.0, False)],
        QUEUE,
    )


def queue_flood(args: argparse.Namespace, options: Options) -> Result:
    """Calibrate the unthrottled rate, then flood with a consumer at 1/10 of it."""
    body = options.body_size
    if args.consumer_rate:
        unthrottled = args.consumer_rate * 10
        print(f"  consumer rate given: {args.consumer_rate:.0f} msgs/s", flush=True)
    else:
        count = args.calibrate_messages
        print(f"  calibration: {count:,} messages, consumer reading as fast as it can", flush=True)
        calib, _ = flood(options, count, 0.0)
        if calib.problems or not calib.finished_ns:
            result = base_result("queue-flood", "(calibration)", calib, body)
            result.problems = ["calibration failed: " + p for p in calib.problems]
            result.ok = False
            return result
        unthrottled = count / calib.elapsed_s
        print(
            f"  calibration: {unthrottled:,.0f} msgs/s ({unthrottled * body / MB:.0f} MB/s) "
            f"unthrottled; peak rss {calib.monitor.peak_mb or 0:.0f} MB; "
            f"producer stops/starts {calib.flow.summary()}",
            flush=True,
        )
    pace = unthrottled / 10
    wanted = int((args.gigabytes or 2.0) * GIB) // body
    projected = wanted / pace
    messages = wanted
    if args.gigabytes is None and projected > args.max_minutes * 60:
        messages = int(pace * args.fit_minutes * 60)
        print(
            f"  2 GiB ({wanted:,} messages) at {pace:,.0f} msgs/s would take "
            f"{projected / 60:.1f} min, more than {args.max_minutes:g} min: sending "
            f"{messages:,} messages ({messages * body / GIB:.2f} GiB, ~{args.fit_minutes:g} min) "
            "instead; the figures below extrapolate to 2 GiB",
            flush=True,
        )
    print(
        f"  flood: {messages:,} messages ({messages * body / GIB:.2f} GiB) of {body} B, "
        f"consumer paced at {pace:,.0f} msgs/s ({pace * body / MB:.1f} MB/s, 1/10 of "
        f"{unthrottled:,.0f}); projected {messages / pace:.0f} s",
        flush=True,
    )
    outcome, command = flood(options, messages, pace)
    result = base_result("queue-flood", command, outcome, body)
    mon = outcome.monitor
    elapsed = result.elapsed_s
    # The trend while the producer sends: the drain at the end only shrinks the queue.
    sender_end = max(
        (r.finished_ns for r in outcome.results if r.name == "sender"),
        default=outcome.finished_ns,
    )
    trend = mon.rss_trend(outcome.started_ns, sender_end)
    result.figures.update(
        {
            "gigabytes_sent": round(result.messages * body / GIB, 3),
            "unthrottled_msgs_per_s": round(unthrottled),
            "consumer_pace_msgs_per_s": round(pace),
            "sender_blocked_share": round(result.figures["sender_blocked_s"] / elapsed, 3)
            if elapsed
            else None,
            "rss_trend_mb_per_min": None if math.isnan(trend) else round(trend, 2),
        }
    )
    if result.messages and messages < wanted and elapsed:
        left_s = (wanted - result.messages) / result.msgs_per_s
        result.figures["extrapolated_2gib_s"] = round(elapsed + left_s)
        if result.peak_rss_mb is not None and not math.isnan(trend):
            growth = max(trend, 0.0) * left_s / 60  # a falling trend is no promise of more
            result.figures["extrapolated_2gib_rss_mb"] = round(result.peak_rss_mb + growth, 1)
    return result


def topic(args: argparse.Namespace, options: Options, name: str, discard: bool) -> Result:
    """One publisher, ``--subscribers`` subscribers, the last of which pauses once."""
    subscribers = args.subscribers
    slow = subscribers - 1
    rate = args.publish_rate
    if rate is None:
        rate = DISCARD_PUBLISH_RATE if discard else 0.0
    print(
        f"  publisher: {options.body_size} B messages for {args.publish_seconds:g} s, "
        + (f"paced at {rate:,.0f} msgs/s" if rate else "as fast as the server lets it")
        + f"; subscriber {slow} stops reading at {args.pause_at:g} s for {args.pause:g} s",
        flush=True,
    )
    outcome, command = run_scenario(
        options,
        DISCARD_CONFIG if discard else None,
        lambda link: SenderPlan(link, 0, args.publish_seconds, args.topic_batch, rate),
        lambda link: [
            ReceiverPlan(
                link,
                i,
                0.0,
                args.pause_at if i == slow else -1.0,
                args.pause,
                discard and i == slow,
            )
            for i in range(subscribers)
        ],
        TOPIC,
    )
    result = base_result(name, command, outcome, options.body_size)
    mon = outcome.monitor
    slow_report = outcome.reports.get(f"receiver-{slow}", {})
    pause = slow_report.get("pause_ns")
    sender_done = outcome.reports.get("sender") is not None
    figures = result.figures
    figures["subscribers"] = subscribers
    figures["publish_rate"] = rate or None
    figures["deliveries"] = sum(
        outcome.reports.get(f"receiver-{i}", {}).get("received", 0) for i in range(subscribers)
    )
    figures["slow_discard_headers"] = slow_report.get("discard_headers")
    figures["slow_discarded"] = slow_report.get("discarded")
    figures["slow_received"] = slow_report.get("received")
    if pause and sender_done and outcome.finished_ns:
        start, end = pause
        figures["pause_s"] = [
            round((start - outcome.started_ns) / 1e9, 2),
            round((end - outcome.started_ns) / 1e9, 2),
        ]
        publish_end = min((t for t, _, c in mon.samples if c[SENT] >= result.messages), default=end)
        windows = {
            "before": (outcome.started_ns, start),
            "during": (start, end),
            "after": (end, publish_end),
        }
        for label, (a, b) in windows.items():
            figures[f"publisher_msgs_per_s_{label}_pause"] = whole(mon.rate(SENT, a, b))
            fast = [mon.rate(FIRST_RECEIVER + i, a, b) for i in range(slow)]
            figures[f"fast_subscribers_msgs_per_s_{label}_pause"] = [whole(r) for r in fast]
            figures[f"slow_subscriber_msgs_per_s_{label}_pause"] = whole(
                mon.rate(FIRST_RECEIVER + slow, a, b)
            )
        figures["fast_subscribers_msgs_per_s_overall"] = [
            whole(
                r.received / ((r.finished_ns - r.started_ns) / 1e9)
                if r.finished_ns > r.started_ns
                else math.nan
            )
            for r in outcome.results
            if r.name.startswith("receiver-") and r.name != f"receiver-{slow}"
        ]
        # Did the sender wait while the slow one paused, and did it resume after?
        waits: list[tuple[float, float]] = outcome.reports["sender"]["waits"]
        go = next(r.started_ns for r in outcome.results if r.name == "sender")
        overlap = sum(
            max(0.0, min(go + (s + d) * 1e9, end) - max(go + s * 1e9, start)) / 1e9
            for s, d in waits
        )
        figures["sender_blocked_during_pause_s"] = round(overlap, 2)
        figures["sent_after_pause"] = result.messages - mon.count_at(SENT, end)
    tlb = "TopicLiveBuffer"
    if not discard and result.ok:
        if not outcome.flow.stopped[tlb]:
            result.problems.append(
                "the publisher was never stopped by the TopicLiveBuffer watermark while a "
                "subscriber did not read"
            )
        if figures.get("sender_blocked_during_pause_s", args.pause) < args.pause / 2:
            result.problems.append(
                f"the publisher was blocked only {figures['sender_blocked_during_pause_s']} s "
                f"of the {args.pause:g} s the subscriber did not read"
            )
        if figures.get("sent_after_pause", 1) <= 0:
            result.problems.append("the publisher sent nothing after the pause: never resumed")
    if discard and result.ok and not figures.get("slow_discarded"):
        result.warnings.append(
            "the slow subscriber saw no discards (pause too short to fill its egress queue?)"
        )
    result.ok = not result.problems
    return result


# -- command line -------------------------------------------------------------------------------

SCENARIOS = {
    "queue-flood": "flood a queue whose consumer reads at 1/10 of the producer's rate",
    "topic-block": "8 topic subscribers, one pauses; block policy stops the publisher",
    "topic-discard": "8 topic subscribers, one pauses; discard-oldest drops its oldest",
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="wiremq memory benchmark (issue 4; see bench/README.md)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="scenarios:\n" + "\n".join(f"  {n:<14} {s}" for n, s in SCENARIOS.items()),
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
        "--gigabytes",
        type=float,
        help="queue-flood: GiB of message bodies to send (default 2, or, if 2 GiB would take "
        "more than --max-minutes at the paced rate, what fits in --fit-minutes)",
    )
    parser.add_argument("--max-minutes", type=float, default=10.0, help="see --gigabytes")
    parser.add_argument("--fit-minutes", type=float, default=3.5, help="see --gigabytes")
    parser.add_argument(
        "--consumer-rate",
        type=float,
        help="queue-flood: the consumer's pace in msgs/s (default: 1/10 of the rate measured "
        "by a calibration run with an unpaced consumer)",
    )
    parser.add_argument(
        "--calibrate-messages",
        type=int,
        default=100_000,
        help="queue-flood: messages of the calibration run (default %(default)s)",
    )
    parser.add_argument("--subscribers", type=int, default=8, help="topic subscribers (8)")
    parser.add_argument(
        "--publish-seconds", type=float, default=16.0, help="topic: how long the publisher sends"
    )
    parser.add_argument(
        "--publish-rate",
        type=float,
        help="topic: the publisher's pace in msgs/s, 0: as fast as the server lets it "
        f"(default: 0 for topic-block, {DISCARD_PUBLISH_RATE} for topic-discard)",
    )
    parser.add_argument(
        "--pause-at",
        type=float,
        default=4.0,
        help="topic: seconds after the start at which the slow subscriber stops reading",
    )
    parser.add_argument(
        "--pause", type=float, default=5.0, help="topic: how long it does not read (5 s)"
    )
    parser.add_argument("--body-size", type=int, default=4096, help="message body bytes (4096)")
    parser.add_argument("--batch", type=int, default=64, help="queue: SEND frames per sendall")
    parser.add_argument("--topic-batch", type=int, default=16, help="topic: SENDs per sendall")
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
        help="server parameter for every server started (repeatable); the scenarios are "
        "meant for the defaults",
    )
    parser.add_argument(
        "--stall-timeout",
        type=float,
        default=30.0,
        help="seconds without progress (or a sendall blocked) before a client gives up",
    )
    parser.add_argument(
        "--grace", type=float, default=0.5, help="seconds receivers listen for extras at the end"
    )
    parser.add_argument(
        "--progress", type=float, default=15.0, help="seconds between progress lines (0: none)"
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write figures as JSON")
    args = parser.parse_args(argv)
    if args.body_size < PREFIX_LEN:
        parser.error(f"--body-size must be at least {PREFIX_LEN}")
    if args.subscribers < 2:
        parser.error("--subscribers must be at least 2 (one of them is the slow one)")
    if args.pause >= args.stall_timeout:
        parser.error("--pause must be shorter than --stall-timeout")
    if args.gigabytes is not None and args.gigabytes <= 0:
        parser.error("--gigabytes must be positive")
    return args


def describe_result(result: Result) -> list[str]:
    """Indented detail lines under a scenario's result line."""
    f = result.figures
    lines = [
        f"server rss at start {result.baseline_rss_mb or 0:.0f} MB; flow.stopped/flow.started "
        "per watermark: "
        + (
            ", ".join(
                f"{n} {result.producer_stops.get(n, 0)}/{result.producer_starts.get(n, 0)}"
                for n in sorted(set(result.producer_stops) | set(result.producer_starts))
            )
            or "none"
        )
        + "".join(
            f"; {name} held at most {size:,} bytes at a stop"
            for name, size in result.server_log.get("max_bytes_at_stop", {}).items()
        ),
        f"sender: {f['sender_waits']} sendall waits >= {WAIT_MIN * 1000:.0f} ms, "
        f"{f['sender_blocked_s']} s blocked in all, longest {f['sender_longest_wait_s']} s",
    ]
    if result.scenario == "queue-flood" and "gigabytes_sent" in f:
        lines.append(
            f"sent {f['gigabytes_sent']} GiB; consumer paced at {f['consumer_pace_msgs_per_s']} "
            f"msgs/s (1/10 of {f['unthrottled_msgs_per_s']}); sender blocked "
            f"{(f['sender_blocked_share'] or 0) * 100:.0f}% of the time; rss trend "
            f"{f['rss_trend_mb_per_min']} MB/min over the last 2/3 of the send"
        )
        if "extrapolated_2gib_s" in f:
            lines.append(
                f"extrapolated to 2 GiB: {f['extrapolated_2gib_s']} s"
                + (
                    f", peak rss {f['extrapolated_2gib_rss_mb']} MB if it kept growing at "
                    "that trend (not if it falls)"
                    if "extrapolated_2gib_rss_mb" in f
                    else ""
                )
            )
    if result.scenario.startswith("topic") and "pause_s" in f:
        lines.append(
            f"slow subscriber paused at {f['pause_s'][0]}-{f['pause_s'][1]} s; received "
            f"{f['slow_received']}, {f['slow_discard_headers']} discarded headers announcing "
            f"{f['slow_discarded']} discards; publisher blocked "
            f"{f['sender_blocked_during_pause_s']} s during the pause, sent "
            f"{f['sent_after_pause']} after it"
        )
        for label in ("before", "during", "after"):
            fast = f[f"fast_subscribers_msgs_per_s_{label}_pause"]
            lines.append(
                f"msgs/s {label:<6} the pause: publisher "
                f"{f[f'publisher_msgs_per_s_{label}_pause']}, fast subscribers "
                f"{min(fast)}-{max(fast)}, slow {f[f'slow_subscriber_msgs_per_s_{label}_pause']}"
            )
        lines.append(f"fast subscribers overall msgs/s: {f['fast_subscribers_msgs_per_s_overall']}")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    options = Options(
        args.wiremq,
        tuple(args.set),
        args.body_size,
        args.batch,
        args.stall_timeout,
        args.grace,
        args.progress,
    )
    machine = machine_info()
    print(
        f"wiremq memory benchmark: {machine['logical_cores']} logical / "
        f"{machine['physical_cores']} physical cores, {machine['python']}, "
        f"{machine['platform']}",
        flush=True,
    )
    results: list[Result] = []
    try:
        for name in args.scenario or list(SCENARIOS):
            print(f"{name}: {SCENARIOS[name]}", flush=True)
            if name == "queue-flood":
                result = queue_flood(args, options)
            else:
                result = topic(args, options, name, discard=name == "topic-discard")
            results.append(result)
            print(result.line(), flush=True)
            for detail in describe_result(result) if result.messages else []:
                print(f"    {detail}", flush=True)
            for problem in result.problems:
                print(f"    problem: {problem}", flush=True)
            for warning in result.warnings:
                print(f"    warning: {warning}", flush=True)
            for line in result.server_log.get("warnings_and_errors", [])[:10]:
                print(f"    server log: {line}", flush=True)
    except ServerStartError as exc:
        print(f"error: could not start the server: {exc}", file=sys.stderr)
        return 2
    if args.json:
        report = {"machine": machine, "scenarios": [asdict(r) for r in results]}
        args.json.write_text(json.dumps(json_safe(report), indent=1, allow_nan=False) + "\n")
    failures = [r.scenario for r in results if not r.ok]
    if failures:
        print(f"FAILED: {', '.join(failures)} (see the problem lines above)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
