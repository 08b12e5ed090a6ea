"""A whole server core on a fake clock, with simulated client sockets, for unit tests.

A real ``Core`` with its default chains on a fake runtime. Each client is a real
ClientConnection whose socket is simulated: ``FakeReader`` (its ReadControl)
records pause/resume, and while paused the client's input waits, as it does in
a socket the server stopped reading; ``FakeWriter`` drains the client's real
Egress like the socket writer does, behind a TCP window the test opens and
closes. Input is handed over one chunk at a time, each chunk one frame unless a
test sends several in one chunk. No sockets, no sleeps.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.defaults import EGRESS_LIMITS as DEFAULT_LIMITS
from tests.defaults import LIMITS
from tests.fakes import FakeRuntime
from wiremq.config.parameters import REGISTRY
from wiremq.config.registry import Value
from wiremq.config.settings import Settings
from wiremq.config.xmlconfig import default_pipelines
from wiremq.modules.client.egress import EVERYTHING, Egress, Outbox
from wiremq.modules.core import Core
from wiremq.modules.destinations.queue import Queue
from wiremq.modules.destinations.topic import Topic
from wiremq.modules.flow.egress_queues import QueueLimits
from wiremq.modules.stomp.codec import FrameDecoder
from wiremq.modules.stomp.encoder import encode_frame
from wiremq.modules.stomp.frames import Frame
from wiremq.server.stores import open_store

NO_HEARTBEATS = {"StompListener.heartbeatsend": 0, "StompListener.heartbeatreceive": 0}
PERSISTENT = {"persistent": "true"}


class FakeReader:
    """A client socket's ReadControl: records every pause and resume."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def pause(self) -> None:
        self.calls.append("pause")

    def resume(self) -> None:
        self.calls.append("resume")

    @property
    def reading(self) -> bool:
        return not self.calls or self.calls[-1] == "resume"


class FakeWriter:
    """Drains an egress as the socket writer does: strict priority, owners told what was
    written, the discard count handed over with the frame it belongs to; nothing is written
    while the client's TCP window is closed."""

    def __init__(self, egress: Egress) -> None:
        self.window_open = True
        self.frames: list[Frame] = []
        self.discards: list[int] = []  # per frame written: the discard indication it carried
        self.closed = False
        self._decoder = FrameDecoder(LIMITS)
        self._decoder.version = "1.2"
        egress.writer = self

    def drain(self, egress: Egress) -> None:
        if self.closed or not self.window_open:
            return

        parts = egress.write_out(EVERYTHING)
        for head, tail in zip(parts[::2], parts[1::2], strict=True):
            frames = self._decoder.feed(head + tail)
            self.frames.extend(frames)
            discarded = head.startswith(b"MESSAGE\ndiscarded:")
            count = int(frames[0].headers["discarded"]) if discarded else 0
            self.discards.extend([count] * len(frames))
        if egress.close_requested:
            last = self._decoder.feed(egress.last_frame)  # the ERROR goes last
            self.frames.extend(last)
            self.discards.extend([0] * len(last))
            egress.last_frame = b""
            self.closed = True


class Net:
    """A broker, its clients, and a loop that runs everything until nothing moves."""

    def __init__(
        self,
        values: dict[str, Value],
        destinations: dict[str, dict[str, Value]],
        persistence_path: Path | None,
        data: Path,
        journal: Path | None = None,
    ) -> None:
        """``data``: the data folder (its users file, if the test writes one); ``journal``:
        where the audit journal is written (none: not written)."""
        self.data = persistence_path or data  # the data folder: the store, the users file
        self.settings = Settings(
            REGISTRY, {**NO_HEARTBEATS, "Server.datadir": str(self.data), **values}
        )
        for name, params in destinations.items():
            for param, value in params.items():
                self.settings.set_for_destination(name, param, value)
        self.runtime = FakeRuntime()
        self.outbox = Outbox()
        store = None
        if persistence_path is not None:
            store = open_store(self.settings)
        self.core = Core(self.settings, self.runtime, store, default_pipelines(), journal)
        self.core.restore()
        self.peers: list[Peer] = []
        self.workers_held = False  # a slow store: commits wait until released

    def clock(self) -> float:
        return self.runtime.now

    def settle(self) -> None:
        """Write, run what was scheduled, run store work, read input, fire timers: until quiet."""
        runtime = self.runtime
        for _ in range(100_000):
            self.outbox.flush()
            if runtime.soon:
                runtime.run_soon()
                continue
            if not self.workers_held and any(w.run() for w in list(runtime.workers.values())):
                continue
            if any(peer.take_input() for peer in self.peers):
                continue
            timers = [t for t in runtime.timers if not t.cancelled]
            if timers:
                runtime.advance(max(0.0, min(t.due for t in timers) - runtime.now))
                continue
            return
        raise AssertionError("the broker never settled")

    def queue(self, name: str) -> Queue:
        return self.core.destinations.queues[name]

    def topic(self, name: str) -> Topic:
        return self.core.destinations.topics[name]

    def close(self) -> None:
        if self.core.store is not None:
            self.core.store.close()


class Peer:
    """One connected client of a Net."""

    def __init__(
        self,
        net: Net,
        name: str,
        limits: tuple[QueueLimits, ...] = DEFAULT_LIMITS,
        heart_beat: str = "0,0",
        login: dict[str, str] | None = None,
        connected: bool = True,
    ) -> None:
        """``name``: the client's address ("host:port"); ``login``: more CONNECT headers
        (login, passcode); ``connected``: whether CONNECTED must be the answer (else the
        test looks at what came)."""
        self.net = net
        self.reader = FakeReader()
        self.egress = Egress(net.outbox, limits)
        self.writer = FakeWriter(self.egress)
        self.connection = net.core.connect(self.egress, name, self.reader, net.clock())
        self.input: deque[bytes] = deque()
        net.peers.append(self)
        headers = {"accept-version": "1.2", "heart-beat": heart_beat, **(login or {})}
        self.feed(frame("CONNECT", headers))
        if connected:
            assert self.writer.frames.pop(0).command == "CONNECTED"
            self.writer.discards.pop(0)

    def take_input(self) -> bool:
        """Hand the server one chunk of input, if it is reading this client."""
        if not self.input or not self.reader.reading or self.connection.session.closed:
            return False
        self.connection.data_received(self.input.popleft(), self.net.clock())
        return True

    def feed(self, *chunks: bytes) -> None:
        self.input.extend(chunks)
        self.net.settle()

    def send(self, destination: str, body: str, headers: dict[str, str] | None = None) -> None:
        self.feed(send_frame(destination, body, headers))

    def subscribe(self, destination: str, sub_id: str = "1", ack: str = "auto", **headers: str):
        self.feed(
            frame("SUBSCRIBE", {"id": sub_id, "destination": destination, "ack": ack, **headers})
        )

    def ack(self, message: Frame) -> None:
        self.feed(frame("ACK", {"id": message.headers["ack"]}))

    def open_window(self) -> None:
        self.writer.window_open = True
        self.egress.outbox.ready.append(self.egress)
        self.net.settle()

    @property
    def messages(self) -> list[Frame]:
        return [f for f in self.writer.frames if f.command == "MESSAGE"]

    def bodies(self) -> list[str]:
        return [m.body.decode() for m in self.messages]

    @property
    def errors(self) -> list[Frame]:
        return [f for f in self.writer.frames if f.command == "ERROR"]


def frame(command: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    return encode_frame(command, headers.items(), body)


def send_frame(destination: str, body: str, headers: dict[str, str] | None = None) -> bytes:
    return frame("SEND", {"destination": destination, **(headers or {})}, body.encode())


@pytest.fixture
def make_net(tmp_path: Path) -> Iterator[Callable[..., Net]]:
    """``make_net(values, destinations, persistent=False, journal=False)``: a Net with these
    settings (``journal``: its audit journal written in a folder of its own)."""
    nets: list[Net] = []

    def make(
        values: dict[str, Value] | None = None,
        destinations: dict[str, dict[str, Value]] | None = None,
        persistent: bool = False,
        journal: bool = False,
    ) -> Net:
        path = tmp_path / f"store-{len(nets)}.fs" if persistent else None
        folder = tmp_path / f"journal-{len(nets)}" if journal else None
        data = tmp_path / f"data-{len(nets)}"
        net = Net(values or {}, destinations or {}, path, data, folder)
        nets.append(net)
        return net

    yield make
    for net in nets:
        net.close()
