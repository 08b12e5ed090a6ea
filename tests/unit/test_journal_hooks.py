"""The journal's hooks: each message life event recorded where it happens (a core on a fake
clock, real connections, the real journal writing to a folder)."""

from __future__ import annotations

import json
from typing import Any

from tests.defaults import EGRESS_LIMITS as DEFAULT_LIMITS
from tests.unit.net import PERSISTENT, Net, Peer, frame
from wiremq.modules.flow.egress_queues import EgressQueue, QueueLimits
from wiremq.modules.journal.recorder import RecordingJournal
from wiremq.modules.journal.schema import PERSQUEUE
from wiremq.modules.persistence.cleanup import StoreCleanup
from wiremq.stores.api import QUEUE_PREFIX

Record = dict[str, Any]


def written(net: Net) -> list[Record]:
    """Every record the journal wrote so far (what was recorded is handed over first)."""
    journal = net.core.journal
    assert isinstance(journal, RecordingJournal)
    journal.flush()
    net.settle()
    return [
        json.loads(line)
        for path in sorted(journal.files.folder.glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]


def story(records: list[Record], message_id: str, destination: str | None = None) -> list[str]:
    """The events of one message, in order (with the reason or requeue where given)."""
    told = []
    for r in records:
        if r.get("message_id") != message_id:
            continue
        if destination is not None and r["destination"] != destination:
            continue
        extra = r.get("reason", r.get("requeue", r.get("dmq")))
        told.append(r["event"] if extra is None else f"{r['event']}:{extra}")
    return told


def ids_sent(received: list[Record], count: int) -> list[str]:
    """The ids of the first ``count`` messages sent, in order (wmq-<prefix>-N)."""
    prefix = received[0]["message_id"].rsplit("-", 1)[0]
    return [f"{prefix}-{n}" for n in range(1, count + 1)]


def until_idle(net: Net) -> None:
    """Run what was scheduled soon and the store's work, not the timers."""
    runtime = net.runtime
    while runtime.soon or any(w.calls for w in runtime.workers.values()):
        net.outbox.flush()
        runtime.run_soon()
        for worker in list(runtime.workers.values()):
            worker.run()
    net.outbox.flush()


def ids(peer: Peer) -> list[str]:
    return [m.headers["message-id"] for m in peer.messages]


def test_an_auto_mode_message_is_received_and_consumed_when_written(make_net):
    net = make_net(journal=True)
    consumer = Peer(net, "consumer")
    consumer.subscribe("/queue/q")
    producer = Peer(net, "producer")
    producer.send("/queue/q", "hello", {"expires": "4102444800000"})
    records = written(net)
    (message_id,) = ids(consumer)
    assert story(records, message_id) == ["received", "consumed"]
    received, consumed = [r for r in records if r.get("message_id") == message_id]
    assert received["expires"] == 4102444800000 and received["size"] == 5
    assert received["destination"] == "/queue/q" and received["persistent"] is False
    assert consumed["session"] == consumer.connection.session.session_id
    assert consumed["subscription"] == "1" and consumed["redelivered"] is False
    assert consumed["destination"] == "/queue/q" and consumed["size"] == 5
    assert all(r["ts"] == int(net.runtime.now * 1000) or r["ts"] > 1e12 for r in records)


def test_an_auto_mode_delivery_never_written_is_recorded_when_it_goes_back(make_net):
    net = make_net(journal=True)
    consumer = Peer(net, "consumer")
    consumer.subscribe("/queue/q")
    consumer.writer.window_open = False  # the client reads nothing: the delivery waits
    producer = Peer(net, "producer")
    producer.send("/queue/q", "hello")
    assert [r["event"] for r in written(net) if "message_id" in r] == ["received"]
    consumer.feed(frame("UNSUBSCRIBE", {"id": "1"}))
    second = Peer(net, "second")
    second.subscribe("/queue/q")
    records = written(net)
    (message_id,) = ids(second)
    assert story(records, message_id) == [
        "received",
        "delivered",
        "requeued:subscriber-left",
        "consumed",
    ]
    delivered, consumed = [r for r in records if r["event"] in ("delivered", "consumed")]
    assert delivered["ack"] == "auto" and consumed["redelivered"] is False


def test_acks_nacks_and_a_consumer_that_leaves(make_net):
    net = make_net(journal=True)
    first = Peer(net, "first")
    first.subscribe("/queue/q", ack="client-individual")
    producer = Peer(net, "producer")
    for body in ("a", "b", "c", "d"):
        producer.send("/queue/q", body)
    a, b, c, d = first.messages
    first.ack(a)
    first.feed(frame("NACK", {"id": b.headers["ack"]}))  # back to the queue
    first.feed(frame("NACK", {"id": c.headers["ack"], "requeue": "false"}))  # dropped
    redelivered = first.messages[-1]
    assert redelivered.headers["message-id"] == b.headers["message-id"]
    first.feed(frame("UNSUBSCRIBE", {"id": "1"}))  # d and b unacknowledged: back
    second = Peer(net, "second")
    second.subscribe("/queue/q")
    records = written(net)
    mid_a, mid_b, mid_c, mid_d = (m.headers["message-id"] for m in (a, b, c, d))
    assert story(records, mid_a) == ["received", "delivered", "acknowledged"]
    assert story(records, mid_b) == [
        "received",
        "delivered",
        "nacked:True",
        "redelivered",
        "requeued:subscriber-left",
        "consumed",
    ]
    assert story(records, mid_c, "/queue/q") == [  # NACKed without requeue: dead-lettered
        "received",
        "delivered",
        "nacked:False",
        "dead_lettered:rejected",
    ]
    assert story(records, mid_c, "/queue/DMQ") == ["received"]
    assert story(records, mid_d) == [
        "received",
        "delivered",
        "requeued:subscriber-left",
        "consumed",
    ]
    consumed = {r["message_id"]: r for r in records if r["event"] == "consumed"}
    assert consumed[mid_b]["redelivered"] is True and consumed[mid_d]["redelivered"] is True


def test_topic_messages_nobody_takes_and_what_a_leaving_subscriber_had(make_net):
    net = make_net(journal=True)
    producer = Peer(net, "producer")
    producer.send("/topic/t", "nobody")
    subscriber = Peer(net, "subscriber")
    subscriber.subscribe("/topic/t", ack="client")
    producer.send("/topic/t", "kept")
    subscriber.feed(frame("UNSUBSCRIBE", {"id": "1"}))
    records = written(net)
    nobody = next(r["message_id"] for r in records if r["event"] == "received")
    assert story(records, nobody) == ["received", "discarded:no-subscribers"]
    (kept,) = ids(subscriber)
    assert story(records, kept) == ["received", "delivered", "discarded:subscriber-left"]
    dropped = next(r for r in records if r.get("message_id") == kept and r["event"] == "discarded")
    assert dropped["subscription"] == "1", "dropped for that subscriber only"


def test_transactions_aborted_and_committed(make_net):
    net = make_net(journal=True)
    consumer = Peer(net, "consumer")
    consumer.subscribe("/queue/q")
    producer = Peer(net, "producer")
    producer.feed(frame("BEGIN", {"transaction": "t1"}))
    producer.send("/queue/q", "gone", {"transaction": "t1"})
    producer.feed(frame("ABORT", {"transaction": "t1"}))
    producer.feed(frame("BEGIN", {"transaction": "t2"}))
    producer.send("/queue/q", "kept", {"transaction": "t2"})
    producer.feed(frame("BEGIN", {"transaction": "t3"}))
    producer.send("/queue/q", "lost", {"transaction": "t3"})
    producer.feed(frame("COMMIT", {"transaction": "t2"}))
    producer.feed(frame("DISCONNECT", {}))  # t3 is still open: dropped
    records = written(net)
    received = [r["message_id"] for r in records if r["event"] == "received"]
    assert len(received) == 3
    gone, kept, lost = received
    assert story(records, gone) == ["received", "discarded:transaction-aborted"]
    assert story(records, kept) == ["received", "consumed"]
    assert story(records, lost) == ["received", "discarded:transaction-aborted"]


def test_a_transaction_discarded_for_memory_drops_what_it_held_and_is_sent_later(make_net):
    net = make_net({"TransactionMemSizeManager.uncommittedtxmemsizelimit": 1000}, journal=True)
    producer = Peer(net, "producer")
    producer.feed(frame("BEGIN", {"transaction": "big"}))
    producer.send("/queue/q", "a" * 600, {"transaction": "big"})
    producer.feed(frame("BEGIN", {"transaction": "small"}))
    producer.send("/queue/q", "b" * 300, {"transaction": "small"})
    producer.send("/queue/q", "c" * 200, {"transaction": "small"})  # past 1000: big goes
    producer.send("/queue/q", "late", {"transaction": "big"})  # dropped: big is discarded
    records = written(net)
    big, small_1, small_2, late = ids_sent([r for r in records if r["event"] == "received"], 4)
    assert story(records, big) == ["received", "discarded:transaction-discarded"]
    assert story(records, late) == ["received", "discarded:transaction-discarded"]
    assert story(records, small_1) == story(records, small_2) == ["received"]  # still open


def test_a_refused_message_is_received_then_refused_with_the_reason(make_net):
    net = make_net(journal=True)
    producer = Peer(net, "producer")
    producer.send("/queue/q", "bad", {"class-of-service": "7"})
    assert producer.errors
    records = written(net)
    (refused,) = [r for r in records if r["event"] == "refused"]
    assert story(records, refused["message_id"]) == [
        "refused:class-of-service must be 1, 2 or 3",
        "received",
    ]


def test_a_full_egress_queue_drops_the_oldest_for_that_subscriber(make_net):
    net = make_net(
        destinations={"/topic/x": {"slowsubscriberpolicy": "discard-oldest"}}, journal=True
    )
    small = tuple(QueueLimits(2, 2) for _ in range(4)) + (DEFAULT_LIMITS[EgressQueue.G1],)
    slow = Peer(net, "slow", limits=small)
    slow.subscribe("/topic/x")
    slow.writer.window_open = False
    publisher = Peer(net, "publisher")
    for i in range(10):
        publisher.send("/topic/x", str(i))
    slow.open_window()
    records = written(net)
    got = set(ids(slow))
    received = [r["message_id"] for r in records if r["event"] == "received"]
    lost = [m for m in received if m not in got]
    assert lost, "some were discarded"
    for message_id in lost:
        assert story(records, message_id) == [
            "received",
            "delivered",
            "discarded:egress-discard-oldest",
        ]
    for message_id in got:
        assert story(records, message_id) == ["received", "consumed"]


def test_expired_messages_the_volqueue_sweep_finds_are_a_cleanup_run(make_net):
    net = make_net(
        {"VolQueueStoreImpl.cleanupinterval": 1.0},
        {"/queue/old": {"expiredmessages": "deadmessagequeue"}},
        journal=True,
    )
    producer = Peer(net, "producer")
    soon = str(int(net.runtime.now * 1000) + 500)
    producer.send("/queue/old", "x", {"expires": soon})
    producer.send("/queue/keep", "y")
    net.runtime.advance(1.0)
    net.core.destinations.sweep_volatile()
    records = written(net)
    expired = next(r["message_id"] for r in records if r["event"] == "expired")
    assert story(records, expired, "/queue/old") == [
        "received",
        "expired:/queue/DMQ",
        "removed",
        "dead_lettered:expired",
    ]
    assert story(records, expired, "/queue/DMQ") == ["received"], "its copy, received there"
    started, ended = [r for r in records if r["event"].startswith("cleanup_")]
    assert started["store"] == ended["store"] == "volqueue" and started["interval"] == 1000
    assert started["run"] == ended["run"]
    assert (ended["scanned"], ended["removed"]) == (2, 1)
    removal = next(r for r in records if r["event"] == "removed")
    assert removal["run"] == started["run"] and removal["expires"] == int(soon)


def test_a_store_cleanup_run_records_what_it_removed_and_moved(make_net):
    net = make_net(
        {"PersQueueFileStore.cleanupinterval": 1.0},
        {"/queue/moved": {"expiredmessages": "deadmessagequeue"}},
        persistent=True,
        journal=True,
    )
    producer = Peer(net, "producer")
    soon = str(int(net.runtime.now * 1000) + 500)
    producer.send("/queue/gone", "x", {**PERSISTENT, "expires": soon})
    producer.send("/queue/moved", "y", {**PERSISTENT, "expires": soon})
    producer.send("/queue/stays", "z", PERSISTENT)
    core = net.core
    assert core.persistence is not None
    cleanup = StoreCleanup(
        PERSQUEUE,
        QUEUE_PREFIX,
        "PersQueueFileStore",
        net.runtime,
        net.settings,
        core.persistence,
        core.expiry,
        core.journal,
    )
    cleanup.start()
    net.runtime.advance(1.0)  # the run begins: it asks the store, then removes and moves
    until_idle(net)
    cleanup.stop()  # (it would run again forever: the net would never settle)
    records = written(net)
    stored = {r["destination"]: r for r in records if r["event"] == "stored"}
    gone, moved = stored["/queue/gone"]["message_id"], stored["/queue/moved"]["message_id"]
    assert stored["/queue/stays"]["store"] == "persqueue" and stored["/queue/stays"]["seq"] >= 1
    assert story(records, gone) == ["received", "stored", "expired", "removed"]
    assert story(records, moved, "/queue/moved") == [
        "received",
        "stored",
        "expired:/queue/DMQ",
        "removed",
        "dead_lettered:expired",
    ]
    assert story(records, moved, "/queue/DMQ") == ["stored", "received"]
    runs = [r for r in records if r["event"].startswith("cleanup_")]
    first_end = next(r for r in runs if r["event"] == "cleanup_ended")
    assert (first_end["scanned"], first_end["removed"]) == (2, 2)
    assert {r["run"] for r in records if r["event"] == "removed"} == {first_end["run"]}


def test_a_destination_can_be_left_out_of_the_journal(make_net):
    net = make_net(destinations={"/queue/quiet": {"journal": False}}, journal=True)
    producer = Peer(net, "producer")
    producer.send("/queue/quiet", "x")
    producer.send("/queue/loud", "y")
    records = written(net)
    assert {r["destination"] for r in records if "message_id" in r} == {"/queue/loud"}


def test_records_waiting_for_the_writer_stop_every_producer_until_written(make_net):
    net = make_net({"Journal.maxbacklog": 100}, journal=True)
    producer = Peer(net, "producer")
    net.workers_held = True  # the disk is slow: nothing is written
    for i in range(110):
        producer.send("/queue/q", str(i))
        net.core.journal.flush()
    assert producer.reader.calls == ["pause"]
    assert any(w["name"] == "Journal" and w["tripped"] for w in net.core.flow_state()["watermarks"])
    net.workers_held = False
    net.settle()
    assert producer.reader.calls == ["pause", "resume"]
    received = [r for r in written(net) if r["event"] == "received"]
    assert [r["message_id"] for r in received] == ids_sent(received, 110)


def test_what_an_operator_moves_deletes_and_purges(make_net):
    net = make_net(persistent=True, journal=True)
    producer = Peer(net, "producer")
    for body in ("moved", "kept", "purged"):
        producer.send("/queue/ops", body, PERSISTENT)
    producer.send("/queue/ops", "deleted")  # non-persistent
    until_idle(net)
    received = [r for r in written(net) if r["event"] == "received"]
    moved, _, purged, deleted = ids_sent(received, 4)
    operations = net.core.operations
    done: list[object] = []
    operations.take("/queue/ops", moved, "/queue/elsewhere", done.append, done.append)
    operations.take("/queue/ops", deleted, None, done.append, done.append)
    until_idle(net)
    operations.purge("/queue/ops", done.append, done.append)
    until_idle(net)
    assert set(done[:2]) == {"/queue/elsewhere", None} and done[2:] == [2]  # 2 purged
    records = written(net)
    assert story(records, moved, "/queue/ops") == ["received", "stored", "moved"]
    (move,) = [r for r in records if r["event"] == "moved"]
    assert move["to"] == "/queue/elsewhere" and move["persistent"] is True
    assert story(records, moved, "/queue/elsewhere") == ["stored", "received"]
    assert story(records, deleted) == ["received", "discarded:deleted"]
    assert story(records, purged) == ["received", "stored", "discarded:purged"]
