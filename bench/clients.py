"""Client processes of the load generator: producer, consumer and round-trip.

Each runs in its own process (one per producer/consumer) so that client-side
Python work is spread over cores and never serialised with the server or with
the other clients.  They connect and subscribe first, meet at a ready barrier,
wait for the go signal (so the parent can sample the server's CPU between the
two) and report a ``ClientResult`` through a queue.

Message bodies start with a fixed-width prefix that makes each message
checkable and timeable by the consumer:

    seq (16 ASCII digits) | run tag (8 bytes) | send time.time_ns() (20 digits) | padding

``time.time_ns()`` is used because ``perf_counter_ns`` is not comparable across
processes.  The run tag lets a consumer tell this run's messages from ones left
in a queue by an earlier, failed run against a long-lived server.
"""

from __future__ import annotations

import time
import traceback
from array import array
from collections.abc import Callable
from ctypes import Array, c_longlong
from dataclasses import dataclass, field
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier, Event
from threading import BrokenBarrierError
from typing import Any

from stomp_wire import Frame, ProtocolError, ServerError, StompConnection, describe

SEQ_WIDTH = 16
TAG_WIDTH = 8
TS_WIDTH = 20
PREFIX_LEN = SEQ_WIDTH + TAG_WIDTH + TS_WIDTH
TAG_END = SEQ_WIDTH + TAG_WIDTH


@dataclass(frozen=True)
class Shared:
    """Synchronisation objects handed to every client process of one scenario."""

    ready: Barrier
    go: Event
    results: Queue[ClientResult]
    progress: Array[c_longlong]  # messages received so far, one slot per consumer
    setup_timeout: float


@dataclass(frozen=True)
class ProducerPlan:
    host: str
    port: int
    destination: bytes
    messages: int
    body_size: int
    tag: bytes
    batch: int  # SEND frames joined into one sendall()
    window: int  # messages per receipt window
    windows_ahead: int  # windows sent beyond the last RECEIPT received
    max_backlog: int  # messages sent but not yet received by (every) consumer
    fanout: int  # deliveries per message: subscribers for a topic, 1 for a queue
    stall_timeout: float


@dataclass(frozen=True)
class ConsumerPlan:
    host: str
    port: int
    destination: bytes
    index: int  # slot in Shared.progress
    messages: int  # every seq in range(messages) must arrive exactly once
    body_size: int
    tag: bytes
    ack: bytes  # b"auto" or b"client-individual"
    grace: float  # seconds to keep listening for duplicates after the last message
    stall_timeout: float


@dataclass(frozen=True)
class RoundtripPlan:
    host: str
    port: int
    destination: bytes
    iterations: int
    body_size: int
    tag: bytes
    stall_timeout: float


@dataclass
class ClientResult:
    """What one client reports; ``problems`` lists correctness violations seen."""

    name: str
    started_ns: int = 0  # time.time_ns() when the client started its load
    finished_ns: int = 0  # time.time_ns() of its last relevant event
    received: int = 0
    cpu_s: float = 0.0  # this client's own CPU from start to finish: is it a bottleneck?
    latencies_ns: bytes = b""  # array("q") bytes, to keep the pickle compact
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    error: str | None = None  # exception that ended the client early


def client_main(
    work: Callable[[Any, Shared, ClientResult], None], plan: Any, shared: Shared, name: str
) -> None:
    """Process entry point: run ``work`` and always report, even on failure."""
    result = ClientResult(name)
    try:
        work(plan, shared, result)
    except BaseException as exc:  # report anything, including KeyboardInterrupt
        shared.ready.abort()  # free the others from the barrier instead of timing out
        if isinstance(exc, BrokenBarrierError):
            result.error = "not started: another client (or the parent) failed during set-up"
        elif isinstance(exc, ServerError | ProtocolError | ConnectionError | TimeoutError):
            result.error = f"{type(exc).__name__}: {exc}"
        else:
            result.error = traceback.format_exc()
    shared.results.put(result)


def _start(shared: Shared, result: ClientResult) -> None:
    shared.ready.wait(shared.setup_timeout)
    if not shared.go.wait(shared.setup_timeout):
        raise TimeoutError("no go signal from the parent")
    result.started_ns = time.time_ns()
    result.cpu_s = -time.process_time()


def _finish(result: ClientResult) -> None:
    result.finished_ns = time.time_ns()
    result.cpu_s += time.process_time()


def _note_stale(result: ClientResult, frames: list[Frame]) -> None:
    if frames:
        result.warnings.append(
            f"{len(frames)} message(s) were waiting before the run started "
            f"(left by an earlier run?), first: {describe(frames[0], 80)}"
        )


def run_producer(plan: ProducerPlan, shared: Shared, result: ClientResult) -> None:
    """Send ``messages`` SENDs in batches, bounded by receipts and consumer progress.

    Every ``window`` messages the last SEND asks for a receipt; the producer
    never runs more than ``windows_ahead`` windows past the last RECEIPT, which
    bounds what sits unprocessed in the server's input.  It also waits while
    more than ``max_backlog`` messages are not yet received by the consumers,
    which bounds the queue depth (and thus server memory) without making the
    benchmark lock-step.
    """
    conn = StompConnection(plan.host, plan.port, plan.stall_timeout)
    conn.connect()
    plain_header = b"SEND\ndestination:%s\ncontent-length:%d\n\n" % (
        plan.destination,
        plan.body_size,
    )
    padding = b"x" * (plan.body_size - PREFIX_LEN) + b"\x00"
    progress = shared.progress
    backlog_limit = plan.max_backlog * plan.fanout
    receipted = -1  # highest window whose RECEIPT arrived

    def await_receipts() -> None:
        try:
            take_receipts(conn.recv_frames())
        except TimeoutError:
            raise TimeoutError(
                f"no RECEIPT for window {receipted + 1} within "
                f"{plan.stall_timeout} s (sent {seq} messages)"
            ) from None

    def take_receipts(frames: list[Frame]) -> None:
        nonlocal receipted
        for frame in frames:
            if frame.command == b"RECEIPT":
                receipted = max(receipted, int(frame.header(b"receipt-id") or b"-1"))
            elif frame.command == b"ERROR":
                raise ServerError(frame)
            else:
                raise ProtocolError(f"producer got unexpected {describe(frame)}")

    _start(shared, result)
    seq = 0
    window = 0
    while seq < plan.messages:
        take_receipts(conn.poll_frames())
        while window - receipted > plan.windows_ahead:
            await_receipts()
        deadline = time.monotonic() + plan.stall_timeout
        while seq * plan.fanout - sum(progress) > backlog_limit:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"consumers made no progress for {plan.stall_timeout} s "
                    f"({sum(progress)} deliveries after {seq} sends)"
                )
            time.sleep(0.0002)
        window_end = min(seq + plan.window, plan.messages)
        receipt_header = b"SEND\ndestination:%s\ncontent-length:%d\nreceipt:%d\n\n" % (
            plan.destination,
            plan.body_size,
            window,
        )
        while seq < window_end:
            batch_end = min(seq + plan.batch, window_end)
            # One timestamp per batch: the whole batch goes out in a single sendall().
            rest = plan.tag + b"%020d" % time.time_ns() + padding
            parts: list[bytes] = []
            for s in range(seq, batch_end):
                parts += (
                    receipt_header if s == window_end - 1 else plain_header,
                    b"%016d" % s,
                    rest,
                )
            conn.send(b"".join(parts))
            seq = batch_end
        window += 1
    while receipted < window - 1:
        await_receipts()
    _finish(result)
    conn.disconnect()


def run_consumer(plan: ConsumerPlan, shared: Shared, result: ClientResult) -> None:
    """Receive until every sequence number has arrived, then listen ``grace`` s for extras.

    Checks: each seq exactly once, in order (one producer, so JMS ordering
    applies), body of the declared size.  With client-individual acks, the
    ACKs for one received chunk are written with a single sendall().
    """
    conn = StompConnection(plan.host, plan.port, plan.stall_timeout)
    conn.connect()
    _note_stale(result, conn.subscribe(plan.destination, plan.ack))
    seen = bytearray(plan.messages)
    latencies = array("q")
    individual = plan.ack == b"client-individual"
    tag = plan.tag
    expected = plan.messages
    stale = duplicates = unknown = out_of_order = bad_size = 0
    next_seq = 0
    received = 0

    def handle(frames: list[Frame], now: int) -> None:
        nonlocal stale, duplicates, unknown, out_of_order, bad_size, next_seq, received
        acks: list[bytes] = []
        for frame in frames:
            if frame.command != b"MESSAGE":
                if frame.command == b"ERROR":
                    raise ServerError(frame)
                raise ProtocolError(f"consumer got unexpected {describe(frame)}")
            body = frame.body
            if individual:
                ack_id = frame.header(b"ack")
                if ack_id is None:
                    raise ProtocolError(
                        f"client-individual MESSAGE without ack header: {describe(frame, 60)}"
                    )
                acks += (b"ACK\nid:", ack_id, b"\n\n\x00")
            if body[SEQ_WIDTH:TAG_END] != tag:
                stale += 1
                continue
            seq = int(body[:SEQ_WIDTH])
            if seq >= expected:
                unknown += 1
                continue
            if seen[seq]:
                duplicates += 1
                continue
            seen[seq] = 1
            received += 1
            if seq != next_seq:
                out_of_order += 1
            next_seq = seq + 1
            if len(body) != plan.body_size:
                bad_size += 1
            latencies.append(now - int(body[TAG_END:PREFIX_LEN]))
        if acks:
            conn.send(b"".join(acks))

    progress = shared.progress
    _start(shared, result)
    while received < expected:
        try:
            frames = conn.recv_frames()
        except TimeoutError:
            missing = seen.count(0)
            raise TimeoutError(
                f"got {received} of {expected} messages, then nothing for {plan.stall_timeout} s; "
                f"{missing} missing, first missing seq {seen.index(0)}"
            ) from None
        handle(frames, time.time_ns())
        progress[plan.index] = received
    _finish(result)
    conn.sock.settimeout(plan.grace)
    try:
        while True:
            handle(conn.recv_frames(), time.time_ns())
    except TimeoutError:
        pass
    conn.sock.settimeout(plan.stall_timeout)
    late = len(conn.disconnect())  # any MESSAGE after the grace period is one too many

    result.received = received
    result.latencies_ns = latencies.tobytes()
    if duplicates or unknown or late:
        result.problems.append(
            f"{duplicates} duplicate deliveries, {unknown} with an unknown sequence number, "
            f"{late} more arriving while disconnecting"
        )
    if out_of_order:
        result.problems.append(f"{out_of_order} messages arrived out of sequence order")
    if bad_size:
        result.problems.append(f"{bad_size} bodies were not {plan.body_size} bytes")
    if stale:
        result.warnings.append(f"{stale} messages from another run were ignored")


def run_roundtrip(plan: RoundtripPlan, shared: Shared, result: ClientResult) -> None:
    """Send one message, wait until it comes back through the subscription, repeat.

    One connection both sends and receives, so ``perf_counter_ns`` is usable;
    the latency is the full client-to-server-to-client round trip.
    """
    conn = StompConnection(plan.host, plan.port, plan.stall_timeout)
    conn.connect()
    _note_stale(result, conn.subscribe(plan.destination, b"auto"))
    header = b"SEND\ndestination:%s\ncontent-length:%d\n\n" % (plan.destination, plan.body_size)
    rest = plan.tag + b"0" * TS_WIDTH + b"x" * (plan.body_size - PREFIX_LEN) + b"\x00"
    latencies = array("q")
    _start(shared, result)
    for seq in range(plan.iterations):
        frame = header + b"%016d" % seq + rest
        sent = time.perf_counter_ns()
        conn.send(frame)
        while True:
            frames = conn.recv_frames()
            if frames:
                break
        arrived = time.perf_counter_ns()
        message = frames[0]
        if message.command == b"ERROR":
            raise ServerError(message)
        if (
            len(frames) != 1
            or message.command != b"MESSAGE"
            or message.body != frame[len(header) : -1]
        ):
            raise ProtocolError(
                f"round trip {seq}: expected our MESSAGE back, got "
                + "; ".join(describe(f, 60) for f in frames)
            )
        latencies.append(arrived - sent)
    _finish(result)
    result.received = plan.iterations
    result.latencies_ns = latencies.tobytes()
    conn.disconnect()
