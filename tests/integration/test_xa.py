"""XA branches over STOMP against a real server (docs/xa.md): start, end, prepare, one- and
two-phase commit, rollback, recover, timeouts, and the errors a coordinator may meet."""

from __future__ import annotations

import time

import pytest

from tests.conftest import call_in_reactor
from tests.integration.clients import Recorder, connect, fill, until
from tests.integration.test_flow_control import flow_state
from tests.integration.test_journal import read_journal
from tests.integration.xaclient import XAError, XAResource


@pytest.fixture
def resources(server):
    """``resources()``: a new XA resource (connection) on the server; closed after."""
    made: list[XAResource] = []

    def make() -> XAResource:
        made.append(XAResource(server.port))
        return made[-1]

    yield make
    for resource in made:
        resource.close()


def _consumer(port: int, destination: str, ack: str = "auto"):
    consumer, recorder = connect(port)
    consumer.subscribe(destination, id="c", ack=ack, headers={"receipt": "subscribed"})
    assert recorder.wait_until(lambda: "subscribed" in recorder.receipts)
    return consumer, recorder


def _quiet(recorder: Recorder, count: int) -> bool:
    """No more than ``count`` messages arrive within a while (a late one would show)."""
    time.sleep(0.5)
    return len(recorder.messages) == count


def test_two_phase_commit_from_another_connection_delivers_and_acknowledges(server, resources):
    fill(server.port, "/queue/xa-in", ["work"], persistent="true")
    _, out = _consumer(server.port, "/queue/xa-out")
    worker = resources()
    worker.connection.subscribe("/queue/xa-in", id="w", ack="client-individual")
    assert worker.wait(lambda: len(worker.messages) == 1)
    worker.start("gtrid-1:bq-1")
    worker.send("/queue/xa-out", "result", "gtrid-1:bq-1", persistent="true")
    worker.connection.ack(worker.messages[0].headers["ack"], transaction="gtrid-1:bq-1")
    worker.end("gtrid-1:bq-1")
    worker.prepare("gtrid-1:bq-1")
    assert _quiet(out, 0), "nothing is delivered before the second phase"
    coordinator = resources()
    assert coordinator.recover() == ["gtrid-1:bq-1"]
    coordinator.commit("gtrid-1:bq-1")
    assert [m.body for m in out.wait_for_messages(1)] == ["result"]
    assert coordinator.recover() == []
    worker.close()  # the acknowledged message is not given back
    _, again = _consumer(server.port, "/queue/xa-in")
    assert _quiet(again, 0)
    assert server.core.store.count("/queue/xa-in")[0] == 0


def test_rolling_back_a_prepared_branch_gives_back_what_it_took(server, resources):
    fill(server.port, "/queue/xa-rb", ["taken"], persistent="true")
    _, out = _consumer(server.port, "/queue/xa-rb-out")
    worker = resources()
    worker.connection.subscribe("/queue/xa-rb", id="w", ack="client-individual")
    assert worker.wait(lambda: len(worker.messages) == 1)
    worker.start("x2")
    worker.send("/queue/xa-rb-out", "never", "x2")
    worker.connection.ack(worker.messages[0].headers["ack"], transaction="x2")
    worker.prepare("x2")  # a prepare ends the branch on its own connection
    assert server.core.store.count("/queue/xa-rb")[0] == 0, "taken out of its queue"
    resources().rollback("x2")
    assert worker.wait(lambda: len(worker.messages) == 2)
    again = worker.messages[1]
    assert again.body == "taken" and again.headers["redelivered"] == "true"
    assert _quiet(out, 0)
    assert server.core.store.count("/queue/xa-rb")[0] == 1


def test_one_phase_commit_and_plain_rollback(server, resources):
    _, out = _consumer(server.port, "/topic/xa-1pc")
    resource = resources()
    resource.start("one")
    resource.send("/topic/xa-1pc", "a", "one")
    resource.end("one")
    resource.commit("one", one_phase=True)
    resource.start("two")
    resource.send("/topic/xa-1pc", "b", "two")
    resource.rollback("two")
    assert [m.body for m in out.wait_for_messages(1)] == ["a"]
    assert _quiet(out, 1)


def test_a_branch_not_prepared_in_time_is_rolled_back_and_its_owner_told(server, resources):
    resource = resources()
    resource.start("slow", **{"xa-timeout": "0.3"})
    resource.send("/queue/xa-slow", "late", "slow")
    assert resource.wait(lambda: len(resource.errors) == 1)
    notice = resource.errors[0]
    assert notice.headers["message"] == "transaction rolled back"
    assert notice.headers["transaction"] == "slow" and "timeout of 0.3 s" in notice.body
    assert resource.connection.is_connected(), "the notice does not end the connection"
    with pytest.raises(XAError) as caught:
        resource.prepare("slow")
    assert caught.value.message == "transaction rolled back"
    assert "XA_RBTIMEOUT" in caught.value.frame.body


def test_without_a_timeout_header_the_default_timeout_applies(start_server):
    server = start_server(**{"XATransactionController.defaulttimeout": "0.4"})
    resource = XAResource(server.port)
    try:
        resource.start("untimed")
        resource.send("/queue/xa-untimed", "late", "untimed")
        assert resource.wait(lambda: len(resource.errors) == 1)
        notice = resource.errors[0]
        assert notice.headers["transaction"] == "untimed" and "timeout of 0.4 s" in notice.body
        _, out = _consumer(server.port, "/queue/xa-untimed")
        assert _quiet(out, 0), "nothing of the rolled-back branch is delivered"
    finally:
        resource.close()


def test_a_prepared_branch_does_not_time_out(server, resources):
    _, out = _consumer(server.port, "/queue/xa-kept")
    resource = resources()
    resource.start("kept", **{"xa-timeout": "0.2"})
    resource.send("/queue/xa-kept", "kept", "kept")
    resource.prepare("kept")
    time.sleep(0.5)
    resource.commit("kept")
    assert [m.body for m in out.wait_for_messages(1)] == ["kept"]


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        (lambda r: (r.start("d"), r.start("d")), "duplicate XID"),
        (lambda r: r.commit("nobody"), "unknown XID"),
        (lambda r: (r.start("u"), r.end("u"), r.commit("u")), "XA protocol error"),
        (lambda r: r.start("has space"), "invalid XID"),
        (
            lambda r: (r.start("p"), r.prepare("p"), r.commit("p", one_phase=True)),
            "XA protocol error",
        ),
        (lambda r: r.request("BEGIN", "b", "sideways"), "invalid xa header"),
        (lambda r: (r.start("c"), r.request("COMMIT", "c", None)), "XA protocol error"),
    ],
    ids=["duplicate", "unknown", "unprepared", "bad-xid", "prepared-1pc", "bad-op", "plain"],
)
def test_coordinator_mistakes_get_a_clear_error(server, resources, steps, message):
    with pytest.raises(XAError) as caught:
        steps(resources())
    assert caught.value.message == message


def test_a_resource_the_server_closed_after_an_error_closes_quietly(server, monkeypatch):
    """However late stomp.py learns of the server's close (here: after close() and stomp.py's
    disconnect asked, before the DISCONNECT is sent), the resource's close raises nothing
    (the CI run's one error was this race)."""
    resource = XAResource(server.port)
    with pytest.raises(XAError):
        resource.commit("nobody")
    assert until(lambda: resource.connection.transport.socket is None)
    for connected in (resource.connection, resource.connection.transport):
        monkeypatch.setattr(connected, "is_connected", lambda: True)
    resource.close()


def test_another_connections_branch_cannot_be_prepared_while_it_is_on_it(server, resources):
    owner, other = resources(), resources()
    owner.start("busy")
    with pytest.raises(XAError) as caught:
        other.prepare("busy")
    assert "another connection" in caught.value.frame.body
    owner.end("busy")
    resources().prepare("busy")
    assert resources().recover() == ["busy"]


def test_a_branch_whose_connection_closes_while_on_it_is_rolled_back(server, resources):
    resource = resources()
    resource.start("gone")
    resource.send("/queue/xa-gone", "lost", "gone")
    resource.close()
    assert until(lambda: "gone" not in server.core.xa.branches)
    with pytest.raises(XAError) as caught:
        resources().commit("gone")
    assert "connection closed" in caught.value.frame.body


def test_an_ended_branch_survives_its_connection_and_can_be_joined(server, resources):
    _, out = _consumer(server.port, "/queue/xa-join")
    first = resources()
    first.start("j")
    first.send("/queue/xa-join", "from first", "j")
    first.end("j")
    first.close()
    second = resources()
    second.request("BEGIN", "j", "join")
    second.send("/queue/xa-join", "from second", "j")
    second.end("j")
    second.prepare("j")
    second.commit("j")
    assert sorted(m.body for m in out.wait_for_messages(2)) == ["from first", "from second"]


def test_the_query_api_counts_branches_by_state(reactor, server, resources):
    resource = resources()
    resource.start("s1")
    resource.start("s2")
    resource.end("s2")
    resource.start("s3")
    resource.prepare("s3")
    xa = flow_state(reactor, server)["transactions"]["xa"]
    assert xa["branches"] == {"active": 1, "idle": 1, "prepared": 1}


def _durable(port: int) -> XAResource:
    """A durable subscriber of /topic/xa-d that is an XA resource too."""
    subscriber = XAResource(port, **{"client-id": "xa-durable"})
    subscriber.request(
        "SUBSCRIBE",
        None,
        None,
        id="d",
        destination="/topic/xa-d",
        ack="client-individual",
        **{"activemq.subscriptionName": "d1"},
    )
    return subscriber


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_a_durable_subscribers_acknowledgement_in_a_prepared_branch(server, resources, outcome):
    subscriber = _durable(server.port)
    fill(server.port, "/topic/xa-d", ["kept"], persistent="true")
    assert subscriber.wait(lambda: len(subscriber.messages) == 1)
    subscriber.start("dur")
    subscriber.connection.ack(subscriber.messages[0].headers["ack"], transaction="dur")
    subscriber.prepare("dur")
    if outcome == "commit":
        resources().commit("dur")
    else:
        resources().rollback("dur")
        assert subscriber.wait(lambda: len(subscriber.messages) == 2)
        assert subscriber.messages[1].headers["redelivered"] == "true"
    subscriber.close()
    again = _durable(server.port)
    expected = 0 if outcome == "commit" else 1  # replayed from the store, unacknowledged
    time.sleep(0.5)
    assert [m.body for m in again.messages] == ["kept"] * expected
    again.close()


def _acknowledged_in_prepared_branch(
    server, resources, queue: str, body: str, xid: str, **headers: str
) -> XAResource:
    """A worker that received ``queue``'s one message and acknowledged it in branch
    ``xid``, now prepared."""
    fill(server.port, queue, [body], **headers)
    worker = resources()
    worker.connection.subscribe(queue, id="w", ack="client-individual")
    assert worker.wait(lambda: len(worker.messages) == 1)
    worker.start(xid)
    worker.connection.ack(worker.messages[0].headers["ack"], transaction=xid)
    worker.prepare(xid)
    return worker


def test_a_queue_message_acknowledged_in_a_rolled_back_branch_comes_back(server, resources):
    worker = _acknowledged_in_prepared_branch(server, resources, "/queue/xa-np", "volatile", "np")
    worker.rollback("np")
    assert worker.wait(lambda: len(worker.messages) == 2)
    assert worker.messages[1].body == "volatile"
    assert worker.messages[1].headers["redelivered"] == "true"


def test_a_message_given_back_by_a_rolled_back_prepared_branch_is_received_once(
    server, resources, reactor
):
    worker = _acknowledged_in_prepared_branch(
        server, resources, "/queue/xa-story", "taken", "x-story", persistent="true"
    )
    resources().rollback("x-story")
    assert worker.wait(lambda: len(worker.messages) == 2)
    message_id = worker.messages[1].headers["message-id"]
    worker.connection.ack(worker.messages[1].headers["ack"], receipt="acked")
    assert worker.wait(lambda: "acked" in worker.answers)
    call_in_reactor(reactor, server.core.journal.flush)

    def story() -> list[str]:
        lines = read_journal(server)
        return [line["event"] for line in lines if line.get("message_id") == message_id]

    # the first acknowledgement ends the story too: wait for the second
    assert until(lambda: story().count("acknowledged") == 2), story()
    assert story() == [
        "received",
        "stored",
        "delivered",
        "acknowledged",
        "unacknowledged",  # the rollback gave it back: taken in again, not received again
        "redelivered",
        "acknowledged",
    ]
