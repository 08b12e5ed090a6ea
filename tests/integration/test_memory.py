"""MemWatch in a real server: the socket reader's check before a large frame, and the
memory figures of the query API."""

from __future__ import annotations

import time
from collections.abc import Mapping

from tests.integration.clients import RawClient, until
from tests.integration.test_flow_control import client_state, flow_state
from wiremq.modules.memory.memwatch import ActionContext, MemoryAction, MemoryReading

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


CHANGES: list[tuple[str, int, int, int]] = []


class Noting(MemoryAction):
    """A plug-in action named in config.xml: notes every level change it is told of."""

    def __init__(self, context: ActionContext, options: Mapping[str, str]) -> None:
        super().__init__(context, options)
        self.tag = options["tag"]

    def level_changed(self, old: int, new: int, reading: MemoryReading) -> None:
        CHANGES.append((self.tag, self.level, old, new))


def test_custom_levels_and_actions_from_config_xml_act_in_the_server(reactor, start_server):
    CHANGES.clear()
    server = start_server(
        config_xml=(
            "<wiremq>\n"
            "  <MemoryLevels>\n"
            f'    <level from="0.2"><action class="{__name__}:Noting" tag="low"/></level>\n'
            '    <level from="0.4" clear="0.3">\n'
            '      <action name="collect" interval="0.05"/>\n'
            f'      <action class="{__name__}:Noting" tag="mid"/>\n'
            "    </level>\n"
            '    <level from="0.7"><action name="warn"/></level>\n'
            "  </MemoryLevels>\n"
            "</wiremq>\n"
        ),
        **{"MemWatch.checkinterval": "0.05", "MemWatch.maxmemory": str(64 * 1024 * MIB)},
    )
    limit = server.core.memwatch.settings.maxmemory
    figure = [limit // 10]
    _measured_as(server, figure)
    memory = flow_state(reactor, server)["memory"]
    assert [level["actions"] for level in memory["levels"]] == [
        ["Noting"],
        ["collect", "Noting"],
        ["warn"],
    ]
    assert [level["from"] for level in memory["levels"]] == [0.2, 0.4, 0.7]
    figure[0] = limit // 2  # level 2 (of 3)
    assert until(lambda: flow_state(reactor, server)["memory"]["level"] == 2)
    assert until(lambda: flow_state(reactor, server)["memory"]["collections"] >= 2)
    figure[0] = limit * 35 // 100  # above level 2's clear bound (0.3): still 2
    time.sleep(0.3)
    assert flow_state(reactor, server)["memory"]["level"] == 2
    figure[0] = limit // 4
    assert until(lambda: flow_state(reactor, server)["memory"]["level"] == 1)
    collections = flow_state(reactor, server)["memory"]["collections"]
    time.sleep(0.3)  # the collections of level 2 stopped with it
    assert flow_state(reactor, server)["memory"]["collections"] == collections
    assert CHANGES == [("low", 1, 0, 2), ("mid", 2, 0, 2), ("low", 1, 2, 1), ("mid", 2, 2, 1)]
