"""config.xml decides the modules of each chain: plug one in, take one out."""

from __future__ import annotations

import pytest

from tests.integration import plugins
from tests.integration.clients import connect
from wiremq.config.xmlconfig import ConfigError
from wiremq.modules.prioqueue import PrioQueueModule


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
        assert chain.module(PrioQueueModule) is None
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
