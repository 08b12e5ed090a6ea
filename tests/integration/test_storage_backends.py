"""The server on each storage backend (FileStorage, ZEO, PostgreSQL), and damaged stores."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import call_in_reactor
from tests.integration.clients import connect
from tests.stores.store_servers import postgres_cluster, postgres_unavailable, zeo_server
from wiremq.modules.events import EVENTS


@pytest.fixture(scope="module")
def zeo_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with zeo_server(tmp_path_factory.mktemp("zeo")) as uri:
        yield uri


@pytest.fixture(scope="module")
def postgresql_uri() -> Iterator[str]:
    reason = postgres_unavailable()
    if reason:
        pytest.skip(reason)
    with postgres_cluster() as uri:
        yield uri


def _round_trip_across_restart(reactor, start_server, overrides: dict[str, str]) -> None:
    server = start_server(**overrides)
    producer, recorder = connect(server.port)
    for i in range(5):
        producer.send("/queue/backend", str(i), headers={"persistent": "true"}, receipt=str(i))
    assert recorder.wait_until(lambda: len(recorder.receipts) == 5)
    call_in_reactor(reactor, server.stop)
    server = start_server(**overrides)
    consumer, consumer_recorder = connect(server.port)
    consumer.subscribe("/queue/backend", id="1", ack="client-individual")
    messages = consumer_recorder.wait_for_messages(5)
    assert [m.body for m in messages] == ["0", "1", "2", "3", "4"]
    for message in messages:
        consumer.ack(message.headers["ack"], receipt="a" + message.body)
    assert consumer_recorder.wait_until(lambda: len(consumer_recorder.receipts) == 5)


@pytest.mark.parametrize("backend", ["zeo", "postgresql"])
def test_the_server_runs_on_a_database_server_named_by_a_storage_uri(
    reactor, start_server, request, backend
):
    uri = request.getfixturevalue(f"{backend}_uri")
    overrides = {"PersQueueFileStore.storageuri": uri, "TopicFileStore.storageuri": uri}
    _round_trip_across_restart(reactor, start_server, overrides)


def test_a_torn_database_commit_is_cut_and_replayed_from_the_log(reactor, start_server, tmp_path):
    server = start_server()
    producer, recorder = connect(server.port)
    for i in range(3):  # one commit each: every SEND waits for its receipt
        producer.send("/queue/torn", str(i), headers={"persistent": "true"}, receipt=str(i))
        assert recorder.wait_until(lambda i=i: str(i) in recorder.receipts)
    call_in_reactor(reactor, server.stop)
    path = tmp_path / "data" / "persqueue.fs"
    size = path.stat().st_size
    with path.open("r+b") as damaged:  # the last commit was cut short by a crash
        damaged.truncate(size - 20)
    seen: list[dict] = []
    stop = EVENTS.subscribe(seen.append)
    try:
        server = start_server()
    finally:
        stop()
    [recovered] = [e for e in seen if e["event"] == "store.recovered"]  # the cut is logged
    assert "the log replays it" in recovered["meaning"]
    [replayed] = [e for e in seen if e["event"] == "wal.replayed"]
    assert replayed["messages"] == 3  # the cut commit came from the write-ahead log, again
    consumer, consumer_recorder = connect(server.port)
    consumer.subscribe("/queue/torn", id="1")
    assert [m.body for m in consumer_recorder.wait_for_messages(3)] == ["0", "1", "2"]


def test_an_unrecoverable_store_stops_the_server_with_a_clear_message(tmp_path: Path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "persqueue.fs").write_bytes(b"this is not a FileStorage file at all" * 10)
    result = subprocess.run(
        [sys.executable, "-m", "wiremq.server.cli", "serve", "--port", "0", "--data", str(data)]
        + ["--admin-port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "cannot open the stores" in result.stderr
    assert "persqueue.fs" in result.stderr
    assert "Traceback" not in result.stderr
