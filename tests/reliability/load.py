"""Raw-socket producers and a consumer that keep going until the server dies under them.

Each runs in its own thread, records what it sees in the ``Ledger`` and ends
when its connection closes (the kill); the consumer can also end once idle.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.integration.clients import TIMEOUT, RawClient
from tests.reliability.ledger import Delivery, Key, Ledger
from wiremq.modules.stomp.encoder import encode_frame
from wiremq.modules.stomp.frames import Frame

QUEUE = "/queue/kill9"


class CrashClient(RawClient):
    """A ``RawClient`` that tells a timeout from a closed connection and never raises
    because the server vanished."""

    def poll(self, timeout: float) -> Frame | None:
        """The next frame; None if none came within ``timeout`` or the connection closed
        (then ``closed`` is set). Frames that arrived before the close are still returned."""
        deadline = time.monotonic() + timeout
        while not self.frames and not self.closed and time.monotonic() < deadline:
            self._read(deadline)
        return self.frames.pop(0) if self.frames else None

    def write(self, data: bytes) -> bool:
        """Put ``data`` on the socket; False (and ``closed``) if the server is gone."""
        self.sock.settimeout(TIMEOUT)  # a read may have left a tiny timeout behind
        try:
            self.sock.sendall(data)
        except OSError:
            self.closed = True
            return False
        return True


@dataclass
class Producer:
    """Producer K: persistent SENDs ``producer-K:SEQ``, a receipt on every
    ``receipt_every``-th, at most ``window`` receipts awaited at once, at most ``rate``
    messages a second. Its seq goes on across rounds."""

    number: int
    receipt_every: int
    window: int
    rate: float
    next_seq: int = 0

    def run(self, client: CrashClient, ledger: Ledger, round_: int) -> None:
        """Send until the connection closes."""
        unconfirmed: list[int] = []  # written on this connection, no receipt yet
        awaited: deque[int] = deque()  # seqs whose SEND asked for a receipt
        started, sent = time.monotonic(), 0
        while not client.closed:
            ahead = sent / self.rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
            sent += self.receipt_every
            batch: list[bytes] = []
            for _ in range(self.receipt_every):
                seq = self.next_seq
                self.next_seq += 1
                headers = [("destination", QUEUE), ("persistent", "true")]
                if len(batch) == self.receipt_every - 1:
                    headers.append(("receipt", str(seq)))
                    awaited.append(seq)
                batch.append(
                    encode_frame("SEND", headers, f"producer-{self.number}:{seq}".encode())
                )
                ledger.wrote((self.number, seq), round_)
                unconfirmed.append(seq)
            if not client.write(b"".join(batch)):
                return
            while len(awaited) >= self.window and not client.closed:
                frame = client.poll(TIMEOUT)
                if frame is None:
                    if not client.closed:
                        ledger.error(f"producer-{self.number}: no receipt in {TIMEOUT} s")
                    return
                if frame.command != "RECEIPT":
                    ledger.error(f"producer-{self.number} got {frame.command} {frame.headers}")
                    return
                upto = int(frame.headers["receipt-id"])
                if upto != awaited.popleft():
                    ledger.error(f"producer-{self.number}: receipt {upto} out of order")
                    return
                done: list[Key] = [(self.number, s) for s in unconfirmed if s <= upto]
                unconfirmed = [s for s in unconfirmed if s > upto]
                ledger.confirm(done, round_)


@dataclass
class Consumer:
    """One connection, ``ack:client-individual``. ACKs (each with a receipt) go out
    ``ack_batch`` at a time, for all but the newest ``ack_lag`` deliveries, and for
    all of them once nothing arrived for a moment: so that some deliveries are still
    unacknowledged when the kill comes."""

    round: int
    ack_batch: int
    ack_lag: int = 0
    subscribed: bool = False  # the SUBSCRIBE's receipt came
    awaited: dict[str, Delivery] = field(default_factory=dict)  # by its ACK's receipt-id

    def subscribe(self, client: CrashClient) -> bool:
        """Send the SUBSCRIBE; its receipt is read by ``run`` (messages may come first)."""
        return client.write(
            encode_frame(
                "SUBSCRIBE",
                [
                    ("id", "0"),
                    ("destination", QUEUE),
                    ("ack", "client-individual"),
                    ("receipt", "s"),
                ],
            )
        )

    def run(
        self,
        client: CrashClient,
        ledger: Ledger,
        until_idle: Callable[[float], bool] | None = None,
    ) -> None:
        """Consume until the connection closes or, with every ACK receipted, until
        ``until_idle(seconds since the last frame)`` says so."""
        unacked: list[tuple[str, Delivery]] = []
        last = time.monotonic()
        while not client.closed:
            frame = client.poll(0.02)
            if frame is None:
                if unacked:
                    self._ack(client, ledger, unacked)
                    unacked = []
                    continue
                idle = time.monotonic() - last
                if (self.awaited or not self.subscribed) and idle > TIMEOUT:
                    ledger.error(f"consumer r{self.round}: a receipt took over {TIMEOUT} s")
                    return
                done = self.subscribed and not self.awaited
                if done and until_idle is not None and until_idle(idle):
                    return
                continue
            last = time.monotonic()
            if frame.command == "MESSAGE":
                redelivered = frame.headers.get("redelivered") == "true"
                delivery = ledger.delivered(frame.body.decode(), self.round, redelivered)
                unacked.append((frame.headers["ack"], delivery))
                if len(unacked) >= self.ack_lag + self.ack_batch:
                    self._ack(client, ledger, unacked[: self.ack_batch])
                    del unacked[: self.ack_batch]
            elif frame.command == "RECEIPT" and frame.headers["receipt-id"] in self.awaited:
                ledger.acknowledged(self.awaited.pop(frame.headers["receipt-id"]))
            elif frame.command == "RECEIPT" and frame.headers["receipt-id"] == "s":
                self.subscribed = True
            else:
                ledger.error(f"consumer r{self.round} got {frame.command} {frame.headers}")
                return

    def _ack(
        self, client: CrashClient, ledger: Ledger, unacked: list[tuple[str, Delivery]]
    ) -> None:
        frames = []
        for ack_id, delivery in unacked:
            receipt = f"a{delivery.order}"
            self.awaited[receipt] = delivery
            frames.append(encode_frame("ACK", [("id", ack_id), ("receipt", receipt)]))
        if client.write(b"".join(frames)):
            ledger.ack_written([delivery for _, delivery in unacked])
