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
    """One producer's share of a phase: sequence numbers first, first + stride, ... < messages.

    Interleaved shares let the consumer tell the producers apart (seq % stride)
    and check each one's order without a producer field in the body.
    """

    host: str
    port: int
    destination: bytes
    messages: int  # of all producers together
    first: int
    stride: int  # number of producers
    body_size: int
    tag: bytes
    persistent: bool
    pace: float  # msgs/s this producer sends at most; 0: as fast as receipts allow
    expire_after: float  # > 0 (needs a pace): messages expire this many s after the planned end
    batch: int  # SEND frames joined into one sendall()
    window: int  # messages per receipt window
    windows_ahead: int  # windows sent beyond the last RECEIPT received
    max_backlog: int  # messages sent but not yet received by (every) consumer
    fanout: int  # deliveries per message: subscribers for a topic, 1 for a queue, 0: no consumer
    stall_timeout: float


@dataclass(frozen=True)
class ConsumerPlan:
    host: str
    port: int
    destination: bytes
    index: int  # slot in Shared.progress
    messages: int  # every seq in range(messages) must arrive exactly once
    producers: int  # seq % producers tells whose message it is: order is checked per producer
    body_size: int
    tag: bytes
    ack: bytes  # b"auto", b"client" or b"client-individual"
    ack_every: int  # client: a cumulative ACK every n-th message (and the last); else 1
    from_store: bool  # subscribe after the go signal: the messages are already stored
    durable_id: bytes | None  # client-id and activemq.subscriptionName of a durable subscriber
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
    expires_ms: int = 0  # latest expires a producer put on a message; 0: none
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
    """Send this producer's share in batches, bounded by receipts and consumer progress.

    Every ``window`` messages the last SEND asks for a receipt; the producer
    never runs more than ``windows_ahead`` windows past the last RECEIPT, which
    bounds what sits unprocessed in the server's input (window 1 with
    windows_ahead 1 waits for each message's receipt before sending the next).
    It also waits while more than ``max_backlog`` messages are not yet received
    by the consumers, which bounds the queue depth (and thus server memory)
    without making the benchmark lock-step.
    """
    conn = StompConnection(plan.host, plan.port, plan.stall_timeout)
    conn.connect()
    head = b"SEND\ndestination:%s\ncontent-length:%d\n" % (plan.destination, plan.body_size)
    if plan.persistent:
        head += b"persistent:true\n"
    padding = b"x" * (plan.body_size - PREFIX_LEN) + b"\x00"
    progress = shared.progress
    backlog_limit = plan.max_backlog * plan.fanout
    count = len(range(plan.first, plan.messages, plan.stride))
    receipted = -1  # highest window whose RECEIPT arrived

    def await_receipts() -> None:
        try:
            take_receipts(conn.recv_frames())
        except TimeoutError:
            raise TimeoutError(
                f"no RECEIPT for window {receipted + 1} within "
                f"{plan.stall_timeout} s (sent {sent} messages)"
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
    started = time.monotonic()
    if plan.expire_after:
        # The same for every message: a paced send ends on schedule, so they all
        # expire together shortly after the last one is stored, not while the
        # send is still going on (the cleanup would then run during this phase).
        result.expires_ms = int((time.time() + count / plan.pace + plan.expire_after) * 1000)
        head += b"expires:%d\n" % result.expires_ms
    plain_header = head + b"\n"
    sent = 0
    window = 0
    while sent < count:
        take_receipts(conn.poll_frames())
        while window - receipted > plan.windows_ahead:
            await_receipts()
        if plan.pace:
            time.sleep(max(0.0, started + sent / plan.pace - time.monotonic()))
        # The next seq is about what all producers together have sent.
        seq = plan.first + sent * plan.stride
        deadline = time.monotonic() + plan.stall_timeout
        while seq * plan.fanout - sum(progress) > backlog_limit:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"consumers made no progress for {plan.stall_timeout} s "
                    f"({sum(progress)} deliveries after {seq} sends)"
                )
            time.sleep(0.0002)
        window_end = min(sent + plan.window, count)
        receipt_header = head + b"receipt:%d\n\n" % window
        while sent < window_end:
            batch_end = min(sent + plan.batch, window_end)
            # One timestamp per batch: the whole batch goes out in a single sendall().
            rest = plan.tag + b"%020d" % time.time_ns() + padding
            parts: list[bytes] = []
            for i in range(sent, batch_end):
                parts += (
                    receipt_header if i == window_end - 1 else plain_header,
                    b"%016d" % (plan.first + i * plan.stride),
                    rest,
                )
            conn.send(b"".join(parts))
            sent = batch_end
        window += 1
    while receipted < window - 1:
        await_receipts()
    _finish(result)
    if result.expires_ms and result.finished_ns // 1_000_000 >= result.expires_ms:
        result.warnings.append(
            f"the server did not keep up with {plan.pace:.0f} msgs/s: sending took "
            f"{(result.finished_ns - result.started_ns) / 1e9:.1f} s, and the messages "
            "expired before the last one was stored"
        )
    conn.disconnect()


def run_consumer(plan: ConsumerPlan, shared: Shared, result: ClientResult) -> None:
    """Receive until every sequence number has arrived, then listen ``grace`` s for extras.

    Checks: each seq exactly once, each producer's messages in the order sent
    (JMS ordering is per producer), body of the declared size.  The ACKs for
    one received chunk are written with a single sendall().

    A live consumer subscribes before the go signal; one that reads stored
    messages (``from_store``) subscribes after it, since they start flowing as
    soon as it does.
    """
    conn = StompConnection(plan.host, plan.port, plan.stall_timeout)
    conn.connect(plan.durable_id)
    durable = {} if plan.durable_id is None else {b"activemq.subscriptionName": plan.durable_id}
    seen = bytearray(plan.messages)
    latencies = array("q")
    acking = plan.ack != b"auto"
    tag = plan.tag
    expected = plan.messages
    producers = plan.producers
    stale = duplicates = unknown = expired = out_of_order = bad_size = 0
    next_seq = list(range(producers))  # per producer
    received = 0
    unacked = 0  # received since the last ACK
    last_ack_id = b""

    def handle(frames: list[Frame], now: int) -> None:
        nonlocal stale, duplicates, unknown, expired, out_of_order, bad_size, received
        nonlocal unacked, last_ack_id
        acks: list[bytes] = []
        for frame in frames:
            if frame.command != b"MESSAGE":
                if frame.command == b"ERROR":
                    raise ServerError(frame)
                raise ProtocolError(f"consumer got unexpected {describe(frame)}")
            body = frame.body
            if acking:
                ack_id = frame.header(b"ack")
                if ack_id is None:
                    raise ProtocolError(
                        f"ack:{plan.ack.decode()} MESSAGE without ack header: {describe(frame, 60)}"
                    )
                unacked += 1
                last_ack_id = ack_id
                if unacked == plan.ack_every:
                    acks += (b"ACK\nid:", ack_id, b"\n\n\x00")
                    unacked = 0
            if body[SEQ_WIDTH:TAG_END] != tag:
                stale += 1
                continue
            seq = int(body[:SEQ_WIDTH])
            if seq >= expected:
                expires = int(frame.header(b"expires") or b"0")
                if 0 < expires <= now // 1_000_000:  # why it was not expected, most likely
                    expired += 1
                else:
                    unknown += 1
                continue
            if seen[seq]:
                duplicates += 1
                continue
            seen[seq] = 1
            received += 1
            producer = seq % producers
            if seq != next_seq[producer]:
                out_of_order += 1
            next_seq[producer] = seq + producers
            if len(body) != plan.body_size:
                bad_size += 1
            latencies.append(now - int(body[TAG_END:PREFIX_LEN]))
        if acks:
            conn.send(b"".join(acks))

    def ack_rest() -> None:
        """A cumulative ACK for what arrived since the last one (client mode)."""
        nonlocal unacked
        if unacked:
            conn.send(b"ACK\nid:" + last_ack_id + b"\n\n\x00")
            unacked = 0

    def subscribe() -> list[Frame]:
        return conn.subscribe(plan.destination, plan.ack, durable)

    if not plan.from_store:
        _note_stale(result, subscribe())
    progress = shared.progress
    _start(shared, result)
    if plan.from_store:
        handle(subscribe(), time.time_ns())
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
    ack_rest()
    _finish(result)
    conn.sock.settimeout(plan.grace)
    try:
        while True:
            handle(conn.recv_frames(), time.time_ns())
    except TimeoutError:
        pass
    ack_rest()
    conn.sock.settimeout(plan.stall_timeout)
    late = len(conn.disconnect())  # any MESSAGE after the grace period is one too many

    result.received = received
    result.latencies_ns = latencies.tobytes()
    if duplicates or unknown or late:
        result.problems.append(
            f"{duplicates} duplicate deliveries, {unknown} with a sequence number this phase "
            f"does not expect, {late} more arriving while disconnecting"
        )
    if expired:
        result.problems.append(f"{expired} messages were delivered after they expired")
    if out_of_order:
        result.problems.append(f"{out_of_order} messages arrived out of their producer's order")
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
