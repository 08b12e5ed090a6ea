"""Test clients: a recording stomp.py listener, a raw-socket STOMP client, and the
helpers the integration tests share (polling, filling a destination, a free port)."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence

import stomp
from stomp.utils import Frame as StompPyFrame

from tests.defaults import LIMITS
from wiremq.modules.stomp.codec import FrameDecoder
from wiremq.modules.stomp.frames import Frame, ProtocolError

TIMEOUT = 10.0


def until(condition: Callable[[], object], timeout: float = TIMEOUT, every: float = 0.02) -> bool:
    """Poll ``condition`` until it holds; False at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(every)


def free_port() -> int:
    """A loopback port nobody listens on, for a server started as its own process."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Recorder(stomp.ConnectionListener):
    """Collects what a stomp.py connection receives; waits without sleeping blindly."""

    def __init__(self) -> None:
        self.messages: list[StompPyFrame] = []
        self.errors: list[StompPyFrame] = []
        self.receipts: list[str] = []
        self.disconnected = False
        self._changed = threading.Condition()

    def _record(self, action: Callable[[], None]) -> None:
        with self._changed:
            action()
            self._changed.notify_all()

    def on_message(self, frame: StompPyFrame) -> None:
        self._record(lambda: self.messages.append(frame))

    def on_error(self, frame: StompPyFrame) -> None:
        self._record(lambda: self.errors.append(frame))

    def on_receipt(self, frame: StompPyFrame) -> None:
        self._record(lambda: self.receipts.append(frame.headers["receipt-id"]))

    def on_disconnected(self) -> None:
        self._record(lambda: setattr(self, "disconnected", True))

    def wait_until(self, condition: Callable[[], bool], timeout: float = TIMEOUT) -> bool:
        with self._changed:
            return self._changed.wait_for(condition, timeout)

    def wait_for_messages(self, count: int, timeout: float = TIMEOUT) -> list[StompPyFrame]:
        assert self.wait_until(lambda: len(self.messages) >= count, timeout), (
            f"expected {count} messages, got {len(self.messages)}"
        )
        return self.messages

    def bodies(self) -> list[str]:
        return [m.body for m in self.messages]


def connect(
    port: int, version: str = "1.2", **connect_headers: str
) -> tuple[stomp.Connection, Recorder]:
    """A connected stomp.py client of the given protocol version, with its recorder."""
    cls = {"1.0": stomp.Connection10, "1.1": stomp.Connection11, "1.2": stomp.Connection12}[version]
    connection = cls([("127.0.0.1", port)], auto_content_length=True)
    recorder = Recorder()
    connection.set_listener("recorder", recorder)
    connection.connect(wait=True, headers=connect_headers)
    return connection, recorder


def fill(port: int, destination: str, bodies: Sequence[str], **headers: str) -> None:
    """Send ``bodies`` from a fresh connection and return once every one has its receipt,
    so the server holds them all before the test goes on."""
    producer, recorder = connect(port)
    for i, body in enumerate(bodies):
        producer.send(destination, body, headers=dict(headers), receipt=f"fill-{i}")
    assert recorder.wait_until(lambda: len(recorder.receipts) == len(bodies))
    producer.disconnect()


class RawClient:
    """STOMP over a plain socket, for what stomp.py will not send: bad frames, odd headers."""

    def __init__(
        self, port: int, source: str = "127.0.0.1", sock: socket.socket | None = None
    ) -> None:
        """``source``: the local address to connect from (any of 127.0.0.0/8); ``sock``: a
        connected socket to use instead (a TLS one, say)."""
        self.sock = sock or socket.create_connection(
            ("127.0.0.1", port), timeout=TIMEOUT, source_address=(source, 0)
        )
        self.decoder = FrameDecoder(LIMITS)
        self.decoder.version = "1.2"  # until CONNECTED says otherwise
        self.frames: list[Frame] = []
        self.raw = b""
        self.closed = False

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def connect(self, version: str = "1.2", heart_beat: str = "0,0") -> Frame:
        self.send(
            f"CONNECT\naccept-version:{version}\nhost:localhost\nheart-beat:{heart_beat}\n\n\0".encode()
        )
        frame = self.next_frame()
        assert frame.command == "CONNECTED", frame
        self.decoder.version = frame.headers["version"]
        return frame

    def _read(self, deadline: float) -> None:
        self.sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return
        except (ConnectionError, ssl.SSLError):
            data = b""
        if not data:
            self.closed = True
            return
        self._take(data)

    def _take(self, data: bytes) -> None:
        """Bytes of STOMP frames the server sent."""
        self.raw += data
        try:
            self.frames.extend(self.decoder.feed(data))
        except ProtocolError as error:
            raise AssertionError(f"server sent a malformed frame: {error.detail}") from error

    def next_frame(self, timeout: float = TIMEOUT) -> Frame:
        deadline = time.monotonic() + timeout
        while not self.frames and not self.closed and time.monotonic() < deadline:
            self._read(deadline)
        assert self.frames, "no frame arrived" + (" (connection closed)" if self.closed else "")
        return self.frames.pop(0)

    def wait_closed(self, timeout: float = TIMEOUT) -> bool:
        """Read until the server closes the connection; True if it did."""
        deadline = time.monotonic() + timeout
        while not self.closed and time.monotonic() < deadline:
            self._read(deadline)
        return self.closed

    def close(self) -> None:
        self.sock.close()
