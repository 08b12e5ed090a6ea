"""config.xml decides the modules of each chain: plug one in, take one out."""

from __future__ import annotations

import time

import pytest

from tests.conftest import call_in_reactor
from tests.integration import plugins
from tests.integration.clients import connect, until
from wiremq.config.xmlconfig import ConfigError
from wiremq.modules.pipeline.prioqueue import PrioQueueModule


def _config(p2p: list[str], pubsub: list[str]) -> str:
    def modules(entries: list[str]) -> str:
        return "".join(
            f'<module class="{e}"/>' if ":" in e else f'<module name="{e}"/>' for e in entries
        )

    return (
        f'<wiremq><Pipeline domain="p2p">{modules(p2p)}</Pipeline>'
        f'<Pipeline domain="pubsub">{modules(pubsub)}</Pipeline></wiremq>'
    )


PLUGINS = "tests.integration.plugins"
RECORDER = f"{PLUGINS}:RecordingModule"
DEFAULT = ["admission", "transaction", "prioqueue", "storage", "distributing"]


def _exchange(server, destination: str, count: int) -> list[str]:
    consumer, recorder = connect(server.port)
    consumer.subscribe(destination, id="1", headers={"receipt": "s"})
    assert recorder.wait_until(lambda: "s" in recorder.receipts)
    producer, _ = connect(server.port)
    for i in range(count):
        producer.send(destination, f"m{i}")
    return [m.body for m in recorder.wait_for_messages(count)]


def test_a_plugged_in_module_sees_every_message(start_server):
    plugins.SEEN.clear()
    server = start_server(
        _config(
            ["admission", "transaction", RECORDER, "prioqueue", "storage", "distributing"], DEFAULT
        )
    )
    assert _exchange(server, "/queue/plugged", 25) == [f"m{i}" for i in range(25)]
    assert plugins.SEEN["p2p"] == [f"m{i}" for i in range(25)]
    assert "pubsub" not in plugins.SEEN


def test_removing_the_thread_buffer_module_keeps_everything_working(start_server):
    lean = ["admission", "transaction", "storage", "distributing"]
    server = start_server(_config(lean, lean))
    for chain in server.core.pipelines.chains.values():
        assert not any(isinstance(m, PrioQueueModule) for m in chain.modules)
    assert _exchange(server, "/queue/lean", 30) == [f"m{i}" for i in range(30)]
    assert _exchange(server, "/topic/lean", 30) == [f"m{i}" for i in range(30)]


@pytest.mark.parametrize(
    ("p2p", "problem"),
    [
        (["admission", "transaction", "storage"], "needs the 'distributing' module"),
        (["admission", "distributing", "storage"], "'storage' must precede 'distributing'"),
        (["storage", "admission", "distributing"], "'admission' must come first"),
        (["admission", "storage", "transaction", "distributing"], "'transaction' must precede"),
        (["admission", "storage", "shredder", "distributing"], "unknown module 'shredder'"),
        (["admission", "storage", f"{PLUGINS}:SEEN", "distributing"], "not a PipelineModule"),
    ],
)
def test_a_broken_pipeline_is_refused_with_the_file_and_line(start_server, p2p, problem):
    with pytest.raises(ConfigError) as raised:
        start_server(_config(p2p, DEFAULT))
    assert problem in str(raised.value)
    assert ".xml:1" in str(raised.value)


AFTER_STORAGE = ["admission", "transaction", "prioqueue", "storage"]


def test_a_module_between_storage_and_distributing_can_delay_and_the_producer_waits(
    start_server,
):
    delaying = [*AFTER_STORAGE, f"{PLUGINS}:DelayingModule", "distributing"]
    server = start_server(_config(delaying, delaying))
    consumer, recorder = connect(server.port)
    consumer.subscribe("/queue/slow", id="1", headers={"receipt": "s"})
    assert recorder.wait_until(lambda: "s" in recorder.receipts)
    producer, producer_recorder = connect(server.port)
    for persistent in ("false", "true"):
        started = time.monotonic()
        producer.send(
            "/queue/slow", persistent, headers={"persistent": persistent}, receipt=persistent
        )
        assert producer_recorder.wait_until(lambda p=persistent: p in producer_recorder.receipts)
        assert time.monotonic() - started >= plugins.DELAY  # the receipt waited for the module
    assert [m.body for m in recorder.wait_for_messages(2)] == ["false", "true"]


def test_a_module_between_storage_and_distributing_can_refuse_and_the_producer_is_told(
    start_server, tmp_path
):
    refusing = [*AFTER_STORAGE, f"{PLUGINS}:RefusingModule", "distributing"]
    config = _config(refusing, refusing)
    server = start_server(config)
    producer, recorder = connect(server.port)
    producer.send("/queue/picky", "kept", headers={"persistent": "true"}, receipt="kept")
    assert recorder.wait_until(lambda: "kept" in recorder.receipts)
    producer.send("/queue/picky", "refuse me", headers={"persistent": "true"}, receipt="no")
    assert recorder.wait_until(lambda: recorder.errors)
    [error] = recorder.errors
    assert error.headers["receipt-id"] == "no"
    assert error.headers["message"] == "message not accepted"
    assert "refused by the test module" in error.body
    # The refused message was stored before the module saw it: it leaves the store again.
    assert until(lambda: server.store.count("/queue/picky")[0] == 1, 10, every=0.05)
    call_in_reactor(server.reactor, server.stop)
    again = start_server(config)
    consumer, consumer_recorder = connect(again.port)
    consumer.subscribe("/queue/picky", id="1")
    assert [m.body for m in consumer_recorder.wait_for_messages(1)] == ["kept"]
    assert not consumer_recorder.wait_until(lambda: len(consumer_recorder.messages) > 1, 1.5)
