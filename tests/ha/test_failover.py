"""An HA pair of real ``wiremq serve`` processes on a real PostgreSQL: the active killed,
paused, cut off from its database, and what clients and the store see."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest
import stomp

from tests.ha.failover import QUEUE, Consumer, Ledger, Producer, drained, load
from tests.ha.pair import WIREMQ, Node, Pair, ha_config, wait
from tests.integration.clients import connect, fill, free_port
from tests.integration.xaclient import XAResource

CYCLES = 10  # kill -9 failovers in the test suite (bench/failover.py runs 50)
TAKEOVER_SANITY = 30.0  # seconds: a generous bound; bench/failover.py has the figures


@pytest.fixture
def pair(database: str, tmp_path: Path) -> Iterator[Pair]:
    started = Pair(tmp_path, database)
    try:
        started.start()
        yield started
    finally:
        started.close()


def other(pair: Pair, node: Node) -> Node:
    (found,) = [n for n in pair.nodes if n is not node]
    return found


def committed_before_the_kill(node: Node, ledger: Ledger, body: str) -> None:
    """A transaction sent and committed on ``node``: its COMMIT's RECEIPT has come."""
    client, recorder = connect(node.stomp_port)
    client.begin(body)
    client.send(QUEUE, body, headers={"persistent": "true", "transaction": body})
    ledger.record("sent", body)
    client.commit(body, headers={"receipt": body})
    assert recorder.wait_until(lambda: body in recorder.receipts)
    ledger.record("confirmed", body)


def test_kill_9_of_the_active_under_load_loses_nothing_receipted_nor_redelivers_acked(
    pair: Pair, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = Ledger()
    producers, consumers = load(pair.hosts, ledger)
    clients = [*producers, *consumers]
    takeovers: list[float] = []
    active = pair.wait_active()
    try:
        for cycle in range(CYCLES):
            goal = len(ledger.confirmed) + 30
            wait(lambda goal=goal: len(ledger.confirmed) >= goal, 60, "load", *pair.nodes)
            committed_before_the_kill(active, ledger, f"commit-{cycle}")
            active.kill()
            killed_at = time.monotonic()
            standby = other(pair, active)
            wait(standby.stomp_open, TAKEOVER_SANITY, "the takeover", *pair.nodes)
            takeovers.append(time.monotonic() - killed_at)
            assert standby.role() == "active"
            active.start()  # back, as a standby
            wait(lambda a=active: a.role() == "standby", 60, "a standby again", active)
            active = standby
        for producer in producers:
            producer.stop()
        assert drained(ledger, 120), "the consumers never got every receipted message"
    finally:
        for client in clients:
            client.stop()
    with capsys.disabled():
        print(
            f"\nHA kill -9 takeovers ({CYCLES}): "
            + ", ".join(f"{t:.2f}" for t in takeovers)
            + f" s; {len(ledger.confirmed)} messages receipted, "
            f"{len(ledger.deliveries)} deliveries"
        )
    assert ledger.problems() == {
        "lost": [],
        "delivered after its ACK was receipted": [],
        "phantom": [],
        "delivered again without redelivered:true": [],
    }
    assert all(f"commit-{cycle}" in ledger.delivered_bodies() for cycle in range(CYCLES))
    assert ledger.errors == []
    assert all(client.connects > CYCLES / 2 for client in clients)  # they failed over
    assert max(takeovers) < TAKEOVER_SANITY


def test_prepared_xa_branches_are_committed_and_rolled_back_on_the_new_active(
    pair: Pair,
) -> None:
    active = pair.wait_active()
    worker = XAResource(active.stomp_port)
    kept, dropped = "fmt1:gtrid-ha:kept", "fmt1:gtrid-ha:dropped"
    for xid in (kept, dropped):
        worker.start(xid)
        worker.send("/queue/xa-out", f"prepared before the kill ({xid})", xid, persistent="true")
        worker.end(xid)
        worker.prepare(xid)
    active.kill()
    new = other(pair, active)
    pair.wait_active(new)
    coordinator = XAResource(new.stomp_port)
    assert sorted(coordinator.recover()) == sorted([kept, dropped])
    coordinator.commit(kept)
    coordinator.rollback(dropped)
    assert coordinator.recover() == []
    consumer, recorder = connect(new.stomp_port)
    consumer.subscribe("/queue/xa-out", id="x", ack="auto")
    fill(new.stomp_port, "/queue/xa-out", ["after"], persistent="true")  # behind them all
    assert recorder.wait_until(lambda: "after" in recorder.bodies())
    assert recorder.bodies() == [f"prepared before the kill ({kept})", "after"]
    coordinator.close()
    consumer.disconnect()


def test_a_durable_subscription_and_its_position_survive_a_kill_9(pair: Pair) -> None:
    active = pair.wait_active()
    durable = {"activemq.subscriptionName": "orders"}
    subscriber, received = connect(active.stomp_port, **{"client-id": "dur"})
    subscriber.subscribe(
        "/topic/ha", id="s", ack="client-individual", headers={**durable, "receipt": "sub"}
    )
    assert received.wait_until(lambda: "sub" in received.receipts)
    fill(active.stomp_port, "/topic/ha", ["t1", "t2", "t3", "t4"], persistent="true")
    assert received.wait_until(lambda: received.bodies() == ["t1", "t2", "t3", "t4"])
    for frame in received.messages[:2]:
        subscriber.ack(frame.headers["ack"], receipt=f"ack-{frame.body}")
    assert received.wait_until(lambda: {"ack-t1", "ack-t2"} <= set(received.receipts))
    active.kill()
    new = other(pair, active)
    pair.wait_active(new)
    again, replayed = connect(new.stomp_port, **{"client-id": "dur"})
    again.subscribe("/topic/ha", id="s", ack="client-individual", headers=durable)
    assert replayed.wait_until(lambda: replayed.bodies() == ["t3", "t4"])
    assert all(m.headers["redelivered"] == "true" for m in replayed.messages)
    fill(new.stomp_port, "/topic/ha", ["t5"], persistent="true")
    assert replayed.wait_until(lambda: replayed.bodies() == ["t3", "t4", "t5"])
    assert replayed.messages[-1].headers["redelivered"] == "false"
    again.disconnect()


def test_a_standby_keeps_its_ports_closed_and_answers_health_with_the_active(
    pair: Pair,
) -> None:
    active, standby = pair.nodes
    assert active.stomp_open() and not standby.stomp_open()
    assert active.health() == (200, {"role": "active", "node": "a", "active": "a", "epoch": 1})
    status, answer = standby.health()  # type: ignore[misc]
    assert status == 503 and answer["role"] == "standby" and answer["active"] == "a"
    metrics = standby.get("/metrics").decode()
    assert 'wiremq_ha_role{node="b",role="standby"} 1' in metrics
    assert "wiremq_ha_active 0" in metrics
    assert 'wiremq_ha_role{node="a",role="active"} 1' in active.get("/metrics").decode()
    view = standby.get("/api/ha")
    assert view["role"] == "standby" and view["active"] == "a"
    assert [(t["epoch"], t["node"], t["reason"]) for t in view["failovers"]] == [(1, "a", "first")]
    # A clean stop hands the lease over at once.
    assert active.terminate() == 0
    pair.wait_active(standby, timeout=10)
    assert standby.get("/api/ha")["history"][0].endswith("epoch 2, b from a (released)")
    assert "lease.released" in active.log_text()


def test_a_starting_node_never_answers_standby_without_naming_the_active(
    database: str, tmp_path: Path
) -> None:
    pair = Pair(tmp_path, database, HA__leasetime=60.0)  # the active waits on the lock too
    first, second = pair.nodes
    answers: list[tuple[int, dict[str, object]]] = []

    def answered() -> bool:
        found = second.health()
        if found is not None:
            answers.append(found)
        return found is not None

    try:
        first.start()
        pair.wait_active(first)
        blocker = psycopg2.connect(database)
        try:
            with blocker.cursor() as cursor:  # the second node's first look at the lease waits
                cursor.execute("LOCK TABLE wiremq_lease IN ACCESS EXCLUSIVE MODE")
            second.launch()
            wait(answered, 60, "the second node's console", second)
            assert answers[-1] == (503, {**answers[-1][1], "role": "starting"})
        finally:
            blocker.close()
        wait(lambda: answered() and answers[-1][1]["role"] == "standby", 60, "a standby", second)
    finally:
        pair.close()
    assert {a["role"] for _, a in answers} == {"starting", "standby"}
    assert all(status == 503 for status, _ in answers)
    assert all(a["active"] == "a" for _, a in answers if a["role"] == "standby")


def test_the_active_paused_past_its_lease_neither_serves_nor_writes_when_it_wakes(
    database: str, tmp_path: Path
) -> None:
    pair = Pair(
        tmp_path,
        database,
        HA__leasetime=3.0,  # the active stops 2.5 s after its last renewal: not too
        HA__renewinterval=0.2,  # soon for a loaded machine, and the test stays short
        HA__margin=0.5,
        HA__tryinterval=0.2,
    )
    try:
        pair.start()
        old, new = pair.nodes
        producer, produced = connect(old.stomp_port)
        consumer, consumed = connect(old.stomp_port)
        consumer.subscribe(QUEUE, id="1", ack="client-individual")
        producer.send(QUEUE, "before", headers={"persistent": "true"}, receipt="before")
        assert produced.wait_until(lambda: "before" in produced.receipts)
        assert consumed.wait_until(lambda: consumed.bodies() == ["before"])
        old.signal(19)  # SIGSTOP
        pair.wait_active(new, timeout=30)
        # While it sleeps, its clients send: the frames wait in its sockets.
        producer.send(QUEUE, "while paused", headers={"persistent": "true"}, receipt="paused")
        old.signal(18)  # SIGCONT
        wait(lambda: old.role() == "standby", 30, "the old active a standby again", old, new)
        assert "ha.stepping_down" in old.log_text()
        assert "paused" not in produced.receipts  # never accepted
        assert consumed.bodies() == ["before"]  # nothing more delivered
        assert not old.stomp_open()
        # Nothing it did reached the store: the new active has "before" only.
        checker, checked = connect(new.stomp_port)
        checker.subscribe(QUEUE, id="c", ack="client-individual")
        assert checked.wait_until(lambda: checked.bodies() == ["before"])
        checker.send(QUEUE, "marker", headers={"persistent": "true"})
        assert checked.wait_until(lambda: checked.bodies() == ["before", "marker"])
        assert checked.messages[0].headers["redelivered"] == "true"
        checker.disconnect()
    finally:
        pair.close()


def test_a_postgresql_restart_holds_producers_and_loses_nothing(
    postgres, database: str, tmp_path: Path
) -> None:
    pair = Pair(tmp_path, database, HA__leasetime=20.0, HA__tryinterval=0.2)
    ledger = Ledger()
    producers = [Producer(pair.hosts, ledger, f"p{i}") for i in range(2)]
    consumer = Consumer(pair.hosts, ledger, "c")
    try:
        pair.start()
        active = pair.wait_active()
        for client in (*producers, consumer):
            client.start()
        wait(lambda: len(ledger.confirmed) >= 50, 60, "load", *pair.nodes)
        postgres.stop("fast")
        try:
            stopped = len(ledger.confirmed)
            time.sleep(1.0)  # the database is down: nothing can be receipted meanwhile
            assert len(ledger.confirmed) <= stopped + len(producers)  # those in flight
        finally:
            postgres.start()
        wait(lambda: len(ledger.confirmed) >= stopped + 50, 60, "load again", *pair.nodes)
        for producer in producers:
            producer.stop()
        assert drained(ledger, 60)
    finally:
        for client in (*producers, consumer):
            client.stop()
        pair.close()
    assert pair.nodes[0] is active and "ha.stepping_down" not in active.log_text()
    assert all(p.connects == 1 for p in producers), "a producer's connection was dropped"
    assert ledger.errors == []
    assert ledger.problems()["lost"] == []
    assert "flow.stopped" in active.log_text() and "Store unreachable" in active.log_text()


@pytest.mark.parametrize(
    ("queues", "topics", "blamed", "expected"),
    [
        ("{closed}/nowhere", "{closed}/nowhere", "PersQueueFileStore", "Connection refused"),
        ("{port}/no_such_database", "{port}/{good}", "PersQueueFileStore", "does not exist"),
        ("{port}/{good}", "{port}/no_such_database", "TopicFileStore", "does not exist"),
    ],
    ids=["unreachable", "wrong database", "wrong topic database"],
)
def test_a_node_with_a_store_it_cannot_use_names_it_at_start(
    postgres, database: str, tmp_path: Path, queues: str, topics: str, blamed: str, expected: str
) -> None:
    where = {"closed": free_port(), "port": postgres.port, "good": database.rsplit("/", 1)[1]}
    given = [f"postgresql://wiremq:s3cret@127.0.0.1:{u.format(**where)}" for u in (queues, topics)]
    config = ha_config(tmp_path, given[0], {"TopicFileStore.storageuri": given[1]})
    result = subprocess.run(
        [*WIREMQ, "serve", "--config", str(config), "--data", str(tmp_path / "d")]
        + ["--port", "0", "--admin-port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    wrong = given[0] if blamed == "PersQueueFileStore" else given[1]
    assert f"cannot open the stores: {blamed}.storageuri: " in result.stderr
    assert wrong.replace("s3cret", "***") in result.stderr
    assert expected in result.stderr
    assert "s3cret" not in result.stderr
    assert "Traceback" not in result.stderr


def test_stomp_py_fails_over_with_a_host_list(pair: Pair) -> None:
    active = pair.wait_active()
    connection = stomp.Connection12(pair.hosts, reconnect_attempts_max=20)
    connection.connect(wait=True)
    connection.disconnect()
    active.kill()
    pair.wait_active(other(pair, active))
    again = stomp.Connection12(pair.hosts, reconnect_attempts_max=20)
    again.connect(wait=True)  # the killed node's port refuses; the other answers
    assert again.is_connected()
    again.disconnect()
