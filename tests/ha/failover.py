"""stomp.py clients that fail over between the nodes of an HA pair, and a ledger of what
they saw: every SEND and its RECEIPT, every delivery, every ACK and its RECEIPT.

A producer sends persistent messages and waits for each one's RECEIPT; a
consumer acknowledges each delivery (client-individual) asking for a RECEIPT.
When its connection drops (the active died or stepped down) a client connects
again through stomp.py's host list, which skips the standby's closed port, and
carries on. What is not receipted when the connection drops is unconfirmed:
it may or may not have happened, and the rules allow either.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

import stomp
from stomp.exception import ConnectFailedException, StompException
from stomp.utils import Frame

QUEUE = "/queue/ha"


@dataclass
class Delivery:
    body: str
    redelivered: bool
    order: int  # in the ledger's order of events


@dataclass
class Ledger:
    """What the clients saw, in one order (``_next``) for all of them."""

    sent: set[str] = field(default_factory=set)
    confirmed: set[str] = field(default_factory=set)  # SEND or COMMIT receipted
    deliveries: list[Delivery] = field(default_factory=list)
    acked: dict[str, int] = field(default_factory=dict)  # body -> order of its ACK's receipt
    errors: list[str] = field(default_factory=list)  # ERROR frames
    lock: threading.Lock = field(default_factory=threading.Lock)
    _order: itertools.count[int] = field(default_factory=itertools.count)

    def record(self, action: str, body: str, redelivered: bool = False) -> None:
        with self.lock:
            order = next(self._order)
            if action == "sent":
                self.sent.add(body)
            elif action == "confirmed":
                self.confirmed.add(body)
            elif action == "delivered":
                self.deliveries.append(Delivery(body, redelivered, order))
            elif action == "acked":
                self.acked.setdefault(body, order)

    def delivered_bodies(self) -> set[str]:
        with self.lock:
            return {d.body for d in self.deliveries}

    def problems(self) -> dict[str, list[str]]:
        """Every broken rule with the messages that broke it (empty lists: none)."""
        with self.lock:
            seen: dict[str, list[Delivery]] = defaultdict(list)
            for delivery in self.deliveries:
                seen[delivery.body].append(delivery)
            return {
                # A receipted SEND (or COMMIT) that no consumer ever got.
                "lost": sorted(self.confirmed - seen.keys()),
                # A delivery after the message's ACK was receipted (committed).
                "delivered after its ACK was receipted": sorted(
                    body
                    for body, order in self.acked.items()
                    if any(d.order > order for d in seen[body])
                ),
                # A message nobody sent.
                "phantom": sorted(seen.keys() - self.sent),
                # A delivery after an earlier one of the same message, not flagged so.
                "delivered again without redelivered:true": sorted(
                    body
                    for body, found in seen.items()
                    if any(not d.redelivered for d in found[1:])
                ),
            }


class _Listener(stomp.ConnectionListener):
    """Hands one connection's frames to its client, while it is the client's current one
    (an older connection's late disconnect notice is ignored)."""

    def __init__(self, client: FailoverClient, generation: int) -> None:
        self.client = client
        self.generation = generation

    def _current(self) -> bool:
        return self.generation == self.client.generation

    def on_receipt(self, frame: Frame) -> None:
        if self._current():
            self.client.on_receipt(frame)

    def on_error(self, frame: Frame) -> None:
        if self._current():
            self.client.on_error(frame)

    def on_message(self, frame: Frame) -> None:
        if self._current():
            self.client.on_message(frame)

    def on_disconnected(self) -> None:
        if self._current():
            self.client.on_disconnected()


class FailoverClient:
    """One stomp.py connection over the pair's host list that connects again when it drops."""

    def __init__(self, hosts: list[tuple[str, int]], ledger: Ledger, name: str) -> None:
        self.hosts = hosts
        self.ledger = ledger
        self.name = name
        self.generation = 0
        self.connection = self._new_connection()
        self.receipts: set[str] = set()
        self.changed = threading.Condition()
        self.lost = True  # not connected (yet, or any more)
        self.connects = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _new_connection(self) -> stomp.Connection12:
        self.generation += 1
        connection = stomp.Connection12(
            self.hosts,
            reconnect_sleep_initial=0.05,
            reconnect_sleep_increase=0.5,
            reconnect_sleep_jitter=0.1,
            reconnect_sleep_max=0.5,
            reconnect_attempts_max=3,
            heartbeats=(0, 0),
            timeout=5,
        )
        connection.set_listener("failover", _Listener(self, self.generation))
        return connection

    # -- frames (stomp.py's receiver thread) -------------------------------------------------

    def on_message(self, frame: Frame) -> None:
        """A MESSAGE (consumers)."""

    def on_receipt(self, frame: Frame) -> None:
        with self.changed:
            self.receipts.add(frame.headers["receipt-id"])
            self.changed.notify_all()

    def on_error(self, frame: Frame) -> None:
        self.ledger.errors.append(f"{self.name}: {frame.headers.get('message')} {frame.body}")

    def on_disconnected(self) -> None:
        with self.changed:
            self.lost = True
            self.changed.notify_all()

    # -- the client's thread -------------------------------------------------------------------

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self.stopping.set()
        with self.changed:
            self.changed.notify_all()
        self.thread.join(timeout)
        with contextlib.suppress(StompException, OSError):
            self.connection.disconnect()

    def connect(self) -> bool:
        """Connect through the host list (the standby's port refuses); False if stopping."""
        while not self.stopping.is_set():
            old = self.connection
            self.connection = self._new_connection()
            try:
                if old.is_connected():
                    old.disconnect()
            except (StompException, OSError):
                pass
            with self.changed:
                self.lost = False
            try:
                self.connection.connect(wait=True)
            except (ConnectFailedException, StompException, OSError):
                time.sleep(0.05)
                continue
            self.connects += 1
            self.connected()
            return True
        return False

    def connected(self) -> None:
        """Just connected (subscribe here)."""

    def wait_receipt(self, receipt: str, timeout: float) -> bool:
        """Whether ``receipt`` came before the connection dropped (or ``timeout``)."""
        with self.changed:
            self.changed.wait_for(
                lambda: receipt in self.receipts or self.lost or self.stopping.is_set(), timeout
            )
            return receipt in self.receipts

    def _run(self) -> None:
        raise NotImplementedError


class Producer(FailoverClient):
    """Sends ``NAME:SEQ`` persistent messages to ``QUEUE``, each waiting for its RECEIPT;
    with ``transactions``, every such message goes in a transaction of its own, committed
    with a receipt (a receipted COMMIT confirms it)."""

    def __init__(
        self, hosts: list[tuple[str, int]], ledger: Ledger, name: str, transactions: bool = False
    ) -> None:
        super().__init__(hosts, ledger, name)
        self.transactions = transactions
        self.seq = 0

    def _run(self) -> None:
        while not self.stopping.is_set():
            if self.lost and not self.connect():
                return
            self.seq += 1
            body = f"{self.name}:{self.seq}"
            receipt = f"r-{body}"
            self.ledger.record("sent", body)
            try:
                if self.transactions:
                    self.connection.begin(body)
                    self.connection.send(
                        QUEUE, body, headers={"persistent": "true", "transaction": body}
                    )
                    self.connection.commit(body, headers={"receipt": receipt})
                else:
                    self.connection.send(
                        QUEUE, body, headers={"persistent": "true", "receipt": receipt}
                    )
            except (StompException, OSError):
                with self.changed:
                    self.lost = True
                continue
            if self.wait_receipt(receipt, timeout=60):
                self.ledger.record("confirmed", body)


class Consumer(FailoverClient):
    """Takes ``QUEUE``'s messages (client-individual, ``prefetch`` at a time) and acknowledges
    each with a receipt."""

    def __init__(
        self, hosts: list[tuple[str, int]], ledger: Ledger, name: str, prefetch: int = 20
    ) -> None:
        super().__init__(hosts, ledger, name)
        self.prefetch = prefetch
        self.acks = itertools.count()
        self.pending: dict[str, str] = {}  # ACK receipt -> body

    def connected(self) -> None:
        self.connection.subscribe(
            QUEUE,
            id="1",
            ack="client-individual",
            headers={"activemq.prefetchSize": str(self.prefetch)},
        )

    def on_message(self, frame: Frame) -> None:
        body = frame.body if isinstance(frame.body, str) else frame.body.decode()
        self.ledger.record("delivered", body, frame.headers.get("redelivered") == "true")
        receipt = f"a-{self.name}-{next(self.acks)}"
        with self.changed:
            self.pending[receipt] = body
        # If the connection dropped, the ACK is unconfirmed: the message may come again.
        with contextlib.suppress(StompException, OSError):
            self.connection.ack(frame.headers["ack"], receipt=receipt)

    def on_receipt(self, frame: Frame) -> None:
        with self.changed:
            body = self.pending.pop(frame.headers["receipt-id"], None)
        if body is not None:
            self.ledger.record("acked", body)
        super().on_receipt(frame)

    def _run(self) -> None:
        while not self.stopping.is_set():
            if self.lost and not self.connect():
                return
            with self.changed:
                self.changed.wait_for(lambda: self.lost or self.stopping.is_set())


def load(hosts: list[tuple[str, int]], ledger: Ledger) -> tuple[list[Producer], list[Consumer]]:
    """The HA tests' load, started: two producers waiting on every receipt, one
    committing a transaction per message, two client-individual consumers."""
    producers = [Producer(hosts, ledger, f"p{i}") for i in range(2)]
    producers.append(Producer(hosts, ledger, "t", transactions=True))
    consumers = [Consumer(hosts, ledger, f"c{i}") for i in range(2)]
    for client in (*producers, *consumers):
        client.start()
    return producers, consumers


def drained(ledger: Ledger, timeout: float) -> bool:
    """Wait until every confirmed message was delivered and stayed so for a moment: the
    consumers have caught up with what was receipted."""
    deadline = time.monotonic() + timeout
    settled_since: float | None = None
    while time.monotonic() < deadline:
        missing = ledger.confirmed - ledger.delivered_bodies()
        if missing:
            settled_since = None
        elif settled_since is None:
            settled_since = time.monotonic()
        elif time.monotonic() - settled_since > 1.0:
            return True
        time.sleep(0.05)
    return False
