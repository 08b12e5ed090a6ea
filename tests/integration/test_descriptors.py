"""File descriptors: a server whose process may open few of them, and a connection storm.

A real ``wiremq serve`` process with a low ``RLIMIT_NOFILE`` (soft and hard, so that it
cannot raise it), driven over real sockets: every connection of a storm is answered
(CONNECTED, or an ERROR and a close), persistent SENDs keep their receipts meanwhile,
and the server says what to raise.
"""

from __future__ import annotations

import re
import resource
import selectors
import socket
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

from tests.integration.clients import connect, free_port
from tests.integration.test_cli import WIREMQ, _wait_listening
from tests.reliability.serverproc import _copy

LIMIT = 256
STORM = 400
CONNECT = b"CONNECT\naccept-version:1.2\nhost:x\n\n\0"


def _limited(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


def _serve(data: Path, log: Path, *extra: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    process = subprocess.Popen(
        [*WIREMQ, "serve", "--port", str(port), "--data", str(data), "--admin-port", "0", *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: _limited(LIMIT),
    )
    try:
        _wait_listening(port, process, timeout=30)
    except BaseException:
        process.kill()
        process.wait()
        raise
    threading.Thread(target=_copy, args=(process, log), daemon=True).start()
    return process, port


class Storm:
    """``count`` sockets connecting at once, each sending CONNECT as soon as it can; what
    each one got: ``CONNECTED``, an ERROR's message, ``reset`` (closed without a frame) or
    nothing yet."""

    def __init__(self, port: int, count: int) -> None:
        self.selector = selectors.DefaultSelector()
        self.answers: dict[socket.socket, str] = {}
        self.received: dict[socket.socket, bytes] = {}
        for _ in range(count):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", port))
            self.received[sock] = b""
            self.selector.register(sock, selectors.EVENT_WRITE)

    def run(self, until: float) -> None:
        """Send CONNECTs and read answers until every socket has one, or ``until``."""
        while len(self.answers) < len(self.received) and time.monotonic() < until:
            for key, events in self.selector.select(timeout=0.1):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if events & selectors.EVENT_WRITE:
                    try:
                        sock.send(CONNECT)
                    except OSError:
                        self._answer(sock, "reset")
                        continue
                    self.selector.modify(sock, selectors.EVENT_READ)
                    continue
                try:
                    data = sock.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    self._answer(sock, "reset")
                    continue
                self.received[sock] += data
                head = self.received[sock].split(b"\0", 1)[0]
                if b"\0" in self.received[sock]:
                    command, *headers = head.decode().split("\n")
                    if command == "CONNECTED":
                        self._answer(sock, "CONNECTED")
                    else:
                        message = dict(h.partition(":")[::2] for h in headers if h)["message"]
                        self._answer(sock, message)

    def _answer(self, sock: socket.socket, answer: str) -> None:
        self.answers[sock] = answer
        self.selector.unregister(sock)

    def counts(self) -> Counter[str]:
        return Counter(self.answers.values())

    def close(self) -> None:
        for sock in self.received:
            sock.close()
        self.selector.close()


def test_a_connection_storm_on_few_descriptors_is_answered_and_persistent_sends_go_on(tmp_path):
    """``ulimit -n 256`` and 400 connections at once. Before: 231 connected, the rest waited
    unanswered (each accept failed with EMFILE), and MemWatch logged a traceback on every
    sample. Now the server lowers ``maxconnections`` to what its descriptors allow, with a
    warning saying what to raise; every connection gets CONNECTED or an ERROR; a producer's
    persistent SENDs (each few of them starting a new log segment, a new descriptor) all
    get their receipts during the storm and while its connections stay open; no
    traceback."""
    log = tmp_path / "server.log"
    process, port = _serve(
        tmp_path / "data",
        log,
        "--set",
        "WriteAheadLog.segmentsize=65536",
        "--set",
        "MemWatch.checkinterval=0.05",
    )
    body = "x" * 4096
    try:
        producer, recorder = connect(port)
        sent = 0

        def send() -> None:
            nonlocal sent
            producer.send("/queue/storm", body, headers={"persistent": "true"}, receipt=f"r{sent}")
            sent += 1

        storm = Storm(port, STORM)
        started = time.monotonic()
        while time.monotonic() < started + 60 and len(storm.answers) < STORM:
            send()
            storm.run(time.monotonic() + 0.02)
        answered = time.monotonic() - started
        for _ in range(200):  # the storm's connections still open
            send()
        assert recorder.wait_until(lambda: len(recorder.receipts) == sent), recorder.errors
        assert not recorder.errors
        counts = storm.counts()
        stderr = log.read_text()
        warning = re.search(r"descriptors\.short.*", stderr)
        assert warning, stderr
        allowed = int(re.search(r"maxconnections_in_force=(\d+)", warning.group()).group(1))
        print(
            f"storm: {dict(counts)} answered in {answered:.1f} s; {sent} persistent SENDs "
            f"receipted; maxconnections in force {allowed}"
        )
        assert len(storm.answers) == STORM, f"unanswered: {STORM - len(storm.answers)}"
        assert set(counts) <= {"CONNECTED", "too many connections"}, counts
        assert counts["CONNECTED"] == allowed - 1  # the producer holds one
        storm.close()
        late, _ = connect(port)  # the storm gone, a newcomer is served
        late.disconnect()
        producer.disconnect()
    finally:
        process.terminate()
        process.wait(timeout=30)
    stderr = log.read_text()
    assert "Traceback" not in stderr, stderr
    assert "ulimit -n" in stderr


def test_config_check_says_which_descriptor_limit_to_raise(tmp_path):
    config = tmp_path / "config.xml"
    config.write_text('<wiremq><StompListener maxconnections="5000"/></wiremq>')
    result = subprocess.run(
        [*WIREMQ, "config", "check", str(config)],
        capture_output=True,
        text=True,
        preexec_fn=lambda: _limited(LIMIT),
    )
    assert "StompListener.maxconnections" in result.stderr
    assert re.search(r"ulimit -n \d+", result.stderr), result.stderr


def test_the_console_takes_at_most_its_connections_and_the_next_waits_its_turn(
    start_server, console_of
):
    """``Admin.maxconnections`` sockets open, the console accepts no more: the next
    connection waits in the listen backlog (its descriptor is not taken) and is served
    once one closes."""
    server = start_server(**{"Admin.maxconnections": "2"})
    port = console_of(server).port
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
    request = b"GET /api/session HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    waiting = socket.create_connection(("127.0.0.1", port))
    waiting.sendall(request)
    waiting.settimeout(1.0)  # long enough to see an answer that should not come
    try:
        answered = waiting.recv(100)
    except TimeoutError:
        answered = b""
    assert answered == b""
    held[0].close()
    waiting.settimeout(10)
    assert waiting.recv(100).startswith(b"HTTP/1.1 200")
    for sock in (*held, waiting):
        sock.close()
