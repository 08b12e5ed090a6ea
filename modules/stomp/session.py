"""Sans-io per-connection STOMP session, in the shape of h11: bytes in, events out.

``receive_data(data, now)`` decodes what the client sent and returns it as
request events (``events.py``), each checked for what its command and the
negotiated protocol version require; ``send(reply) -> bytes`` encodes the
server's CONNECTED, RECEIPT, ERROR and heart-beats for this connection. The
session calls nobody and writes nothing: the connection that owns it acts on
the events and writes the bytes. Time is passed in, so heart-beat rules are
tested on a fake clock.

Once the client broke the protocol (a ``BadInput`` event) or said DISCONNECT,
nothing more is read; once an ERROR was encoded, nothing more is sent (but for
the ERRORs that name a discarded transaction, ``TransactionError``, or a
subscription that lost its read permission, ``SubscriptionError``, after which the
connection goes on).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

from wiremq.config.groups import ListenerSettings
from wiremq.modules.stomp import encoder
from wiremq.modules.stomp.codec import DecoderLimits, FrameDecoder
from wiremq.modules.stomp.events import (
    Abort,
    Acknowledge,
    BadInput,
    Begin,
    Commit,
    Connect,
    Connected,
    Disconnect,
    Heartbeat,
    Receipt,
    Recover,
    Recovered,
    Reply,
    Request,
    Send,
    Subscribe,
    SubscriptionError,
    TransactionError,
    Unsubscribe,
)
from wiremq.modules.stomp.frames import VERSIONS, Frame, ProtocolError

ACK_MODES = ("auto", "client", "client-individual")
_new = tuple.__new__  # an event without its NamedTuple's Python-level __new__: hot paths
SERVER_NAME = "wiremq"


@dataclass(frozen=True, slots=True)
class SessionSettings:
    """What the server offers every connection, from the StompListener parameters."""

    heartbeat_send_ms: int  # the shortest interval the server sends heart-beats at (0: never)
    heartbeat_receive_ms: int  # the shortest it expects them from a client at (0: never)
    heartbeat_grace: float  # silence tolerated: this many receive intervals
    limits: DecoderLimits

    @classmethod
    def of(cls, listener: ListenerSettings) -> SessionSettings:
        return cls(
            listener.heartbeatsend,
            listener.heartbeatreceive,
            listener.heartbeatgrace,
            DecoderLimits(listener.maxbodysize, listener.maxheaders, listener.maxheaderlength),
        )


class Tick(NamedTuple):
    """What a heart-beat check found: bytes to send now (a heart-beat, or nothing), when to
    check again (None: never), and the error if the client went silent."""

    send: bytes
    next_at: float | None
    timed_out: ProtocolError | None


class StompSession:
    """Protocol state of one client connection."""

    def __init__(self, settings: SessionSettings, session_id: str, now: float) -> None:
        self.settings = settings
        self.session_id = session_id
        self.decoder = FrameDecoder(settings.limits, sends=True)
        self.version: str | None = None  # None until CONNECT was read
        self.reading = True  # False after DISCONNECT or bad input: nothing more is read
        self.closed = False  # an ERROR was sent: nothing more is sent
        self.send_interval = 0.0  # seconds between server heart-beats, 0 = none
        self.receive_interval = 0.0  # seconds of client silence tolerated, 0 = no check
        self.heart_beat = (0, 0)  # what CONNECTED says: (server sends, server expects), ms
        self.last_received = now
        self.unread = False  # the server stopped reading this client (flow control)
        self._last_check = now
        self._heartbeat_due = now
        self._requests: dict[str, Callable[[Frame], Request]] = {
            "SEND": self._send,
            "SUBSCRIBE": self._subscribe,
            "UNSUBSCRIBE": self._unsubscribe,
            "ACK": partial(self._acknowledge, False),  # no method of its own: one call less
            "NACK": self._nack,
            "BEGIN": self._begin,
            "COMMIT": self._commit,
            "ABORT": self._abort,
            "RECOVER": self._recover,
            "DISCONNECT": self._disconnect,
        }

    # -- input -------------------------------------------------------------------------

    def receive_data(self, data: bytes, now: float) -> list[Request]:
        """The requests the bytes complete, in order; a ``BadInput`` ends the list. Once
        nothing more is read, the bytes are thrown away (``FrameDecoder.discard``)."""
        if not self.reading:
            self.decoder.discard(data)
            return []
        self.last_received = now
        events: list[Request] = []
        while True:  # once, but for a CONNECT: the decoder stops after it (see below)
            try:
                frames = self.decoder.feed(data)
            except ProtocolError as refusal:
                events.append(self._bad(None, refusal))
                frames = []
            if self.version is not None or not frames:
                break
            # Until CONNECT is read the decoder returns one frame at a time, for the
            # version it negotiates decides how the rest is decoded.
            events.append(self._request(frames[0], self._connect))
            if not self.reading:
                frames = []
                break
            data = b""
        requests = self._requests
        append = events.append
        frame = None
        try:
            for frame in frames:
                if not self.reading:
                    break
                if type(frame) is Send:  # most frames: decoded to the request
                    append(frame)
                    continue
                command = frame.command
                action = requests.get(command)
                if action is None:
                    raise _unknown_command(command)
                append(action(frame))
        except ProtocolError as refused:
            append(self._bad(frame, refused))
        error = self.decoder.error
        if error is not None and self.reading:
            events.append(self._bad(None, error))
        return events

    def _request(self, frame: Frame, action: Callable[[Frame], Request]) -> Request:
        try:
            return action(frame)
        except ProtocolError as error:
            return self._bad(frame, error)

    def _bad(self, frame: Frame | None, error: ProtocolError) -> BadInput:
        self.reading = False
        if error.receipt_id is None and frame is not None:
            error.receipt_id = frame.headers.get("receipt")
        return BadInput(error)

    # -- output ------------------------------------------------------------------------

    def send(self, reply: Reply) -> bytes:
        """The bytes of a reply to this client (b"" once an ERROR has been sent)."""
        if self.closed:
            return b""
        version = self.version or VERSIONS[-1]
        if isinstance(reply, Receipt):
            return encoder.receipt(reply.receipt_id, version)
        if isinstance(reply, Heartbeat):
            return encoder.HEARTBEAT
        if isinstance(reply, Connected):
            return encoder.connected(version, SERVER_NAME, self.session_id, self.heart_beat)
        if isinstance(reply, Recovered):
            return encoder.recovered(reply.receipt_id, reply.xids, version)
        if isinstance(reply, TransactionError):
            named = [("transaction", reply.transaction)]
            return encoder.naming_error(reply.message, reply.detail, named, version)
        if isinstance(reply, SubscriptionError):
            named = [("subscription", reply.subscription), ("destination", reply.destination)]
            return encoder.naming_error(reply.message, reply.detail, named, version)
        self.closed = True
        self.reading = False
        offer = ",".join(VERSIONS) if self.version is None else ""
        return encoder.error(reply.message, reply.detail, reply.receipt_id, version, offer)

    def reading_stopped(self, stopped: bool, now: float) -> None:
        """Flow control stopped (or restarted) reading: silence then is not the client's."""
        self.unread = stopped
        self.last_received = now

    # -- heart-beats -------------------------------------------------------------------

    def tick(self, now: float, wrote: bool) -> Tick:
        """Check heart-beats at ``now``; ``wrote`` says whether anything was sent to the
        client since the previous check (then no heart-beat is due)."""
        if self.closed or (not self.send_interval and not self.receive_interval):
            return Tick(b"", None, None)
        deadlines = []
        if self.receive_interval:
            if self.unread:  # its heart-beats wait unread in the socket: not its silence
                self.last_received = now
            deadline = self.last_received + self.receive_interval
            if now >= deadline:
                silence = ProtocolError(
                    "heart-beat timeout", f"nothing received for {now - self.last_received:.1f} s"
                )
                return Tick(b"", None, silence)
            deadlines.append(deadline)
        send = b""
        if self.send_interval:
            # Checked every half interval: a write seen now happened after the previous
            # check at the earliest, so the next heart-beat is due an interval after that.
            if wrote:
                self._heartbeat_due = self._last_check + self.send_interval
            elif now >= self._heartbeat_due - 1e-9:
                send = encoder.HEARTBEAT
                self._heartbeat_due = now + self.send_interval
            self._last_check = now
            deadlines.append(min(self._heartbeat_due, now + self.send_interval / 2))
        return Tick(send, min(deadlines), None)

    # -- requests ----------------------------------------------------------------------

    def _connect(self, frame: Frame) -> Connect:
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
        client_send, client_receive = _parse_heartbeat(frame.headers.get("heart-beat", "0,0"))
        settings = self.settings
        server_send = _negotiated(settings.heartbeat_send_ms, client_receive)
        server_receive = _negotiated(settings.heartbeat_receive_ms, client_send)
        self.send_interval = server_send / 1000
        self.receive_interval = server_receive * settings.heartbeat_grace / 1000
        self.heart_beat = (server_send, server_receive)
        self.version = self.decoder.version = common[-1]
        return Connect(frame.headers)

    def _send(self, frame: Frame) -> Send:
        """A SEND the decoder left a frame: it has no destination (the decoder makes every
        other SEND the request itself, ``FrameDecoder``'s ``sends``)."""
        raise _missing(frame, "destination")

    def _subscribe(self, frame: Frame) -> Subscribe:
        destination = _require(frame, "destination")
        if self.version == "1.0":
            sub_id = frame.headers.get("id") or destination
        else:
            sub_id = _require(frame, "id")
        ack_mode = frame.headers.get("ack", "auto")
        if ack_mode not in ACK_MODES:
            raise ProtocolError(
                "invalid ack mode", f"ack {ack_mode[:64]!r} is not one of {', '.join(ACK_MODES)}"
            )
        return Subscribe(sub_id, destination, ack_mode, frame.headers)

    def _unsubscribe(self, frame: Frame) -> Unsubscribe:
        if self.version == "1.0":
            sub_id = frame.headers.get("id") or frame.headers.get("destination")
            if not sub_id:
                raise ProtocolError(
                    "missing id header", "an UNSUBSCRIBE frame needs an 'id' or 'destination'"
                )
        else:
            sub_id = _require(frame, "id")
        return Unsubscribe(sub_id, frame.headers)

    def _nack(self, frame: Frame) -> Acknowledge:
        if self.version == "1.0":
            raise _unknown_command("NACK")
        return self._acknowledge(True, frame)

    def _acknowledge(self, nack: bool, frame: Frame) -> Acknowledge:
        if self.version == "1.2":
            message_id, _, number = _require(frame, "id").rpartition("@")
            return _new(Acknowledge, (nack, message_id, number, frame.headers))
        message_id = _require(frame, "message-id")
        if self.version == "1.1":
            return Acknowledge(nack, message_id, _require(frame, "subscription"), frame.headers)
        return Acknowledge(nack, message_id, frame.headers.get("subscription"), frame.headers)

    def _begin(self, frame: Frame) -> Begin:
        return Begin(_require(frame, "transaction"), frame.headers)

    def _commit(self, frame: Frame) -> Commit:
        return Commit(_require(frame, "transaction"), frame.headers)

    def _abort(self, frame: Frame) -> Abort:
        return Abort(_require(frame, "transaction"), frame.headers)

    def _recover(self, frame: Frame) -> Recover:
        _require(frame, "receipt")  # the answer is a RECEIPT
        return Recover(frame.headers)

    def _disconnect(self, frame: Frame) -> Disconnect:
        self.reading = False
        return Disconnect(frame.headers)


def _require(frame: Frame, name: str) -> str:
    value = frame.headers.get(name)
    if value is None or (not value and name != "transaction"):
        raise _missing(frame, name)
    return value


def _missing(frame: Frame, name: str) -> ProtocolError:
    return ProtocolError(
        f"missing {name} header", f"a {frame.command} frame needs a '{name}' header"
    )


def _unknown_command(command: str) -> ProtocolError:
    detail = f"{command[:64]!r} is not a STOMP client command"
    if command == "NACK":
        detail = "NACK is not part of STOMP 1.0"
    return ProtocolError("unknown command", detail)


def _negotiated(floor_ms: int, asked_ms: int) -> int:
    """A heart-beat interval as STOMP negotiates it: none if either side says 0, else the
    client's, but never below the server's floor. CONNECTED answers with it, as ActiveMQ
    and RabbitMQ do."""
    return max(floor_ms, asked_ms) if floor_ms and asked_ms else 0


def _parse_heartbeat(value: str) -> tuple[int, int]:
    parts = value.split(",")
    if len(parts) != 2 or not all(p.strip().isascii() and p.strip().isdigit() for p in parts):
        raise ProtocolError(
            "invalid heart-beat header", f"heart-beat {value[:64]!r} is not two integers 'cx,cy'"
        )
    return int(parts[0]), int(parts[1])
