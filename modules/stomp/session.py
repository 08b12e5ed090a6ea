"""Sans-io per-connection STOMP session: negotiation, heart-beats, validation, receipts.

The session turns bytes into validated requests for a ``SessionHandler`` (the
broker side of the connection) and writes its own frames (CONNECTED, RECEIPT,
ERROR, heart-beats) to the client's egress. Time comes from an injected clock,
so heart-beat rules are tested on a fake one. Any ``ProtocolError`` raised while
handling a frame becomes an ERROR frame, after which the connection is closed,
as the STOMP specification requires.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from wiremq.modules.egress import Egress
from wiremq.modules.stomp.codec import DecoderLimits, FrameDecoder, encode_frame, escape
from wiremq.modules.stomp.frames import VERSIONS, Frame, ProtocolError

ACK_MODES = ("auto", "client", "client-individual")


@dataclass(frozen=True, slots=True)
class SessionSettings:
    """What the server offers every connection (from the parameter registry)."""

    server_name: str = "wiremq"
    heartbeat_send_ms: int = 10000  # how often the server can send heart-beats
    heartbeat_receive_ms: int = 10000  # how often the server wants to hear from the client
    heartbeat_grace: float = 2.0  # silence tolerated: this many receive intervals
    limits: DecoderLimits = DecoderLimits()


class SessionHandler(Protocol):
    """The broker side of one connection; raises ``ProtocolError`` to refuse a request."""

    def on_connect(self, frame: Frame) -> None: ...
    def on_send(self, frame: Frame, destination: str) -> None: ...
    def on_subscribe(self, frame: Frame, sub_id: str, destination: str, ack_mode: str) -> None: ...
    def on_unsubscribe(self, frame: Frame, sub_id: str) -> None: ...
    def on_ack(self, frame: Frame, nack: bool) -> bool:
        """Apply an ACK/NACK; False when the handler sends the receipt itself, later."""

    def on_transaction(self, frame: Frame, transaction: str) -> None: ...
    def when_idle(self, action: Callable[[], None]) -> None:
        """Run ``action`` once every message this client sent has left the pipeline."""

    def closing(self) -> None:
        """The session is closing (after DISCONNECT or an ERROR): deliver nothing more."""


class StompSession:
    """Protocol state of one client connection."""

    def __init__(
        self,
        handler: SessionHandler,
        egress: Egress,
        clock: Callable[[], float],
        session_id: str,
        settings: SessionSettings | None = None,
    ) -> None:
        self.handler = handler
        self.egress = egress
        self.clock = clock
        self.session_id = session_id
        self.settings = settings or SessionSettings()
        self.decoder = FrameDecoder(self.settings.limits)
        self.version: str | None = None  # None until CONNECTED was sent
        self.closed = False
        self.disconnecting = False  # DISCONNECT or a bad frame read: nothing more is read
        self.send_interval = 0.0  # seconds between server heart-beats, 0 = none
        self.receive_interval = 0.0  # seconds of client silence tolerated, 0 = no check
        self.last_received = clock()
        self.unread = False  # the server stopped reading this client (flow control)
        self._last_check = self.last_received  # last heart-beat check
        self._heartbeat_due = self.last_received  # when the next server heart-beat is due
        self._dispatch: dict[str, Callable[[Frame], None]] = {
            "SEND": self._send,
            "SUBSCRIBE": self._subscribe,
            "UNSUBSCRIBE": self._unsubscribe,
            "ACK": self._ack,
            "NACK": self._nack,
            "BEGIN": self._transaction,
            "COMMIT": self._transaction,
            "ABORT": self._transaction,
            "DISCONNECT": self._disconnect,
        }

    # -- input -------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        """Feed bytes from the socket; handles every frame they complete."""
        if self.closed or self.disconnecting:
            return
        self.last_received = self.clock()
        frames = self._decode(data)
        if self.version is None and frames:
            self._handle(frames[0])  # CONNECT: the rest is decoded with its version
            frames = self._decode(b"") if not self.closed else []
        for frame in frames:
            if self.closed or self.disconnecting:
                return
            self._handle(frame)
        if self.decoder.error is not None and not self.closed:
            self.fail(self.decoder.error)

    def _decode(self, data: bytes) -> list[Frame]:
        try:
            return self.decoder.feed(data)
        except ProtocolError as error:
            self.fail(error)
            return []

    def _handle(self, frame: Frame) -> None:
        try:
            if self.version is None:
                self._connect(frame)
                return
            action = self._dispatch.get(frame.command)
            if action is None:
                raise ProtocolError(
                    "unknown command", f"{frame.command[:64]!r} is not a STOMP client command"
                )
            action(frame)
        except ProtocolError as error:
            if error.receipt_id is None:
                error.receipt_id = frame.headers.get("receipt")
            self.fail(error)

    # -- output ------------------------------------------------------------------------

    def send_receipt(self, receipt_id: str) -> None:
        """Confirm a client request that asked for a receipt."""
        if not self.closed:
            self.egress.push(b"RECEIPT\nreceipt-id:" + self._escape(receipt_id) + b"\n\n\0")

    def fail(self, error: ProtocolError) -> None:
        """Stop reading, and once earlier frames are done send an ERROR and close.

        Messages the client sent before the bad frame still get their receipts.
        """
        if self.closed or self.disconnecting:
            return
        self.disconnecting = True
        self.handler.when_idle(lambda: self._send_error(error))

    def _send_error(self, error: ProtocolError) -> None:
        headers = [("message", error.message), ("content-type", "text/plain")]
        if error.receipt_id is not None:
            headers.append(("receipt-id", error.receipt_id))
        if self.version is None:
            headers.append(("version", ",".join(VERSIONS)))
        body = (error.detail or error.message).encode()
        self.close(encode_frame("ERROR", headers, body, self.version or "1.2"))

    def close(self, last_frame: bytes = b"") -> None:
        """Close once queued frames, then ``last_frame``, are written; later input is ignored."""
        if not self.closed:
            self.closed = True
            self.handler.closing()
            self.egress.close_after_flush(last_frame)

    def reading_stopped(self, stopped: bool) -> None:
        """Flow control stopped (or restarted) reading: silence then is not the client's."""
        self.unread = stopped
        self.last_received = self.clock()

    def _escape(self, value: str) -> bytes:
        return escape(value, self.version or "1.2").encode()

    # -- heart-beats -------------------------------------------------------------------

    def check_heartbeats(self) -> float | None:
        """Send a heart-beat if the server was idle, close if the client went silent.

        Returns the clock time at which to call again, or None when neither side
        heart-beats.
        """
        if self.closed or (not self.send_interval and not self.receive_interval):
            return None
        now = self.clock()
        deadlines = []
        if self.receive_interval:
            if self.unread:  # its heart-beats wait unread in the socket: not its silence
                self.last_received = now
            deadline = self.last_received + self.receive_interval
            if now >= deadline:
                self.fail(
                    ProtocolError(
                        "heart-beat timeout",
                        f"nothing received for {now - self.last_received:.1f} s",
                    )
                )
                return None
            deadlines.append(deadline)
        if self.send_interval:
            # Checked every half interval: a write seen now happened after the previous
            # check at the earliest, so the next heart-beat is due an interval after that.
            if self.egress.active:
                self.egress.active = False
                self._heartbeat_due = self._last_check + self.send_interval
            elif now >= self._heartbeat_due - 1e-9:
                self.egress.push(b"\n")
                self.egress.active = False
                self._heartbeat_due = now + self.send_interval
            self._last_check = now
            deadlines.append(min(self._heartbeat_due, now + self.send_interval / 2))
        return min(deadlines)

    # -- frames ------------------------------------------------------------------------

    def _connect(self, frame: Frame) -> None:
        if frame.command not in ("CONNECT", "STOMP"):
            raise ProtocolError(
                "not connected", f"expected CONNECT or STOMP, got {frame.command[:64]!r}"
            )
        offered = frame.headers.get("accept-version", "1.0").split(",")
        common = [v for v in VERSIONS if v in {o.strip() for o in offered}]
        if not common:
            raise ProtocolError(
                "unsupported protocol version",
                f"client offers {','.join(offered)!r}; this server supports {', '.join(VERSIONS)}",
            )
        version = common[-1]
        client_send, client_receive = _parse_heartbeat(frame.headers.get("heart-beat", "0,0"))
        self.handler.on_connect(frame)
        settings = self.settings
        server_send = settings.heartbeat_send_ms if client_receive else 0
        server_receive = settings.heartbeat_receive_ms if client_send else 0
        if server_send:
            self.send_interval = max(server_send, client_receive) / 1000
        if server_receive:
            self.receive_interval = (
                max(server_receive, client_send) * settings.heartbeat_grace / 1000
            )
        self.version = version
        self.decoder.version = version
        headers = [
            ("version", version),
            ("server", settings.server_name),
            ("session", self.session_id),
            ("heart-beat", f"{server_send},{server_receive}"),
        ]
        self.egress.push(encode_frame("CONNECTED", headers))

    def _require(self, frame: Frame, name: str) -> str:
        value = frame.headers.get(name)
        if value is None or (not value and name != "transaction"):
            raise ProtocolError(
                f"missing {name} header", f"a {frame.command} frame needs a '{name}' header"
            )
        return value

    def _send(self, frame: Frame) -> None:
        self.handler.on_send(frame, self._require(frame, "destination"))

    def _subscribe(self, frame: Frame) -> None:
        destination = self._require(frame, "destination")
        if self.version == "1.0":
            sub_id = frame.headers.get("id") or destination
        else:
            sub_id = self._require(frame, "id")
        ack_mode = frame.headers.get("ack", "auto")
        if ack_mode not in ACK_MODES:
            raise ProtocolError(
                "invalid ack mode", f"ack {ack_mode[:64]!r} is not one of {', '.join(ACK_MODES)}"
            )
        self.handler.on_subscribe(frame, sub_id, destination, ack_mode)
        self._receipt(frame)

    def _unsubscribe(self, frame: Frame) -> None:
        if self.version == "1.0":
            sub_id = frame.headers.get("id") or frame.headers.get("destination")
            if not sub_id:
                raise ProtocolError(
                    "missing id header", "an UNSUBSCRIBE frame needs an 'id' or 'destination'"
                )
        else:
            sub_id = self._require(frame, "id")
        self.handler.on_unsubscribe(frame, sub_id)
        self._receipt(frame)

    def _ack(self, frame: Frame) -> None:
        self._require_ack_headers(frame)
        if self.handler.on_ack(frame, nack=False):
            self._receipt(frame)

    def _nack(self, frame: Frame) -> None:
        if self.version == "1.0":
            raise ProtocolError("unknown command", "NACK is not part of STOMP 1.0")
        self._require_ack_headers(frame)
        if self.handler.on_ack(frame, nack=True):
            self._receipt(frame)

    def _require_ack_headers(self, frame: Frame) -> None:
        if self.version == "1.2":
            self._require(frame, "id")
        else:
            self._require(frame, "message-id")
            if self.version == "1.1":
                self._require(frame, "subscription")

    def _transaction(self, frame: Frame) -> None:
        self.handler.on_transaction(frame, self._require(frame, "transaction"))
        self._receipt(frame)

    def _disconnect(self, frame: Frame) -> None:
        """Stop reading; the receipt follows once earlier frames are done."""
        self.disconnecting = True
        receipt = frame.headers.get("receipt")

        def goodbye() -> None:
            if receipt is not None:
                self.send_receipt(receipt)
            self.close()

        self.handler.when_idle(goodbye)

    def _receipt(self, frame: Frame) -> None:
        receipt = frame.headers.get("receipt")
        if receipt is not None:
            self.send_receipt(receipt)


def _parse_heartbeat(value: str) -> tuple[int, int]:
    parts = value.split(",")
    if len(parts) != 2 or not all(p.strip().isascii() and p.strip().isdigit() for p in parts):
        raise ProtocolError(
            "invalid heart-beat header", f"heart-beat {value[:64]!r} is not two integers 'cx,cy'"
        )
    return int(parts[0]), int(parts[1])
