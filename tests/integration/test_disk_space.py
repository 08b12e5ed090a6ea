"""The free-disk watermark on a real server, moved over the disk it is on through the
console's live parameters (the full disk itself: ``tests/reliability/test_disk_full.py``)."""

from __future__ import annotations

from typing import Any

from tests.integration.clients import RawClient, connect, until
from tests.integration.test_flow_control import client_state, flow_state, send_frame

EVERYTHING = 1 << 50  # more free space than any disk has: the watermark is set


def test_persistent_producers_are_held_while_free_disk_is_short_and_nothing_else_is(
    reactor, start_server, console_of, floods
):
    server = start_server(**{"DiskSpace.checkinterval": "0.05"})
    api = console_of(server)
    persistent = floods(
        server.port, "/queue/dk.p", limit=10**9, headers=lambda i: {"persistent": "true"}
    )
    plain = floods(server.port, "/topic/dk.n", limit=10**9)  # nobody subscribes: kept nowhere

    def producer(session: str) -> dict[str, Any]:
        found = client_state(flow_state(reactor, server), session)
        assert found is not None
        return found

    assert until(lambda: persistent.sent >= 20 and plain.sent >= 20)
    limits = {"DiskSpace.minfreebytes": EVERYTHING, "DiskSpace.resumefreebytes": EVERYTHING}
    api.ok("PATCH", "/api/parameters", {"values": limits})
    assert until(lambda: not producer(persistent.session)["reading"])
    assert producer(persistent.session)["stopped_by"] == ["free disk space (p2p)"]
    assert persistent.stalled()
    disk = flow_state(reactor, server)["disk"]
    assert [d["stores"] for d in disk] == [["wal", "PersQueueFileStore", "TopicFileStore"]]
    assert disk[0]["producers_held"] is True and disk[0]["held_producers"] == 1

    # Non-persistent producers and consumers go on meanwhile.
    assert producer(plain.session)["reading"], producer(plain.session)["stopped_by"]
    going = plain.sent
    assert until(lambda: plain.sent > going + 100)
    connection, recorder = connect(server.port)
    connection.subscribe("/queue/dk.p", id="c")
    recorder.wait_for_messages(20)
    connection.disconnect()

    defaults = {"DiskSpace.minfreebytes": 128 << 20, "DiskSpace.resumefreebytes": 192 << 20}
    api.ok("PATCH", "/api/parameters", {"values": defaults})
    assert until(lambda: producer(persistent.session)["reading"])
    held_at = persistent.sent
    assert until(lambda: persistent.sent > held_at + 100), "read again, but its SENDs stand still"
    assert flow_state(reactor, server)["disk"][0]["trips"] == 1


def test_a_whenfull_fail_destination_refuses_persistent_sends_while_free_disk_is_short(
    reactor, start_server, console_of
):
    server = start_server('<wiremq><Destination name="/queue/dk.f" whenfull="fail"/></wiremq>')
    limits = {"DiskSpace.minfreebytes": EVERYTHING, "DiskSpace.resumefreebytes": EVERYTHING}
    console_of(server).ok("PATCH", "/api/parameters", {"values": limits})
    assert until(lambda: flow_state(reactor, server)["disk"][0]["producers_held"])
    client = RawClient(server.port)
    client.connect()
    client.send(send_frame("/queue/dk.f", "x", persistent="true", receipt="r-disk"))
    error = client.next_frame()
    assert error.command == "ERROR" and error.headers["receipt-id"] == "r-disk"
    assert b"disk full" in error.body
    assert flow_state(reactor, server)["spool"]["refused"] == {"disk full": 1}
