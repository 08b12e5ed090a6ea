"""Counts that add up, over real sockets: what became of each destination's messages
(``modules/destinations/fates.py``) as the API shows them, so that received (and restored)
minus acknowledged, expired, dead-lettered, discarded and moved is what is held now."""

from __future__ import annotations

import time

from tests.conftest import call_in_reactor
from tests.integration.clients import connect, fill, until
from tests.integration.console import encoded

OUT = ("acknowledged", "expired", "dead_lettered", "discarded", "moved")


def _counts(api, name: str) -> dict:
    return api.get(f"/api/destinations/{encoded(name)}")


def _adds_up(counts: dict) -> bool:
    """restored + received = every fate + held."""
    out = sum(counts[fate] for fate in OUT)
    return counts["restored"] + counts["received"] - out == counts["messages"]


def test_a_queues_counts_add_up_through_every_fate(console):
    server, api = console
    name = "/queue/fates"
    api.set_parameter("VolQueueStoreImpl.cleanupinterval", 0.1)
    api.set_parameter("PersQueueFileStore.cleanupinterval", 0.1)
    soon = str(int(time.time() * 1000) + 300)
    fill(server.port, name, ["expires-v"], expires=soon)
    fill(server.port, name, ["expires-p"], expires=soon, persistent="true")
    fill(server.port, name, [f"m{i}" for i in range(10)], persistent="true")
    fill(server.port, name, [f"v{i}" for i in range(4)])
    assert until(lambda: _counts(api, name)["expired"] == 2), _counts(api, name)

    browse = api.get(f"/api/destinations/{encoded(name)}/messages?limit=100")["messages"]
    by_body = {m["body"]: m["message_id"] for m in browse}
    base = f"/api/destinations/{encoded(name)}/messages"
    api.ok("DELETE", f"{base}/{encoded(by_body['v3'])}")
    api.ok("POST", f"{base}/{encoded(by_body['v2'])}/move", {"to": "/queue/elsewhere"})

    consumer, recorder = connect(server.port)
    consumer.subscribe(name, id="1", ack="client-individual", headers={"prefetch-count": "3"})
    first = recorder.wait_for_messages(3)[:3]
    consumer.ack(first[0].headers["ack"])  # acknowledged
    consumer.nack(first[1].headers["ack"], requeue="true")  # comes back
    consumer.nack(first[2].headers["ack"], requeue="false")  # dead-lettered
    assert until(lambda: _counts(api, name)["dead_lettered"] == 1), str(_counts(api, name))
    assert recorder.wait_until(lambda: len(recorder.messages) >= 4)
    consumer.ack(recorder.messages[3].headers["ack"])
    consumer.disconnect()  # what it held unacknowledged goes back

    counts = _counts(api, name)
    assert until(lambda: _counts(api, name)["acknowledged"] == 2), _counts(api, name)
    assert until(lambda: _adds_up(_counts(api, name))), _counts(api, name)
    counts = _counts(api, name)
    assert counts["received"] == 16 and counts["restored"] == 0
    assert counts["expired"] == 2 and counts["discarded"] == 1 and counts["moved"] == 1
    assert counts["redelivered"] >= 1  # the NACK with requeue (and those held at the end)
    assert counts["messages"] == 16 - 2 - 2 - 1 - 1 - 1 == 9
    assert counts["delivered"] >= 4
    dmq = _counts(api, "/queue/DMQ")
    assert dmq["received"] == 1 and _adds_up(dmq)
    elsewhere = _counts(api, "/queue/elsewhere")
    assert elsewhere["received"] == 1 and _adds_up(elsewhere)

    purged = api.ok("POST", f"/api/destinations/{encoded(name)}/purge")["purged"]
    assert purged == 9
    assert until(lambda: _counts(api, name)["discarded"] == 10), _counts(api, name)
    # the stored depth follows once the store has applied the purge (see fates.py)
    assert until(lambda: _adds_up(_counts(api, name))), _counts(api, name)
    assert _counts(api, name)["messages"] == 0
    totals = api.get("/api/overview")["totals"]
    assert totals["acknowledged"] == 2 and totals["expired"] == 2


def test_a_transaction_that_aborts_takes_its_acknowledgements_back(console):
    server, api = console
    name = "/queue/tx"
    fill(server.port, name, ["a", "b"], persistent="true")
    consumer, recorder = connect(server.port)
    consumer.subscribe(name, id="1", ack="client-individual")
    messages = recorder.wait_for_messages(2)
    consumer.begin("t1")
    consumer.ack(messages[0].headers["ack"], transaction="t1")
    consumer.abort("t1")
    consumer.begin("t2")
    consumer.ack(messages[1].headers["ack"], transaction="t2")
    consumer.commit("t2")
    assert until(lambda: _counts(api, name)["acknowledged"] == 1), _counts(api, name)
    consumer.disconnect()
    assert until(lambda: _adds_up(_counts(api, name))), _counts(api, name)
    assert _counts(api, name)["messages"] == 1


def test_a_topics_messages_nobody_takes_are_counted_discarded(console):
    server, api = console
    name = "/topic/nobody"
    fill(server.port, name, ["lost-1", "lost-2"])
    assert until(lambda: _counts(api, name)["discarded"] == 2), _counts(api, name)
    listener, recorder = connect(server.port)
    listener.subscribe(name, id="1")
    fill(server.port, name, ["taken"])
    recorder.wait_for_messages(1)
    assert until(lambda: _counts(api, name)["acknowledged"] == 1), _counts(api, name)
    assert _counts(api, name)["discarded"] == 2
    listener.disconnect()


def test_what_the_store_held_at_the_start_is_counted_restored(reactor, start_server, console_of):
    server = start_server()
    fill(server.port, "/queue/kept", [f"k{i}" for i in range(5)], persistent="true")
    call_in_reactor(reactor, server.stop)
    server = start_server()
    api = console_of(server)
    counts = _counts(api, "/queue/kept")
    assert counts["restored"] == 5 and counts["received"] == 0 and _adds_up(counts)
    consumer, recorder = connect(server.port)
    consumer.subscribe("/queue/kept", id="1")
    recorder.wait_for_messages(5)
    assert until(lambda: _counts(api, "/queue/kept")["acknowledged"] == 5)
    # the stored depth follows once the store has applied the acknowledgements (fates.py:
    # the counts add up once nothing is on its way)
    assert until(lambda: _adds_up(_counts(api, "/queue/kept"))), _counts(api, "/queue/kept")
    consumer.disconnect()


def test_the_connections_page_counts_message_frames_not_the_connected_frame(console):
    server, api = console
    fill(server.port, "/queue/c", ["one", "two"])
    consumer, recorder = connect(server.port)
    idle, _ = connect(server.port)
    consumer.subscribe("/queue/c", id="1")
    recorder.wait_for_messages(2)

    def sent() -> list[int]:
        return sorted(c["messages_sent"] for c in api.get("/api/connections")["connections"])

    assert until(lambda: sent() == [0, 2]), sent()
    idle.disconnect()
    consumer.disconnect()


def test_rates_per_destination_and_per_connection(start_server, console_of):
    server = start_server(**{"Admin.sampleinterval": "0.2"})
    api = console_of(server)
    name = "/queue/rated"
    consumer, recorder = connect(server.port)
    consumer.subscribe(name, id="1", ack="client-individual")
    producer, sent = connect(server.port)
    acked = [0]

    def busy() -> None:
        """A message sent, delivered and acknowledged (one round)."""
        producer.send(name, "tick", receipt=f"r{acked[0]}")
        recorder.wait_for_messages(acked[0] + 1)
        consumer.ack(recorder.messages[acked[0]].headers["ack"])
        acked[0] += 1

    def rated(rates: dict) -> bool:
        busy()
        return all((rates.get(r) or 0) > 0 for r in ("publish_rate", "deliver_rate", "ack_rate"))

    def destination() -> dict:
        return api.get(f"/api/destinations/{encoded(name)}")

    def row() -> dict:
        (found,) = api.get("/api/destinations?filter=rated")["destinations"]
        return found

    def connections() -> dict[str, dict]:
        return {c["session"]: c for c in api.get("/api/connections")["connections"]}

    assert until(lambda: rated(destination()), timeout=20), destination()
    assert until(lambda: rated(row()), timeout=20), row()
    top = api.get("/api/destinations?sort=publish_rate&order=desc")["destinations"][0]
    assert top["name"] == name
    (reader,) = [c for c in connections().values() if c["consumers"] == 1]
    (writer,) = [c for c in connections().values() if c["published"] > 0]
    assert until(lambda: busy() or (connections()[writer["session"]]["publish_rate"] or 0) > 0)
    assert until(
        lambda: (
            busy()
            or (
                (connections()[reader["session"]]["deliver_rate"] or 0) > 0
                and (connections()[reader["session"]]["ack_rate"] or 0) > 0
            )
        )
    )
    assert connections()[reader["session"]]["publish_rate"] in (0, None)
    # Idle: the rates come down to nothing.
    assert until(lambda: destination()["publish_rate"] == 0, timeout=20), destination()
    producer.disconnect()
    consumer.disconnect()
