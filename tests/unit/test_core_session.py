"""The core session driven with no STOMP at all: the seam a second protocol would use.

A real ``Core`` on a fake clock (``tests/unit/net.py``, no peers); each client is
the simplest protocol adapter there is: a ``SessionCallback`` that records what
the core tells it, and an egress whose MESSAGE frames it takes as bytes. No
session, codec or connection of STOMP's is made; requests are calls on the
``CoreSession``, answers are the callback's.
"""

from __future__ import annotations

import pytest

from tests.defaults import EGRESS_LIMITS
from tests.unit.net import Net
from wiremq.modules.client.core_session import CoreSession, Login
from wiremq.modules.client.egress import EVERYTHING, Egress
from wiremq.modules.client.subscriptions import AckNaming, Acknowledgement, SubscribeRequest
from wiremq.modules.domains import require_domain
from wiremq.modules.errors import Refused
from wiremq.modules.message import Message

PERSISTENT = {"persistent": "true"}


class Adapter:
    """A protocol adapter reduced to what the core asks of one (``SessionCallback``)."""

    def __init__(self, net: Net, address: str = "10.0.0.1") -> None:
        self.net = net
        self.timers = True  # whether a request's settling runs the timers that fall due
        self.told: list[tuple[object, ...]] = []  # what the core said, in order
        self.paused = False
        self.bodies: list[bytes] = []  # the bodies of the MESSAGE frames taken
        self.egress = Egress(net.outbox, EGRESS_LIMITS)
        self.egress.writer = self
        self.session: CoreSession = net.core.sessions.open(self, self.egress, address)

    # -- SessionCallback -----------------------------------------------------------------

    def logged_in(self) -> None:
        self.told.append(("logged in", self.session.user))

    def completed(self, receipt: str) -> None:
        self.told.append(("completed", receipt))

    def refused(self, refusal: Refused, receipt: str | None) -> None:
        self.told.append(("refused", refusal.message, receipt))

    def transaction_discarded(self, name: str, refusal: Refused) -> None:
        self.told.append(("discarded", name, refusal.message))

    def disconnect(self, refusal: Refused) -> None:
        self.told.append(("disconnect", refusal.message))

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False

    # -- its socket writer ---------------------------------------------------------------

    def drain(self, egress: Egress) -> None:
        parts = egress.write_out(EVERYTHING)
        for tail in parts[1::2]:  # the bytes after the frame's blank line, less its NUL
            self.bodies.append(tail[tail.index(b"\n\n") + 2 : -1])

    # -- requests ------------------------------------------------------------------------

    def login(self, client_id: str = "") -> None:
        self.session.login(Login(None, None, client_id, None, AckNaming.NUMBER))
        self.net.settle()

    def send(self, destination: str, *bodies: str, **headers: str) -> None:
        """One batch, as an adapter makes it from one read."""
        session = self.session
        now_ms = self.net.runtime.now_ms()
        batch = [
            Message(
                self.net.core.ids.message(),
                destination,
                {"destination": destination, **headers},
                body.encode(),
                session.sender,
                session.progress,
                0,
                now_ms,
            )
            for body in bodies
        ]
        session.send(require_domain(destination), batch)
        self.settle()

    def subscribe(self, destination: str, sub_id: str = "1", ack: str = "auto") -> None:
        self.session.subscriptions.subscribe(
            SubscribeRequest(sub_id, destination, ack, "1.2"), None
        )
        self.settle()

    def settle(self) -> None:
        """Run what the request started; with ``timers`` off, no timer falls due (an XA
        branch's timeout would)."""
        net = self.net
        if self.timers:
            net.settle()
            return
        runtime = net.runtime
        while True:
            net.outbox.flush()
            if runtime.soon:
                runtime.run_soon()
            elif not any(worker.run() for worker in list(runtime.workers.values())):
                return

    def received(self) -> list[str]:
        return [body.decode() for body in self.bodies]


def connected(net: Net, address: str = "10.0.0.1") -> Adapter:
    adapter = Adapter(net, address)
    adapter.login()
    assert adapter.told == [("logged in", None)]
    adapter.told.clear()
    return adapter


def test_a_session_sends_and_receives_with_receipts_when_each_message_is_done(make_net):
    net = make_net()
    consumer, producer = connected(net), connected(net)
    consumer.subscribe("/queue/q")
    producer.send("/queue/q", "a", "b")
    producer.send("/queue/q", "c", receipt="r")
    assert consumer.received() == ["a", "b", "c"]
    assert producer.told == [("completed", "r")]
    assert producer.session.progress.count == 0
    assert producer.session.sender is not None
    assert producer.session.reading in net.queue("/queue/q").producers


def test_a_persistent_message_is_answered_once_stored_and_idle_waits_for_it(make_net):
    net = make_net(persistent=True)
    producer = connected(net)
    net.workers_held = True  # the store is slow: the commit waits
    producer.send("/queue/p", "kept", receipt="r", **PERSISTENT)
    idle: list[bool] = []
    producer.session.progress.when_idle(lambda: idle.append(True))
    assert producer.told == [] and idle == [] and producer.session.progress.count == 1
    net.workers_held = False
    net.settle()
    assert producer.told == [("completed", "r")] and idle == [True]
    assert net.core.store.count("/queue/p")[0] == 1


def test_a_message_the_pipeline_refuses_is_refused_naming_its_receipt(make_net):
    net = make_net(destinations={"/queue/small": {"maxmsgsize": 10}}, persistent=True)
    producer = connected(net)
    producer.send("/queue/small", "x" * 100, receipt="big", **PERSISTENT)
    [(what, message, receipt)] = producer.told
    assert (what, receipt) == ("refused", "big") and message
    assert producer.session.progress.count == 0


def test_a_commit_is_answered_once_its_messages_are_delivered(make_net):
    net = make_net()
    consumer, producer = connected(net), connected(net)
    consumer.subscribe("/queue/t")
    transactions = producer.session.transactions
    transactions.begin("tx", "began")
    producer.send("/queue/t", "one", transaction="tx", receipt="held-1")
    producer.send("/queue/t", "two", transaction="tx")
    assert consumer.received() == []
    assert producer.told == [("completed", "began"), ("completed", "held-1")]
    transactions.commit("tx", "committed")
    net.settle()
    assert consumer.received() == ["one", "two"]
    assert producer.told[-1] == ("completed", "committed")
    with pytest.raises(Refused, match="unknown transaction"):
        transactions.commit("tx", None)


def test_an_acknowledgement_held_in_an_aborted_transaction_is_not_applied(make_net):
    net = make_net()
    consumer, producer = connected(net), connected(net)
    consumer.subscribe("/queue/a", ack="client-individual")
    producer.send("/queue/a", "m")
    [subscription] = consumer.session.subscriptions.by_id.values()
    assert subscription.unacked is not None
    [message_id] = subscription.unacked
    subscriptions = consumer.session.subscriptions
    consumer.session.transactions.begin("tx", None)
    subscriptions.acknowledge([Acknowledgement(message_id, "1", False, True, "tx", "held")])
    consumer.session.abort("tx", "aborted")
    assert message_id in subscription.unacked
    subscriptions.acknowledge([Acknowledgement(message_id, "1", False, True, None, "acked")])
    net.settle()
    assert message_id not in subscription.unacked
    assert [receipt for _, receipt in consumer.told] == ["held", "aborted", "acked"]
    with pytest.raises(Refused, match="unknown message"):
        subscriptions.acknowledge([Acknowledgement(message_id, "1", False, True, None, None)])


def test_acknowledgements_read_together_act_in_order_answered_once_stored(make_net):
    """A run of plain ACKs is stored together and answered once stored; a NACK and an ACK in
    a transaction in the middle act in their place (the NACKed message again, the held
    ACK at COMMIT)."""
    net = make_net(persistent=True)
    consumer, producer = connected(net), connected(net)
    consumer.subscribe("/queue/run", ack="client-individual")
    producer.send("/queue/run", "0", "1", "2", "3", "4", **PERSISTENT)
    [subscription] = consumer.session.subscriptions.by_id.values()
    assert subscription.unacked is not None
    ids = list(subscription.unacked)
    consumer.session.transactions.begin("tx", None)
    net.workers_held = True  # the store is slow: the receipts wait for it
    consumer.session.subscriptions.acknowledge(
        [
            Acknowledgement(ids[0], "1", False, True, None, "r0"),
            Acknowledgement(ids[4], "1", False, True, None, None),
            Acknowledgement(ids[1], "1", True, True, None, None),
            Acknowledgement(ids[2], "1", False, True, "tx", "held"),
            Acknowledgement(ids[3], "1", False, True, None, "r3"),
        ]
    )
    assert consumer.told == [("completed", "held")]
    assert list(subscription.unacked) == [ids[2], ids[1]]  # the NACKed one went out again
    net.workers_held = False
    net.settle()
    assert consumer.told == [("completed", "held"), ("completed", "r0"), ("completed", "r3")]
    assert consumer.received() == ["0", "1", "2", "3", "4", "1"]
    assert list(subscription.unacked) == [ids[2], ids[1]]
    assert net.core.store.count("/queue/run")[0] == 2
    consumer.session.transactions.commit("tx", "committed")
    net.settle()
    assert list(subscription.unacked) == [ids[1]]
    assert net.core.store.count("/queue/run")[0] == 1
    fates = net.queue("/queue/run").fates
    assert (fates.acknowledged, fates.redelivered) == (4, 1)
    assert subscription.acknowledged == 4 and subscription.inflight_messages == 1


def test_a_watermark_stops_reading_the_session_until_it_clears(make_net):
    net = make_net(
        {"VolQueueStoreImpl.msghighwatermark": 2, "VolQueueStoreImpl.msglowwatermark": 0}
    )
    producer = connected(net)
    producer.send("/queue/w", "1", "2")
    assert producer.paused and not producer.session.reading.reading
    consumer = connected(net)
    consumer.subscribe("/queue/w")
    assert consumer.received() == ["1", "2"]
    assert not producer.paused and producer.session.reading.reading


def test_a_discarded_transaction_is_told_to_its_session_at_once(make_net):
    net = make_net({"TransactionMemSizeManager.uncommittedtxmemsizelimit": 100})
    producer = connected(net)
    producer.session.transactions.begin("big", None)
    producer.send("/queue/t", "x" * 200, transaction="big")
    assert producer.told == [("discarded", "big", "transaction discarded")]
    with pytest.raises(Refused, match="transaction discarded"):
        producer.session.transactions.commit("big", None)


def test_an_xa_branch_is_prepared_recovered_and_committed(make_net):
    net = make_net()
    consumer, resource = connected(net), connected(net)
    consumer.subscribe("/queue/xa")
    resource.timers = False  # the branch's timeout does not fall due
    xa = resource.session.xa
    xa.start("x-1", None, None)
    resource.send("/queue/xa", "in the branch", transaction="x-1")
    xa.end("x-1", None)
    xa.prepare("x-1", "prepared")
    resource.settle()
    assert xa.recover() == ["x-1"] and consumer.received() == []
    xa.commit("x-1", False, "committed")
    resource.settle()
    assert consumer.received() == ["in the branch"]
    assert resource.told == [("completed", "prepared"), ("completed", "committed")]
    assert xa.recover() == []


def test_a_slow_subscriber_is_disconnected_through_the_callback(make_net):
    net = make_net(
        {
            "DestinationManager.topicglobalmsghighwatermark": 3,
            "DestinationManager.topicglobalmsglowwatermark": 1,
        },
        {"/topic/d": {"slowsubscriberpolicy": "disconnect"}},
    )
    slow, publisher = connected(net), connected(net)
    slow.session.subscriptions.subscribe(
        SubscribeRequest("1", "/topic/d", "client-individual", "1.2", window_messages=2), None
    )
    for i in range(8):
        publisher.send("/topic/d", f"m{i}")
    assert slow.told == [("disconnect", "slow subscriber")]
    assert slow.session.subscriptions.by_id == {}
    assert net.topic("/topic/d").consumers == {}


def test_a_request_refused_at_once_raises_and_counts_no_work(make_net):
    net = make_net()
    client = connected(net)
    with pytest.raises(Refused, match="unknown subscription"):
        client.session.subscriptions.unsubscribe("9", None, "r")
    with pytest.raises(Refused, match="unknown XID"):
        client.session.xa.prepare("nothing", "r")
    with pytest.raises(Refused, match="unknown destination"):
        client.session.subscriptions.subscribe(
            SubscribeRequest("1", "/elsewhere/*", "auto", "1.2"), None
        )
    assert client.session.progress.count == 0 and client.told == []
