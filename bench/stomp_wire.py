"""Minimal, fast STOMP 1.2 wire helpers for the load generator.

The load generator must never be the bottleneck of a benchmark, so this is not
a general STOMP client: frames are built as bytes by the callers, and the
parser works on whole receive chunks using C-level ``bytes.find`` so that the
per-frame Python work is a handful of operations.

Header values are kept in their escaped wire form (STOMP 1.2 ``\\c``, ``\\n``
...).  The only values the benchmark reads are numbers and the ``ack`` id,
which is sent back verbatim, so decoding would be wasted work.
"""

from __future__ import annotations

import select
import socket
from collections.abc import Mapping
from typing import NamedTuple

RECV_SIZE = 1 << 18
"""Large receive chunks amortise the per-recv and per-parse Python overhead."""

CONNECT_HEADERS = {b"accept-version": b"1.2", b"host": b"localhost", b"heart-beat": b"0,0"}


class Frame(NamedTuple):
    """One frame, its header lines left unparsed until a header is asked for.

    Building a dict per frame was the largest cost of a consumer; looking up
    one or two names with ``bytes.find`` in the raw block is much cheaper.
    ``head`` is the header block starting at the newline after the command,
    so every header line, the first included, begins with a newline.
    """

    command: bytes
    head: bytes
    body: bytes

    def header(self, name: bytes) -> bytes | None:
        """Value of the first ``name`` header (STOMP 1.2: the first one wins)."""
        key = b"\n" + name + b":"
        at = self.head.find(key)
        if at < 0:
            return None
        start = at + len(key)
        end = self.head.find(b"\n", start)
        return (self.head[start:] if end < 0 else self.head[start:end]).rstrip(b"\r")

    def headers(self) -> dict[bytes, bytes]:
        """All headers, for error reports."""
        result: dict[bytes, bytes] = {}
        for line in self.head.split(b"\n")[1:]:
            name, _, value = line.rstrip(b"\r").partition(b":")
            result.setdefault(name, value)
        return result


class ProtocolError(Exception):
    """The server sent something that is not valid STOMP or not expected here."""


class ServerError(Exception):
    """The server sent an ERROR frame."""

    def __init__(self, frame: Frame) -> None:
        super().__init__(f"server ERROR frame: {describe(frame)}")
        self.frame = frame


def describe(frame: Frame, body_limit: int = 200) -> str:
    """Render a frame for error messages, so server problems can be reported exactly."""
    headers = ", ".join(
        f"{k.decode(errors='replace')}:{v.decode(errors='replace')}"
        for k, v in frame.headers().items()
    )
    body = frame.body[:body_limit].decode(errors="replace")
    more = "..." if len(frame.body) > body_limit else ""
    return f"{frame.command.decode(errors='replace')} [{headers}] body={body!r}{more}"


def encode_frame(
    command: bytes, headers: Mapping[bytes, bytes] | None = None, body: bytes = b""
) -> bytes:
    """Encode a frame; a content-length header is added whenever there is a body."""
    lines = [command]
    for name, value in (headers or {}).items():
        lines.append(name + b":" + value)
    if body:
        lines.append(b"content-length:%d" % len(body))
    return b"\n".join(lines) + b"\n\n" + body + b"\x00"


class FrameParser:
    """Incremental parser: feed it received bytes, get back the complete frames.

    Heart-beat EOLs between frames are skipped.  When a frame carries
    content-length the body is taken by length, so a NUL inside a body is not
    mistaken for the end of the frame; otherwise the body ends at the first NUL.
    """

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[Frame]:
        buf = self._buf + data if self._buf else data
        size = len(buf)
        frames: list[Frame] = []
        pos = 0
        while True:
            while pos < size and buf[pos] in (10, 13):  # heart-beats: b"\n" or b"\r\n"
                pos += 1
            if pos >= size:
                break
            head_end = buf.find(b"\n\n", pos)
            # STOMP 1.2 also allows CRLF line ends; look for them only up to the LF LF.
            crlf_end = buf.find(b"\n\r\n", pos, head_end if head_end >= 0 else size)
            if crlf_end >= 0:
                head_end, body_start = crlf_end, crlf_end + 3
            elif head_end >= 0:
                body_start = head_end + 2
            else:
                break
            command_end = buf.find(b"\n", pos, head_end)
            if command_end < 0:  # a frame without headers
                command_end = head_end
            head = buf[command_end:head_end]
            at = head.find(b"\ncontent-length:")
            if at >= 0:
                length_end = head.find(b"\n", at + 16)
                length = head[at + 16 : length_end if length_end >= 0 else len(head)]
                end = body_start + int(length)
                if end >= size:
                    break
                if buf[end] != 0:
                    raise ProtocolError(
                        f"{buf[pos:command_end]!r} frame: no NUL after content-length:"
                        f"{length.decode(errors='replace')} body "
                        f"(found byte {buf[end]:#04x})"
                    )
            else:
                end = buf.find(b"\x00", body_start)
                if end < 0:
                    break
            frames.append(Frame(buf[pos:command_end].rstrip(b"\r"), head, buf[body_start:end]))
            pos = end + 1
        self._buf = buf[pos:]
        return frames


class StompConnection:
    """A blocking STOMP connection over a raw TCP socket.

    Every blocking operation is bounded by ``timeout`` so that a stalled server
    turns into an error report instead of a hung benchmark.
    """

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(timeout)
        self.parser = FrameParser()
        self._pending: list[Frame] = []  # parsed after a frame expect() returned

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frames(self) -> list[Frame]:
        """Block for the next chunk of data and return the frames it completes."""
        if self._pending:
            frames, self._pending = self._pending, []
            return frames
        data = self.sock.recv(RECV_SIZE)
        if not data:
            raise ConnectionError("server closed the connection")
        return self.parser.feed(data)

    def poll_frames(self) -> list[Frame]:
        """Return frames already received, without blocking."""
        frames, self._pending = self._pending, []
        while select.select([self.sock], [], [], 0)[0]:
            frames.extend(self.recv_frames())
        return frames

    def expect(self, command: bytes, receipt: bytes | None = None) -> tuple[Frame, list[Frame]]:
        """Wait for ``command`` (with ``receipt-id`` = ``receipt`` if given).

        MESSAGE frames that arrive meanwhile are returned to the caller, which
        decides whether they are acceptable; ERROR and anything else raise.
        """
        skipped: list[Frame] = []
        while True:
            try:
                frames = self.recv_frames()
            except TimeoutError:
                what = command.decode() + (f" receipt-id:{receipt.decode()}" if receipt else "")
                raise TimeoutError(
                    f"no {what} from the server within {self.sock.gettimeout()} s"
                ) from None
            for i, frame in enumerate(frames):
                if frame.command == command and (
                    receipt is None or frame.header(b"receipt-id") == receipt
                ):
                    self._pending = frames[i + 1 :]
                    return frame, skipped
                if frame.command == b"MESSAGE":
                    skipped.append(frame)
                elif frame.command == b"ERROR":
                    raise ServerError(frame)
                else:
                    raise ProtocolError(f"expected {command.decode()}, got {describe(frame)}")

    def connect(self, client_id: bytes | None = None) -> Frame:
        """CONNECT; a ``client_id`` identifies the client to its durable subscriptions."""
        headers = (
            CONNECT_HEADERS if client_id is None else {**CONNECT_HEADERS, b"client-id": client_id}
        )
        self.send(encode_frame(b"CONNECT", headers))
        frame, _ = self.expect(b"CONNECTED")
        return frame

    def subscribe(
        self, destination: bytes, ack: bytes, extra: Mapping[bytes, bytes] | None = None
    ) -> list[Frame]:
        """Subscribe and wait for the receipt, so the subscription is known to be active.

        ``extra`` headers are added, e.g. ``activemq.subscriptionName`` for a
        durable subscription.
        """
        headers = {b"id": b"0", b"destination": destination, b"ack": ack, b"receipt": b"sub-0"}
        self.send(encode_frame(b"SUBSCRIBE", {**headers, **(extra or {})}))
        _, skipped = self.expect(b"RECEIPT", b"sub-0")
        return skipped

    def disconnect(self) -> list[Frame]:
        """Graceful DISCONNECT: the receipt proves the server processed everything before it."""
        try:
            self.send(encode_frame(b"DISCONNECT", {b"receipt": b"bye"}))
            _, skipped = self.expect(b"RECEIPT", b"bye")
            return skipped
        finally:
            self.sock.close()

    def close(self) -> None:
        self.sock.close()
