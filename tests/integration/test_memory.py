"""MemWatch in a real server: the socket reader's check before a large frame, and the
memory figures of the query API."""

from __future__ import annotations

import time

from tests.integration.clients import RawClient, until
from tests.integration.test_flow_control import client_state, flow_state

MIB = 1024 * 1024
LARGE = 2 * MIB  # over MemWatch.messagethreshold


def _large_send(receipt: str) -> bytes:
    body = b"x" * LARGE
    head = b"SEND\ndestination:/queue/big\nreceipt:%s\ncontent-length:%d\n\n" % (
        receipt.encode(),
        len(body),
    )
    return head + body + b"\0"


def _measured_as(server, figure: list[int]) -> None:
    """Make MemWatch measure ``figure[0]`` instead of the process's memory."""
    server.core.memwatch.measure = lambda: figure[0]


def test_a_large_frame_waits_at_the_top_level_until_memory_is_free(reactor, start_server):
    server = start_server(**{"MemWatch.checkinterval": "0.05"})
    limit = server.core.memwatch.settings.maxmemory
    figure = [limit // 10]
    _measured_as(server, figure)
    client = RawClient(server.port)
    client.connect()
    client.send(_large_send("first"))
    assert client.next_frame().headers["receipt-id"] == "first"
    figure[0] = limit * 9 // 10  # the top level
    client.send(_large_send("second")[: 64 * 1024])  # its head and the start of its body
    assert until(lambda: flow_state(reactor, server)["memory"]["readers_waiting"] == 1)
    state = flow_state(reactor, server)
    assert state["memory"]["level"] == 2
    assert client_state(state, _session(state))["stopped_by"] == ["memory full"]
    client.send(_large_send("second")[64 * 1024 :] + b"SEND\ndestination:/queue/big\n\nsmall\0")
    time.sleep(0.5)  # long enough for a receipt to come if the frame were read
    assert not client.frames and not client.closed
    figure[0] = limit // 10
    assert client.next_frame().headers["receipt-id"] == "second"
    state = flow_state(reactor, server)
    assert state["memory"]["readers_waiting"] == 0 and state["memory"]["level"] == 0


def _session(state) -> str:
    (client,) = state["clients"]
    return client["session"]


def test_with_whenfull_disconnect_a_large_frame_at_the_top_level_gets_an_error(
    reactor, start_server
):
    server = start_server(**{"MemWatch.whenfull": "disconnect"})
    figure = [server.core.memwatch.settings.maxmemory]
    _measured_as(server, figure)
    client = RawClient(server.port)
    client.connect()
    client.send(b"SEND\ndestination:/queue/big\n\nsmall frames are not checked\0")
    client.send(_large_send("big"))
    error = client.next_frame()
    assert error.command == "ERROR" and error.headers["message"] == "server memory full"
    assert error.headers.get("receipt-id") is None
    assert client.wait_closed()
    assert flow_state(reactor, server)["memory"]["frames_refused"] == 1


def test_the_query_api_shows_measured_and_estimated_memory(reactor, start_server):
    server = start_server()
    client = RawClient(server.port)
    client.connect()
    client.send(b"BEGIN\ntransaction:t\n\n\0")
    client.send(b"SEND\ndestination:/queue/q\ntransaction:t\nreceipt:r\n\n" + b"y" * 5000 + b"\0")
    assert client.next_frame().headers["receipt-id"] == "r"
    state = flow_state(reactor, server)
    memory = state["memory"]
    assert memory["measured"] > 10 * MIB  # the process's RSS
    assert memory["estimated"]["open transactions"] == 5000
    assert set(memory["estimated"]) >= {"unfinished frames", "queue live buffers", "client egress"}
    assert state["transactions"]["bytes"] == 5000 and state["transactions"]["open"] == 1
