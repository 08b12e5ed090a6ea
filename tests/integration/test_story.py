"""A message's life story through the API: its journal records in order, looked up by id, on
the journal of a run with mixed fates that spans journal files and two runs of the server."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.conftest import call_in_reactor
from tests.integration.clients import connect, fill, until
from tests.integration.console import Api, encoded, open_console
from wiremq.config.groups import ServerSettings
from wiremq.modules.journal.index import index_path, writing_index_path
from wiremq.modules.security.users import UsersFile

SMALL_FILES = {
    "Journal.maxfilesize": str(64 * 1024),  # the smallest: the run spans many files
    "VolQueueStoreImpl.cleanupinterval": "0.1",
}


def _story(api, message_id: str) -> dict:
    answer = api.request("GET", f"/api/messages/{encoded(message_id)}/story")
    return answer.json if answer.status == 200 else {"records": [], "status": answer.status}


def _events(api, message_id: str) -> list[str]:
    return [r["event"] for r in _story(api, message_id)["records"]]


def _ids(api, queue: str) -> dict[str, str]:
    found = api.get(f"/api/destinations/{encoded(queue)}/messages")["messages"]
    return {m["body"]: m["message_id"] for m in found}


def test_life_stories_of_a_run_with_mixed_fates_across_files_and_runs(
    reactor, start_server, console_of, tmp_path
):
    server = start_server(**SMALL_FILES)
    api = console_of(server)
    fill(server.port, "/queue/noise", [f"filler {n}" for n in range(1200)])  # ~200 KB
    consumer, recorder = connect(server.port)
    consumer.subscribe("/queue/fates", id="f", ack="client-individual")
    fill(server.port, "/queue/fates", ["acked", "again", "dead"], persistent="true")
    acked, again, dead = recorder.wait_for_messages(3)
    consumer.ack(acked.headers["ack"])
    consumer.nack(again.headers["ack"])  # requeued: delivered again
    consumer.nack(dead.headers["ack"], requeue="false")  # to the DMQ
    redelivered = recorder.wait_for_messages(4)[3]
    assert redelivered.body == "again"
    consumer.ack(redelivered.headers["ack"], receipt="done")
    assert recorder.wait_until(lambda: "done" in recorder.receipts)
    consumer.disconnect()
    soon = str(int(time.time() * 1000) + 200)
    fill(server.port, "/queue/short", ["expires"], expires=soon)
    fill(server.port, "/topic/nobody", ["unheard"])
    fill(server.port, "/queue/kept", ["moved later"], persistent="true")
    kept = _ids(api, "/queue/kept")["moved later"]
    unheard = _by_event(server, "/topic/nobody")
    expired = _by_event(server, "/queue/short")
    ids = {
        "acked": acked.headers["message-id"],
        "again": again.headers["message-id"],
        "dead": dead.headers["message-id"],
    }
    assert until(lambda: "removed" in _events(api, expired))
    assert until(lambda: "acknowledged" in _events(api, ids["again"]))

    assert _events(api, ids["acked"]) == ["received", "stored", "delivered", "acknowledged"]
    assert _events(api, ids["again"]) == [
        "received",
        "stored",
        "delivered",
        "nacked",
        "redelivered",
        "acknowledged",
    ]
    story = _story(api, ids["dead"])
    assert [(r["event"], r["destination"]) for r in story["records"]] == [
        ("received", "/queue/fates"),
        ("stored", "/queue/fates"),
        ("delivered", "/queue/fates"),
        ("nacked", "/queue/fates"),
        ("dead_lettered", "/queue/fates"),
        ("stored", "/queue/DMQ"),
        ("received", "/queue/DMQ"),
    ]
    assert (
        story["records"][4]["dmq"] == "/queue/DMQ" and story["records"][4]["reason"] == "rejected"
    )
    assert story["records"][2]["session"] and story["records"][2]["subscription"] == "f"
    times = [r["ts"] for r in story["records"]]
    assert times == sorted(times)
    assert _events(api, expired) == ["received", "expired", "removed"]
    assert _events(api, unheard) == ["received", "discarded"]
    assert _story(api, unheard)["records"][1]["reason"] == "no-subscribers"
    assert len(_journal_files(server)) >= 3, "the run spans journal files"

    call_in_reactor(reactor, server.stop)
    first_run = _journal_files(server)
    for path in first_run:  # as a journal of a version before indexes
        index_path(path).unlink()
    server = start_server(**SMALL_FILES)
    api = console_of(server)
    first = _story(api, ids["acked"])
    assert [r["event"] for r in first["records"]] == [
        "received",
        "stored",
        "delivered",
        "acknowledged",
    ]
    assert first["indexed"] == len(first_run), "the files of the first run got indexes"
    api.ok(
        "POST",
        f"/api/destinations/{encoded('/queue/kept')}/messages/{encoded(kept)}/move",
        {"to": "/queue/elsewhere"},
    )
    assert until(lambda: "moved" in _events(api, kept))
    story = _story(api, kept)
    assert [r["event"] for r in story["records"]] == [
        "received",
        "stored",
        "moved",
        "stored",
        "received",
    ]
    assert story["records"][2]["to"] == "/queue/elsewhere"
    assert len({r["file"] for r in story["records"]}) == 2, "two runs, two files"
    assert story["indexed"] == 0, "indexed once"
    assert all(index_path(p).exists() for p in first_run), "sorted indexes of the closed files"
    being_written = server.core.journal.files.current
    assert being_written is not None and writing_index_path(being_written).exists()
    missing = api.request("GET", "/api/messages/wmq-none/story")
    assert missing.status == 404 and "no record of message 'wmq-none'" in missing.error


def _journal_files(server) -> list[Path]:
    folder = Path(ServerSettings.read(server.settings, "Server").datadir) / "journal"
    return sorted(folder.glob("*.jsonl"))


def _by_event(server, destination: str) -> str:
    """The id of the one message ``destination`` received (from the journal itself)."""

    def find() -> str | None:
        for path in _journal_files(server):
            for line in path.read_text().split("\n")[:-1]:  # whole lines: one may be
                record = json.loads(line)  # still being written
                if record["event"] == "received" and record.get("destination") == destination:
                    return str(record["message_id"])
        return None

    assert until(lambda: find() is not None)
    found = find()
    assert found is not None
    return found


def test_a_story_shows_only_what_its_reader_may_read(reactor, start_server, tmp_path):
    users = UsersFile(tmp_path / "data")
    users.set("root", "pw", "admin")
    users.set("watcher", "pw", "viewer")
    users.grant("watcher", None, "/queue/DMQ", ["read"])
    users.grant(None, "anonymous", ">", ["read", "write", "create"])  # the STOMP clients
    server = start_server(**{"Security.allowanonymous": "true"})
    console = open_console(reactor, server)
    root = Api(console.port, auth=("root", "pw"))
    consumer, recorder = connect(server.port)
    consumer.subscribe("/queue/secret", id="s", ack="client-individual")
    fill(server.port, "/queue/secret", ["x"])
    (message,) = recorder.wait_for_messages(1)
    consumer.nack(message.headers["ack"], requeue="false")
    message_id = message.headers["message-id"]
    assert until(lambda: len(_story(root, message_id)["records"]) == 5)
    watcher = Api(console.port, auth=("watcher", "pw"))
    story = _story(watcher, message_id)
    assert {r["destination"] for r in story["records"]} == {"/queue/DMQ"}
    assert story["hidden"] == 4  # received, delivered, nacked, dead_lettered in /queue/secret
    assert [r["event"] for r in story["records"]] == ["received"]
    users.set("stranger", "pw", "viewer")
    answer = Api(console.port, auth=("stranger", "pw")).request(
        "GET", f"/api/messages/{encoded(message_id)}/story"
    )
    assert answer.status == 403


def test_a_story_asked_for_at_once_holds_every_record_made_before_it(start_server, console_of):
    # records reach the writer every 10 s here: the story must not wait for that
    server = start_server(**{"Journal.flushinterval": "10"})
    api = console_of(server)
    fill(server.port, "/queue/fresh", ["just sent"], persistent="true")
    (message_id,) = _ids(api, "/queue/fresh").values()
    assert _events(api, message_id) == ["received", "stored"]
