"""The soak's clients: threads that open STOMP sessions one after another until told
to stop, and end each one the way real clients end theirs.

A session ends gracefully (DISCONNECT with a receipt), with a FIN (the socket
closed with whatever was in hand), or with a RST (``SO_LINGER`` 0), chosen at
random; or the server closes it. Everything seen goes into the ``Ledger``.
Threads, not processes: the soak is about what the server does with many
clients' mistakes, not about their speed, and one ledger in one process keeps
the order of events exact. The wire is the load generator's (``stomp_wire``).
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from soak_ledger import Delivery, Ledger
from stomp_wire import Frame, ProtocolError, ServerError, StompConnection, encode_frame

ENDS = ("graceful", "fin", "rst")
BODY_SIZES = (32, 200, 1000, 4000)
SEPARATOR = b"|"  # a body is "<message id>|<padding>"


@dataclass
class Soak:
    """What every client shares: where the server is, the ledger, and when to stop."""

    host: str
    port: Callable[[], int]  # the server's port now (a restart may change it)
    ledger: Ledger
    queues: tuple[str, ...]
    topic: str
    rate: float  # messages per second of each producer
    timeout: float  # the longest any client waits for the server
    stop: threading.Event = field(default_factory=threading.Event)
    restarting: threading.Event = field(default_factory=threading.Event)


class Wire(StompConnection):
    """A ``StompConnection`` that can poll briefly and hang up either way."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        super().__init__(host, port, timeout)
        self.timeout = timeout

    def poll(self, timeout: float) -> list[Frame]:
        """The frames that arrive within ``timeout`` s (ConnectionError when closed)."""
        if self._pending:
            return self.recv_frames()
        self.sock.settimeout(timeout)
        try:
            return self.recv_frames()
        except (TimeoutError, BlockingIOError):  # BlockingIOError: timeout 0
            return []

    def send(self, data: bytes) -> None:
        self.sock.settimeout(self.timeout)  # a poll left a short one
        self.sock.sendall(data)

    def hang_up(self, how: str) -> None:
        """``fin``: close; ``rst``: reset, dropping what is unsent."""
        if how == "rst":
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()


def message_id(frame: Frame) -> str:
    return frame.body.split(SEPARATOR, 1)[0].decode(errors="replace")


class Worker(threading.Thread):
    """Sessions one after another until ``soak.stop``; subclasses say what a session does."""

    kind = "worker"
    ends: tuple[float, float, float] = (0.5, 0.25, 0.25)  # weights of ENDS

    def __init__(self, soak: Soak, name: str, seed: int) -> None:
        super().__init__(name=name, daemon=True)
        self.soak = soak
        self.ledger = soak.ledger
        self.rng = random.Random(seed)
        self.session = 0
        self.serial = 0

    def next_id(self) -> str:
        self.serial += 1
        return f"{self.name}-{self.serial}"

    def open(self, client_id: str | None = None) -> Wire:
        wire = Wire(self.soak.host, self.soak.port(), self.soak.timeout)
        wire.connect(client_id.encode() if client_id else None)
        return wire

    def run(self) -> None:
        while not self.soak.stop.is_set():
            if self.one_session():
                self.soak.stop.wait(self.rng.uniform(0, 1.5))
            else:
                time.sleep(0.2)  # the server is restarting, or out of connections

    def one_session(self) -> bool:
        """Open, work, end; False if no connection could be opened."""
        try:
            wire = self.open(self.client_id())
        except (OSError, ProtocolError, ServerError):
            return False
        self.session = self.ledger.new_session(self.name)
        how = self.rng.choices(ENDS, self.ends)[0]
        try:
            self.end(wire, self.work(wire) or how)
        except ServerError as error:
            self.ledger.error(f"{self.name} s{self.session}: {error}")
            self.lost_connection("server-error")
        except (OSError, ProtocolError) as error:
            if not (self.soak.restarting.is_set() or isinstance(error, ConnectionError)):
                self.ledger.error(f"{self.name} s{self.session}: {error!r}")
            self.lost_connection("server-closed")
        finally:
            wire.close()
        return True

    def client_id(self) -> str | None:
        return None

    def work(self, wire: Wire) -> str | None:
        """One session's work; it may say how the session must end (one of ``ENDS``)."""
        raise NotImplementedError

    def receive(self, frame: Frame, late: bool) -> None:
        """What to do with a frame; MESSAGE and RECEIPT are the subclass's."""
        if frame.command == b"ERROR":
            raise ServerError(frame)
        if frame.command == b"MESSAGE":
            self.on_message(frame, late)
        elif frame.command == b"RECEIPT":
            self.on_receipt(frame.header(b"receipt-id") or b"")
        else:
            raise ProtocolError(f"unexpected {frame.command!r}")

    def on_message(self, frame: Frame, late: bool) -> None:
        raise ProtocolError(f"{self.name} got a MESSAGE it never subscribed to")

    def on_receipt(self, receipt: bytes) -> None:
        pass

    def pump(self, wire: Wire, timeout: float) -> int:
        frames = wire.poll(timeout)
        for frame in frames:
            self.receive(frame, late=False)
        return len(frames)

    def before_end(self) -> None:
        """What ending the session gives up, recorded before the socket is touched."""

    def end(self, wire: Wire, how: str) -> None:
        self.before_end()
        self.ledger.session_ended(self.session, self.kind, how, known=True)
        if how != "graceful":
            wire.hang_up(how)
            return
        wire.send(encode_frame(b"DISCONNECT", {b"receipt": b"bye"}))
        deadline = time.monotonic() + self.soak.timeout
        while time.monotonic() < deadline:
            for frame in wire.poll(deadline - time.monotonic()):
                if frame.command == b"RECEIPT" and frame.header(b"receipt-id") == b"bye":
                    return
                self.receive(frame, late=True)
        self.ledger.error(f"{self.name} s{self.session}: no DISCONNECT receipt")

    def lost_connection(self, how: str) -> None:
        self.before_end()
        self.ledger.session_ended(self.session, self.kind, how, known=False)


class Producer(Worker):
    """SENDs to one destination per session, at ``soak.rate``; a persistent SEND asks
    for a receipt, at most ``window`` awaited at once. A session that hangs up leaves
    receipts unanswered: those messages may or may not have been kept."""

    kind = "producer"
    window = 16

    def __init__(self, soak: Soak, name: str, seed: int, persistent: bool) -> None:
        super().__init__(soak, name, seed)
        self.persistent = persistent
        self.kind = "producer" if persistent else "producer-np"
        self.awaited: set[bytes] = set()

    def destination(self) -> str:
        return self.rng.choice([*self.soak.queues, self.soak.topic])

    def send_one(self, wire: Wire, destination: str, extra: dict[bytes, bytes]) -> str:
        """Write one SEND of a fresh message (recorded first) and return its id."""
        mid = self.next_id()
        persistent = self.persistent if b"transaction" not in extra else self.rng.random() < 0.7
        headers = {
            b"destination": destination.encode(),
            b"persistent": b"true" if persistent else b"false",
        }
        if persistent and b"transaction" not in extra:
            headers[b"receipt"] = mid.encode()
            self.awaited.add(mid.encode())
        body = mid.encode() + SEPARATOR + b"x" * self.rng.choice(BODY_SIZES)
        self.ledger.written(mid, destination, persistent)
        wire.send(encode_frame(b"SEND", {**headers, **extra}, body))
        return mid

    def on_receipt(self, receipt: bytes) -> None:
        if receipt in self.awaited:
            self.awaited.discard(receipt)
            self.ledger.settle([receipt.decode()], "confirmed")

    def work(self, wire: Wire) -> str | None:
        self.awaited = set()
        destination = self.destination()
        for _ in range(self.rng.randint(10, 300)):
            if self.soak.stop.is_set():
                return None
            self.send_one(wire, destination, {})
            started = time.monotonic()
            while len(self.awaited) > self.window:
                if not self.pump(wire, self.soak.timeout) and time.monotonic() - started > 30:
                    raise ProtocolError(f"no receipt for {len(self.awaited)} SENDs in 30 s")
            self.pump(wire, 0)
            time.sleep(1 / self.soak.rate)
        return None


class TransactedProducer(Producer):
    """Transactions of 1-8 SENDs (persistent or not) to one destination, each
    COMMITted (with a receipt), ABORTed, or left open when the session ends."""

    def __init__(self, soak: Soak, name: str, seed: int) -> None:
        super().__init__(soak, name, seed, persistent=True)
        self.kind = "producer-tx"
        self.open_tx: list[str] = []  # SENT in the transaction not yet committed
        self.committing: list[str] = []  # COMMIT written, its receipt awaited
        self.answered: bytes | None = None

    def on_receipt(self, receipt: bytes) -> None:
        if receipt == b"commit":
            self.ledger.settle(self.committing, "confirmed")
            self.committing = []
        self.answered = receipt

    def work(self, wire: Wire) -> str | None:
        self.open_tx, self.committing = [], []
        destination = self.destination()
        for _ in range(self.rng.randint(1, 6)):
            if self.soak.stop.is_set():
                return None
            name = self.next_id().encode()
            wire.send(encode_frame(b"BEGIN", {b"transaction": name}))
            for _ in range(self.rng.randint(1, 8)):
                self.open_tx.append(self.send_one(wire, destination, {b"transaction": name}))
                time.sleep(1 / self.soak.rate)
            outcome = self.rng.choices((b"commit", b"abort", b"leave"), (0.6, 0.25, 0.15))[0]
            if outcome == b"leave":
                return None  # the session ends with the transaction open
            if outcome == b"abort":
                self.ledger.settle(self.open_tx, "cancelled")
            else:
                self.committing = self.open_tx
            self.open_tx, self.answered = [], None
            command = b"COMMIT" if outcome == b"commit" else b"ABORT"
            wire.send(encode_frame(command, {b"transaction": name, b"receipt": outcome}))
            deadline = time.monotonic() + self.soak.timeout
            while self.answered != outcome:
                if time.monotonic() > deadline:
                    raise ProtocolError(f"no receipt for {command!r} in {self.soak.timeout} s")
                self.pump(wire, 0.5)
        return None

    def before_end(self) -> None:
        """A transaction still open when its connection closes is aborted."""
        if self.open_tx:
            self.ledger.settle(self.open_tx, "cancelled")
            self.open_tx = []


@dataclass(frozen=True)
class ConsumerStyle:
    """How one consumer behaves.

    ``ack``: auto / client (cumulative) / client-individual; ``nack``: share of
    deliveries NACKed (client-individual); ``hold``: longest time a delivery is held
    before its ACK; ``slow``: pause after each MESSAGE; ``stall``: share of sessions
    that stop reading with a tiny receive buffer and then reset (auto mode: what the
    server had queued for it must go back to the queue); ``transacted``: share of
    ACK batches sent inside a transaction (then COMMITted, or ABORTed and kept).
    """

    ack: str
    nack: float = 0.0
    hold: float = 0.0
    slow: float = 0.0
    stall: float = 0.0
    transacted: float = 0.0


class Consumer(Worker):
    """Subscribes to a queue (or, with ``durable``, the topic as that durable
    subscription; with ``topic``, the topic non-durably) for 1-8 s per session and
    consumes in its ``style``; whatever it holds when the session ends goes back."""

    def __init__(
        self,
        soak: Soak,
        name: str,
        seed: int,
        style: ConsumerStyle,
        durable: str | None = None,
        topic: bool = False,
        queue: str | None = None,
    ) -> None:
        super().__init__(soak, name, seed)
        self.style = style
        self.durable = durable
        self.topic = topic
        self.queue = queue
        self.kind = f"{'durable' if durable else 'topic' if topic else 'consumer'}-{style.ack}"
        self.stream = ""
        self.held: list[tuple[bytes, Delivery, float]] = []  # ack id, delivery, arrival
        self.awaited: dict[bytes, list[Delivery]] = {}  # receipt -> deliveries it acks

    def client_id(self) -> str | None:
        return f"soak-{self.durable}" if self.durable else None

    def subscription(self) -> tuple[str, dict[bytes, bytes]]:
        """The destination and the extra SUBSCRIBE headers of a session."""
        if self.durable:
            self.stream = f"{self.soak.topic}#{self.durable}"
            return self.soak.topic, {b"activemq.subscriptionName": self.durable.encode()}
        if self.topic:
            self.stream = f"{self.soak.topic}@s{self.session}"
            return self.soak.topic, {}
        self.stream = self.queue or self.rng.choice(self.soak.queues)
        return self.stream, {}

    def work(self, wire: Wire) -> str | None:
        self.held, self.awaited = [], {}
        destination, extra = self.subscription()
        self.ledger.subscribed(self.session, self.stream, self.style.ack == "auto")
        stall = self.rng.random() < self.style.stall
        if stall:
            wire.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.subscribe(wire, destination, {**extra, b"activemq.prefetchSize": self.prefetch()})
        until = time.monotonic() + self.rng.uniform(1, 8)
        if stall:
            self.pump(wire, 0.5)
            self.soak.stop.wait(self.rng.uniform(2, 4))
            return "rst"
        while time.monotonic() < until and not self.soak.stop.is_set():
            if self.pump(wire, 0.05) and self.style.slow:
                time.sleep(self.style.slow)
            self.acknowledge(wire, time.monotonic() - self.rng.uniform(0, self.style.hold))
        return None

    def prefetch(self) -> bytes:
        return b"%d" % self.rng.choice((1, 5, 50, 1000))

    def subscribe(self, wire: Wire, destination: str, extra: dict[bytes, bytes]) -> None:
        headers = {
            b"id": b"0",
            b"destination": destination.encode(),
            b"ack": self.style.ack.encode(),
            b"receipt": b"sub",
        }
        wire.send(encode_frame(b"SUBSCRIBE", {**headers, **extra}))

    def on_message(self, frame: Frame, late: bool) -> None:
        auto = self.style.ack == "auto"
        redelivered = frame.header(b"redelivered") == b"true"
        delivery = self.ledger.delivered(
            self.stream, self.session, message_id(frame), auto, redelivered, late
        )
        if not (auto or late):
            self.held.append((frame.header(b"ack") or b"", delivery, time.monotonic()))

    def on_receipt(self, receipt: bytes) -> None:
        deliveries = self.awaited.pop(receipt, None)
        if deliveries is not None:
            self.ledger.acknowledged(deliveries)

    def acknowledge(self, wire: Wire, older_than: float) -> None:
        """NACK some deliveries, ACK those that arrived before ``older_than``."""
        if not self.held:
            return
        due = [h for h in self.held if h[2] <= older_than]
        if not due:
            return
        if self.style.ack == "client":  # one cumulative ACK for all that came before
            ack_id, last, _ = due[-1]
            covered = [d for _, d, _ in self.held if d.order <= last.order]
            self.held = [h for h in self.held if h[1].order > last.order]
            self.ledger.ack_written(covered)
            self.write_acks(wire, [(ack_id, covered)])
            return
        self.held = [h for h in self.held if h[2] > older_than]
        nacks = [h for h in due if self.rng.random() < self.style.nack]
        acks = [h for h in due if h not in nacks]
        if nacks:
            self.ledger.ack_written([d for _, d, _ in nacks], nack=True)
            wire.send(b"".join(encode_frame(b"NACK", {b"id": a}) for a, _, _ in nacks))
        if acks and self.rng.random() < self.style.transacted:
            self.ack_in_transaction(wire, acks)
        elif acks:
            self.ledger.ack_written([d for _, d, _ in acks])
            self.write_acks(wire, [(a, [d]) for a, d, _ in acks])

    def write_acks(self, wire: Wire, acks: list[tuple[bytes, list[Delivery]]]) -> None:
        frames = []
        for ack_id, covered in acks:
            receipt = b"a%d" % covered[-1].order
            self.awaited[receipt] = covered
            frames.append(encode_frame(b"ACK", {b"id": ack_id, b"receipt": receipt}))
        wire.send(b"".join(frames))

    def ack_in_transaction(self, wire: Wire, acks: list[tuple[bytes, Delivery, float]]) -> None:
        """ACKs inside a transaction: COMMITted (the ACKs take effect, its receipt is
        theirs) or ABORTed (the deliveries are still held, ACKed again later)."""
        name = self.next_id().encode()
        frames = [encode_frame(b"BEGIN", {b"transaction": name})]
        frames += [encode_frame(b"ACK", {b"id": a, b"transaction": name}) for a, _, _ in acks]
        wire.send(b"".join(frames))
        if self.rng.random() < 0.3:
            wire.send(encode_frame(b"ABORT", {b"transaction": name}))
            self.held += acks
            return
        covered = [d for _, d, _ in acks]
        self.ledger.ack_written(covered)
        self.awaited[name] = covered
        wire.send(encode_frame(b"COMMIT", {b"transaction": name, b"receipt": name}))


class HalfFrames(Worker):
    """Sends part of a frame and hangs up (FIN or RST): half a CONNECT, or after
    CONNECT half a persistent SEND (whose message must never be delivered), some
    with a large declared body of which only a part comes."""

    kind = "half-frame"
    ends = (0.0, 0.5, 0.5)

    def open(self, client_id: str | None = None) -> Wire:
        return Wire(self.soak.host, self.soak.port(), self.soak.timeout)

    def work(self, wire: Wire) -> str | None:
        variant = self.rng.choice(("connect", "send", "big-send"))
        self.kind = f"half-{variant}"
        if variant == "connect":
            frame = encode_frame(b"CONNECT", {b"accept-version": b"1.2", b"host": b"localhost"})
            wire.send(frame[: self.rng.randrange(1, len(frame) - 1)])
            return None
        wire.connect()
        destination = self.rng.choice(self.soak.queues)
        mid = self.next_id()
        size = 300_000 if variant == "big-send" else self.rng.choice(BODY_SIZES)
        body = mid.encode() + SEPARATOR + b"x" * size
        headers = {b"destination": destination.encode(), b"persistent": b"true"}
        frame = encode_frame(b"SEND", {**headers, b"receipt": mid.encode()}, body)
        self.ledger.written(mid, destination, True)
        self.ledger.settle([mid], "cancelled")
        cut = len(frame) - 1 - self.rng.randrange(0, size // 2)
        wire.send(frame[:cut])
        self.pump(wire, 0.2)  # let it arrive before the hang-up
        return None

    def on_receipt(self, receipt: bytes) -> None:
        self.ledger.error(f"{self.name}: a RECEIPT for half a SEND: {receipt!r}")


class Silent(Worker):
    """Sends half a CONNECT and then nothing, keeping the socket open for up to
    ``wait`` s: the server should close it at its CONNECT deadline (issue #9)."""

    kind = "silent"
    ends = (0.0, 0.5, 0.5)

    def __init__(self, soak: Soak, name: str, seed: int, wait: float) -> None:
        super().__init__(soak, name, seed)
        self.wait = wait

    def open(self, client_id: str | None = None) -> Wire:
        return Wire(self.soak.host, self.soak.port(), self.soak.timeout)

    def work(self, wire: Wire) -> str | None:
        wire.send(b"CONNECT\naccept-version:1.2\nhost:loc")
        started = time.monotonic()
        while time.monotonic() - started < self.wait and not self.soak.stop.is_set():
            try:
                wire.poll(0.5)
            except ConnectionError:
                if not self.soak.restarting.is_set():  # else a restart closed it
                    self.ledger.count("silent: closed by the server")
                raise
        if not self.soak.stop.is_set():
            self.ledger.count(f"silent: still open after {self.wait:.0f} s")
        return None


class Drain(Consumer):
    """One session that consumes a queue or a durable subscription to the end: every
    delivery ACKed at once with a receipt, until nothing came for ``idle`` s and every
    receipt is in. Run in the thread that calls ``drain``."""

    def __init__(
        self, soak: Soak, name: str, idle: float, durable: str | None, queue: str | None
    ) -> None:
        style = ConsumerStyle("client-individual")
        super().__init__(soak, name, 0, style, durable=durable, queue=queue)
        self.idle = idle
        self.kind = "drain"

    def work(self, wire: Wire) -> str | None:
        self.held, self.awaited = [], {}
        destination, extra = self.subscription()
        self.subscribe(wire, destination, extra)
        last = time.monotonic()
        while time.monotonic() - last < self.idle or self.awaited:
            if self.pump(wire, 0.1):
                last = time.monotonic()
            self.acknowledge(wire, time.monotonic())
            if time.monotonic() - last > self.soak.timeout:
                raise ProtocolError(f"{len(self.awaited)} ACK receipts missing")
        return "graceful"

    def drain(self) -> None:
        for _ in range(50):
            if self.one_session():
                return
            time.sleep(0.2)
        self.ledger.error(f"{self.name}: could not connect to drain")
