"""The server's totals are kept as messages move, not summed over every destination
(``modules/destinations/traffic.py``, ``fates.py``): after a mix of sends, acknowledgements,
NACKs, expiry, a topic nobody hears and a deleted queue, they equal a full recount over
every destination (those deleted included). The cleanups walk the destinations a slice at
a time (``DestinationManager.sweepslice``): they still reach every one.
"""

from __future__ import annotations

import time

from tests.conftest import call_in_reactor
from tests.integration.clients import connect, fill, until
from tests.integration.console import encoded
from wiremq.modules.destinations.destination import Destination
from wiremq.modules.destinations.fates import FATES

QUEUES = [f"/queue/totals.{i}" for i in range(7)]


def _recount(destinations: list[Destination]) -> dict[str, int]:
    """The totals summed over ``destinations`` from their own counters."""
    counts = {
        "received": sum(d.received for d in destinations),
        "delivered": sum(d.delivered for d in destinations),
    }
    for fate in FATES:
        counts[fate] = sum(getattr(d.fates, fate) for d in destinations)
    return counts


def test_the_totals_kept_as_messages_move_equal_a_full_recount(reactor, start_server, console_of):
    server = start_server(
        **{
            "DestinationManager.sweepslice": "2",  # the cleanups walk two queues per turn
            "VolQueueStoreImpl.cleanupinterval": "0.1",
            "PersQueueFileStore.cleanupinterval": "0.1",
        }
    )
    api = console_of(server)
    soon = str(int(time.time() * 1000) + 300)
    for i, name in enumerate(QUEUES):
        fill(server.port, name, [f"{name} p{n}" for n in range(3)], persistent=str(i % 2 == 0))
        fill(server.port, name, ["expires"], expires=soon)  # each queue: one to expire
    fill(server.port, "/topic/totals.nobody", ["a", "b"])  # no subscriber takes them

    def expired_everywhere() -> bool:
        return all(api.get(f"/api/destinations/{encoded(name)}")["expired"] == 1 for name in QUEUES)

    assert until(expired_everywhere), "the sliced sweeps reached every queue"

    listener, heard = connect(server.port)
    listener.subscribe("/topic/totals.heard", id="t", ack="client-individual")
    fill(server.port, "/topic/totals.heard", ["t1", "t2"])
    assert heard.wait_until(lambda: len(heard.messages) == 2)
    listener.ack(heard.messages[0].headers["ack"])

    consumer, recorder = connect(server.port)
    consumer.subscribe(QUEUES[0], id="1", ack="client-individual", headers={"prefetch-count": "3"})
    first = recorder.wait_for_messages(3)[:3]
    consumer.ack(first[0].headers["ack"])
    consumer.nack(first[1].headers["ack"], requeue="true")  # comes back: redelivered
    consumer.nack(first[2].headers["ack"], requeue="false")  # dead-lettered
    taker, taken = connect(server.port)
    taker.subscribe(QUEUES[1], id="2", ack="auto")
    assert taken.wait_until(lambda: len(taken.messages) == 3)
    taker.unsubscribe("2")  # its deliveries now count as a consumer's that has gone

    assert until(lambda: api.get(f"/api/destinations/{encoded(QUEUES[0])}")["dead_lettered"])
    deleted = call_in_reactor(reactor, lambda: server.core.destinations.queues[QUEUES[-1]])
    assert api.ok("DELETE", f"/api/destinations/{encoded(QUEUES[-1])}")["purged"] == 3

    def compared() -> tuple[dict[str, int], dict[str, int], list[tuple[int, object]]]:
        registry = server.core.destinations
        everyone = [*registry.queues.values(), *registry.topics.values()]
        depths = [(d.depth(), d.state()["messages"]) for d in everyone]
        return registry.totals(), _recount([*everyone, deleted]), depths

    kept, recounted, depths = call_in_reactor(reactor, compared)
    assert kept == recounted
    assert all(depth == messages for depth, messages in depths), depths
    # Every figure was exercised, so that the equality says something about each.
    assert kept["received"] == 7 * 4 + 2 + 2 + 1  # the queues, both topics, the DMQ copy
    assert kept["expired"] == 7 and kept["dead_lettered"] == 1 and kept["redelivered"] >= 1
    assert kept["acknowledged"] >= 1 + 1 + 3 and kept["discarded"] >= 3 + 2
    assert kept["delivered"] >= 2 + 3 + 3
    overview = api.get("/api/overview")["totals"]
    assert {k: overview[k] for k in kept} == kept, "the console shows the same"
    for client in (listener, consumer, taker):
        client.disconnect()  # what they held goes back; their deliveries stay counted
    assert until(lambda: not call_in_reactor(reactor, lambda: server.core.clients))
    kept, recounted, _ = call_in_reactor(reactor, compared)
    assert kept == recounted and kept["delivered"] >= 2 + 3 + 3
    traffic = server.core.destinations.services.traffic
    assert not call_in_reactor(reactor, lambda: list(traffic.consumers)), "none is kept"
