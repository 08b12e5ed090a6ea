"""The audit journal of a real server: opened and closed with it, switched off by config, for
the whole server or one destination, rotated by size."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import call_in_reactor
from tests.integration.clients import connect, until


def journal_files(server: Any) -> list[Path]:
    folder = server.config.settings.get("Server", "datadir")
    return sorted((Path(str(folder)) / "journal").glob("*.jsonl"))


def read_journal(server: Any) -> list[dict[str, Any]]:
    """Its whole records (a last line still being written has no newline yet)."""
    return [
        json.loads(line)
        for path in journal_files(server)
        for line in path.read_text().split("\n")[:-1]
    ]


def test_a_server_journals_its_run_and_its_messages(start_server, reactor):
    server = start_server()
    producer, recorder = connect(server.port)
    producer.send("/queue/j", "x", receipt="sent")
    assert recorder.wait_until(lambda: "sent" in recorder.receipts)
    producer.disconnect()
    call_in_reactor(reactor, server.stop)
    lines = read_journal(server)
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


QUIET = """<wiremq>
  <Destination name="/queue/quiet" journal="false"/>
</wiremq>
"""


def test_one_destination_is_left_out_and_files_rotate_by_size(start_server, reactor):
    server = start_server(QUIET, **{"Journal.maxfilesize": "65536"})
    producer, recorder = connect(server.port)
    journal = server.core.journal

    def written() -> int:
        return int(journal.statistics()["records_written"])

    for chunk in range(6):  # in batches of their own: one larger than a file is one file
        for n in range(100):
            producer.send("/queue/loud", f"loud-{chunk}-{n}")
            producer.send("/queue/quiet", f"quiet-{chunk}-{n}")
        producer.send("/queue/loud", "end", receipt=f"sent-{chunk}")
        assert recorder.wait_until(lambda chunk=chunk: f"sent-{chunk}" in recorder.receipts)
        assert until(lambda chunk=chunk: written() >= 1 + 101 * (chunk + 1))
    assert written() == 1 + 6 * 101, "the quiet destination's records are not even counted"
    producer.disconnect()
    call_in_reactor(reactor, server.stop)
    files = journal_files(server)
    assert len(files) >= 2, "the 606 received records (190 bytes each) pass 64 KiB"
    *running, stopping = files  # the last: the stop's batch (the 606 left in the queue)
    assert all(path.stat().st_size <= 65536 for path in running)
    lines = read_journal(server)
    assert {line.get("destination") for line in lines} == {None, "/queue/loud"}
    received = [line for line in lines if line["event"] == "received"]
    assert len(received) == 606 and len({line["message_id"] for line in received}) == 606
    assert lines[-1]["event"] == "server_stopped"
