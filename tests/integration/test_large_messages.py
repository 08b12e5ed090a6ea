"""Large messages through a real server: decoded into their body as they arrive, written
to consumers a transmit bound at a time, intact and in order."""

from __future__ import annotations

import socket
import time

from tests.integration.clients import RawClient, until

MIB = 1024 * 1024


def _read_frames(sock: socket.socket, count: int, timeout: float = 30) -> list[tuple[bytes, int]]:
    """Read ``count`` frames (by content-length) from a raw socket: (head, body checksum)."""
    buffer = bytearray()
    frames: list[tuple[bytes, int]] = []
    deadline = time.monotonic() + timeout
    sock.settimeout(1)
    while len(frames) < count:
        head_end = buffer.find(b"\n\n")
        if head_end >= 0:
            head = bytes(buffer[:head_end]).lstrip(b"\n")
            length = int(head.split(b"content-length:")[1].split(b"\n")[0])
            end = head_end + 2 + length
            if len(buffer) > end:
                assert buffer[end] == 0
                frames.append((head, sum(buffer[head_end + 2 : end : 4096])))
                del buffer[: end + 1]
                continue
        assert time.monotonic() < deadline, f"{len(frames)} of {count} frames read"
        try:
            data = sock.recv(4 * MIB)
        except TimeoutError:
            continue
        assert data, "the server closed the connection"
        buffer += data
    return frames


def test_a_large_message_reaches_a_reader_that_pauses_intact_and_before_what_follows(
    start_server,
):
    server = start_server(**{"StompListener.maxbodysize": str(16 * MIB)})
    consumer = RawClient(server.port)
    consumer.connect()
    consumer.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    consumer.send(b"SUBSCRIBE\nid:0\ndestination:/queue/large\nreceipt:s\n\n\0")
    assert consumer.next_frame().headers["receipt-id"] == "s"
    producer = RawClient(server.port)
    producer.connect()
    body = bytes(range(256)) * (12 * MIB // 256)
    head = b"SEND\ndestination:/queue/large\nreceipt:big\ncontent-length:%d\n\n" % len(body)
    for offset in range(0, len(body), MIB):  # as a client's writes arrive: in pieces
        producer.send((head if not offset else b"") + body[offset : offset + MIB])
    producer.send(b"\0SEND\ndestination:/queue/large\nreceipt:small\n\nafter\0")
    assert producer.next_frame().headers["receipt-id"] == "big"
    assert producer.next_frame().headers["receipt-id"] == "small"
    # The consumer has not read yet: the large frame waits, streamed as far as its
    # socket took, and the small one behind it.
    writers = [c.writer for c in server.connections]
    assert until(lambda: any(w.streaming is not None and w.paused for w in writers))
    (big, big_sum), (small, small_sum) = _read_frames(consumer.sock, 2)
    assert b"content-length:%d" % len(body) in big
    assert big_sum == sum(body[::4096])
    assert small.startswith(b"MESSAGE") and b"content-length:5" in small
    assert small_sum == ord("a")
    assert all(w.streaming is None for w in writers)
