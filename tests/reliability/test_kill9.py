"""kill -9 the server under load, restart it on the same data, many times (issue #3).

Modelled on ActiveMQ's order-with-restart tests and Artemis' crash tests. Each
crash round starts ``wiremq serve --data DIR`` on a free port, with the same DIR
every round, and runs, over raw-socket STOMP 1.2 connections:

- three producers sending persistent messages ``producer-K:SEQ`` to one queue,
  each at most ``RATE`` a second: K=0 with a receipt on every SEND, one awaited
  at a time; K=1 with a receipt on every SEND, four in flight; K=2 with a
  receipt on every 10th SEND, two in flight;
- one consumer, ``ack:client-individual``, started late in some rounds so that a
  backlog builds up in the store, ACKing with receipts in small batches and in
  some rounds holding back the newest few dozen deliveries.

50-800 ms into the load the server gets SIGKILL. After the last crash round a
drain round consumes and acknowledges everything left, the server is killed
again, and a last round checks that nothing comes back.

The rules, checked over the whole run (words as defined in ``ledger.py``):

- phantom: every delivered body is ``producer-K:SEQ`` of a SEND a producer wrote;
- lost: every confirmed message is delivered at least once (before or after a kill);
- stranded: a confirmed message whose last delivery got no ACK onto the wire was
  still in the store, so it must have been delivered again (it was not, if this
  breaks);
- acked-returned: no message is delivered after the receipt of its ACK arrived;
- duplicate-in-round: no message is delivered twice to one consumer connection
  (nothing is ever NACKed);
- order: per producer, first deliveries (of messages no consumer had received
  before) arrive in strictly increasing seq order across the whole run; a
  redelivery is exempt whatever its ``redelivered`` header says;
- after-drain: once the drain round has acknowledged everything, a restart
  delivers nothing;
- server-error: no client gets an ERROR frame or fails, no server log holds a
  traceback or an error-level line.

The rules nothing later can mend (``SETTLED``) are checked after every round, so
a broken server fails early; the rest at the end. And the run must have tested
something: enough SENDs confirmed and ACKs receipted, and some confirmed
messages first delivered in a later round than their SEND (they crossed a kill
inside the store).
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.clients import TIMEOUT
from tests.reliability.ledger import SETTLED, Ledger, body_of, report, violations
from tests.reliability.load import Consumer, CrashClient, Producer
from tests.reliability.serverproc import ServerProcess, Servers

pytestmark = pytest.mark.reliability

ROUNDS = 20
SEED = 20261121
KILL_AFTER = (0.05, 0.8)  # seconds into the load
LATE_CONSUMER = (0.05, 0.6)  # in a third of the rounds the consumer starts this late
DRAIN_IDLE = (0.5, 3.0)  # end the drain this long after the last frame: owed all seen / else
VERIFY_IDLE = 1.0
RATE = 1500  # messages a second, at most, per producer: bounds the backlog to drain
LOGGED_ERROR = re.compile(r"\[(error|critical)\s*\]|\"level\": \"(error|critical)\"")


def _connected(server: ServerProcess) -> CrashClient:
    client = CrashClient(server.port)
    client.connect()
    return client


def _check_log(server: ServerProcess, ledger: Ledger, name: str) -> None:
    log = server.stderr()
    if "Traceback" in log:
        ledger.error(f"{name}: traceback in the server log:\n{log[log.index('Traceback') :]}")
    ledger.errors += [f"{name}: {line}" for line in log.splitlines() if LOGGED_ERROR.search(line)]


def _guarded(ledger: Ledger, name: str, run: Callable[..., object], *args: object) -> None:
    """Run a client; if it fails, the failure is recorded (a thread's exception is not
    a test failure by itself)."""
    try:
        run(*args)
    except Exception as error:
        ledger.error(f"{name} failed: {error!r}")


def _crash_round(
    servers: Servers,
    data: Path,
    ledger: Ledger,
    producers: list[Producer],
    round_: int,
    rng: random.Random,
) -> str:
    """One round of load ended by SIGKILL; a line saying what happened."""
    server = servers(data, f"round-{round_}")
    consumer = Consumer(round_, rng.randint(1, 8), rng.choice([0, rng.randint(1, 100)]))
    late = rng.choice([0.0, 0.0, rng.uniform(*LATE_CONSUMER)])
    kill_after = rng.uniform(*KILL_AFTER)
    clients = [_connected(server) for _ in range(len(producers) + 1)]
    before = (len(ledger.confirmed), len(ledger.deliveries))

    def consume() -> None:
        time.sleep(late)
        if consumer.subscribe(clients[-1]):
            consumer.run(clients[-1], ledger)

    jobs: list[tuple[object, ...]] = [
        (f"producer-{producer.number} r{round_}", producer.run, client, ledger, round_)
        for producer, client in zip(producers, clients, strict=False)
    ]
    jobs.append((f"consumer r{round_}", consume))
    threads = [threading.Thread(target=_guarded, args=(ledger, *job), daemon=True) for job in jobs]
    try:
        for thread in threads:
            thread.start()
        time.sleep(kill_after)
        status = server.kill()
        for thread in threads:
            thread.join(2 * TIMEOUT)
        assert not any(thread.is_alive() for thread in threads), "a client hung after the kill"
    finally:
        for client in clients:
            client.close()
    assert status == -9, f"round {round_}: the server exited with {status} before the kill"
    _check_log(server, ledger, f"round {round_}")
    return (
        f"round {round_}: consumer after {late * 1000:.0f} ms, kill after "
        f"{kill_after * 1000:.0f} ms, {len(ledger.confirmed) - before[0]} confirmed, "
        f"{len(ledger.deliveries) - before[1]} delivered"
    )


def _consume_until_idle(
    servers: Servers,
    data: Path,
    ledger: Ledger,
    round_: int,
    name: str,
    until_idle: Callable[[float], bool],
) -> None:
    """A consumer alone, acknowledging everything, until ``until_idle``; then SIGKILL."""
    server = servers(data, name)
    consumer = Consumer(round_, ack_batch=1)
    client = _connected(server)
    try:
        assert consumer.subscribe(client), f"{name}: the server closed the connection"
        consumer.run(client, ledger, until_idle)
        assert consumer.subscribed and not client.closed, f"{name}: {ledger.errors}"
    finally:
        client.close()
        server.kill()
    _check_log(server, ledger, name)


def _drained(ledger: Ledger) -> Callable[[float], bool]:
    """The drain ends when idle a while with every owed message seen, or idle long."""
    short, long = DRAIN_IDLE
    return lambda idle: idle >= long or (idle >= short and not ledger.owed())


def test_kill_9_under_load_loses_no_confirmed_message_and_returns_no_acked_one(
    servers: Servers, tmp_path: Path
) -> None:
    started = time.monotonic()
    rng = random.Random(SEED)
    data = tmp_path / "data"
    ledger = Ledger()
    producers = [Producer(0, 1, 1, RATE), Producer(1, 1, 4, RATE), Producer(2, 10, 2, RATE)]
    for round_ in range(ROUNDS):
        print(_crash_round(servers, data, ledger, producers, round_, rng))
        settled = {k: v for k, v in violations(ledger).items() if k in SETTLED}
        assert not settled, f"after round {round_}:\n{report(settled)}"
    _consume_until_idle(servers, data, ledger, ROUNDS, "drain", _drained(ledger))
    quiet_from = len(ledger.deliveries)
    _consume_until_idle(
        servers, data, ledger, ROUNDS + 1, "verify", lambda idle: idle >= VERIFY_IDLE
    )

    broken = violations(ledger, quiet_from)
    by_body = ledger.deliveries_of()
    crossed = [
        key
        for key, round_ in ledger.confirmed.items()
        if (seen := by_body.get(body_of(key))) and seen[0].round > round_
    ]
    unacked_back = [
        body
        for body, seen in by_body.items()
        if any(not d.ack_written for d in seen[:-1]) and seen[-1].round > seen[0].round
    ]
    acked = sum(d.acked_at is not None for d in ledger.deliveries)
    summary = (
        f"{len(ledger.written)} sent, {len(ledger.confirmed)} confirmed, "
        f"{len(ledger.deliveries)} deliveries, {acked} acknowledged; "
        f"{len(crossed)} confirmed messages crossed a kill in the store before their first "
        f"delivery, {len(unacked_back)} came back after a kill that cut them off unACKed, "
        f"{len(list(data.glob('*.tr*')))} kills landed inside a commit; "
        f"{time.monotonic() - started:.1f} s"
    )
    print(summary)
    assert not broken, f"{summary}\n{report(broken)}"
    assert len(ledger.confirmed) >= 20 * ROUNDS and acked >= 10 * ROUNDS, summary
    assert crossed, f"no confirmed message was still in the store at a kill: {summary}"
