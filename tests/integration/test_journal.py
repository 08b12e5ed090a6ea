"""The audit journal of a real server: opened and closed with it, switched off by config."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import call_in_reactor
from tests.integration.clients import connect


def test_a_server_journals_its_run_and_its_messages(start_server, reactor):
    server = start_server()
    producer, recorder = connect(server.port)
    producer.send("/queue/j", "x", receipt="sent")
    assert recorder.wait_until(lambda: "sent" in recorder.receipts)
    producer.disconnect()
    call_in_reactor(reactor, server.stop)
    folder = server.config.settings.get("Server", "datadir")
    lines = [
        json.loads(line)
        for path in sorted((Path(str(folder)) / "journal").glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    events = [line["event"] for line in lines]
    assert events[0] == "server_started" and events[-1] == "server_stopped"
    assert lines[0]["server"] == lines[-1]["server"]
    assert "received" in events
    assert [line["destination"] for line in lines if line["event"] == "discarded"] == ["/queue/j"]
    assert {line["reason"] for line in lines if line["event"] == "discarded"} == {"server-stopped"}


def test_a_server_with_the_journal_off_writes_none(start_server, tmp_path):
    server = start_server(**{"Journal.enabled": "false"})
    producer, recorder = connect(server.port)
    producer.send("/queue/j", "x", receipt="sent")
    assert recorder.wait_until(lambda: "sent" in recorder.receipts)
    assert not (tmp_path / "data" / "journal").exists()
    assert server.core is not None and server.core.journal.statistics() == {}
