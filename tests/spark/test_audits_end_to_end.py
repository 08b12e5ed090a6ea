"""Both audits on the journal of a real server: traffic with expiries, cleanup runs, dead
message queue moves, NACKs, discards and refusals from real STOMP clients; then a
corrupted copy of that journal, a standalone Spark cluster, the report in a browser."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark
import pytest

from tests.integration.clients import connect, free_port, until
from tests.integration.test_cli import WIREMQ, _wait_listening
from wiremq.analytics.cli import main as audits
from wiremq.server.cli import _parser

CONFIG = """<wiremq>
  <VolQueueStoreImpl cleanupinterval="0.2"/>
  <PersQueueFileStore cleanupinterval="0.3"/>
  <TopicFileStore cleanupinterval="0.3"/>
  <Destination name="/queue/dmq-src" expiredmessages="deadmessagequeue"/>
</wiremq>
"""

# What the traffic below does to each message, counted by fate.
pytestmark = pytest.mark.timeout(900)  # a server, JVMs, a cluster: slow on a busy machine

EXPECTED = {
    "received": 45,  # 44 sent, and the DMQ's copy of the one NACKed without requeue
    "acknowledged": 24,  # /queue/work 19 (one after a NACK), /topic/news 5
    "expired": 6,  # /queue/expire 3 (non-persistent), /queue/pexpire 3 (persistent)
    "dead_lettered": 3,  # /queue/dmq-src 2, the NACK without requeue
    "discarded": 4,  # the NACKed one's copy at the stop, /topic/empty, an aborted transaction's 2
    "still_stored": 7,  # the 2 copies in /queue/DMQ, /queue/kept 1, /queue/stored 4
    "refused": 1,  # class-of-service 9
}


@dataclass
class Traffic:
    data: Path
    work: Path  # a folder for the tests' own files


def records(journal: Path, event: str) -> list[dict[str, Any]]:
    """The journal's records of ``event``; a last line the server is still writing (no
    newline yet: a read may see part of a write) is left for the next look."""
    return [
        line
        for path in sorted(journal.glob("*.jsonl"))
        for line in map(json.loads, path.read_text().split("\n")[:-1])
        if line["event"] == event
    ]


def drive(port: int, journal: Path) -> None:
    """The traffic EXPECTED counts."""
    soon = str(int(time.time() * 1000) + 300)
    producer, sent = connect(port)

    def send(destination: str, body: str, **headers: str) -> None:
        producer.send(destination, body, headers=headers, receipt=f"r-{len(sent.receipts)}-{body}")

    consumer, got = connect(port)
    consumer.subscribe("/queue/work", id="w", ack="client-individual")
    listener, news = connect(port)
    listener.subscribe("/topic/news", id="n", ack="auto", receipt="subscribed")
    assert news.wait_until(lambda: "subscribed" in news.receipts)
    for i in range(10):
        send("/queue/work", f"np{i}")
        send("/queue/work", f"p{i}", persistent="true")
    for i in range(3):
        send("/queue/expire", f"e{i}", expires=soon)
        send("/queue/pexpire", f"pe{i}", expires=soon, persistent="true")
    for i in range(2):
        send("/queue/dmq-src", f"d{i}", expires=soon, persistent="true")
    for i in range(4):
        send("/queue/stored", f"s{i}", persistent="true")
    for i in range(5):
        send("/topic/news", f"n{i}")
    send("/topic/empty", "nobody")
    producer.begin("t1")
    send("/queue/tx", "t1-a", transaction="t1")
    send("/queue/tx", "t1-b", transaction="t1")
    producer.abort("t1")
    producer.begin("t2")
    send("/queue/kept", "t2-a", transaction="t2", persistent="true")
    producer.commit("t2", receipt="committed")
    assert sent.wait_until(lambda: "committed" in sent.receipts)
    assert news.wait_for_messages(5)
    messages = got.wait_for_messages(20)
    # Non-persistent ones (the NACKed-without-requeue one's copy is dropped at the stop): the
    # persistent and the non-persistent messages may reach the consumer in either order.
    by_body = {m.body: m for m in messages}
    nacked, dropped = by_body.pop("np0"), by_body.pop("np1")
    rest = list(by_body.values())
    consumer.nack(nacked.headers["ack"])
    consumer.nack(dropped.headers["ack"], requeue="false")
    for message in rest:
        consumer.ack(message.headers["ack"])
    again = got.wait_for_messages(21)[-1]
    assert again.headers["message-id"] == nacked.headers["message-id"]
    consumer.ack(again.headers["ack"], receipt="acked")
    assert got.wait_until(lambda: "acked" in got.receipts)
    bad, refusal = connect(port)
    bad.send("/queue/work", "bad", headers={"class-of-service": "9"})
    assert refusal.wait_until(lambda: refusal.errors)
    # The cleanup runs (every 0.3 s) and the VolQueueStore's sweep (0.2 s) take the 8
    # expired messages out; the journal shows it (written every Journal.flushinterval).
    assert until(lambda: len(records(journal, "removed")) == 8, timeout=20)
    for client in (producer, consumer, listener):
        client.disconnect()


@pytest.fixture(scope="module")
def traffic(tmp_path_factory: pytest.TempPathFactory) -> Traffic:
    work = tmp_path_factory.mktemp("audit")
    data = work / "data"
    config = work / "config.xml"
    config.write_text(CONFIG)
    port = free_port()
    server = subprocess.Popen(
        [*WIREMQ, "serve", "--port", str(port), "--data", str(data), "--config", str(config)]
        + ["--admin-port", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_listening(port, server, timeout=30)
        drive(port, data / "journal")
        running = subprocess.run(
            [*WIREMQ, "export", "--data", str(data)], capture_output=True, text=True
        )
        assert running.returncode == 2 and "still running" in running.stderr
    finally:
        server.send_signal(signal.SIGTERM)
        _, stderr = server.communicate(timeout=30)
    assert server.returncode == 0, stderr.decode()
    exported = subprocess.run(
        [*WIREMQ, "export", "--data", str(data), "--config", str(config)],
        capture_output=True,
        text=True,
    )
    assert exported.returncode == 0, exported.stderr
    assert "7 stored messages" in exported.stdout
    return Traffic(data, work)


def audit(spark: Any, capsys: Any, *argv: str) -> tuple[int, dict[str, Any]]:
    """Run ``wiremq audit ...`` in this process on the shared session; (exit, JSON)."""
    code, verdict, _ = audit_told(spark, capsys, *argv)
    return code, verdict


def audit_told(spark: Any, capsys: Any, *argv: str) -> tuple[int, dict[str, Any], str]:
    """``audit``, and what it said on stderr (its progress)."""
    capsys.readouterr()
    code = audits(_parser().parse_args(argv), spark)
    said = capsys.readouterr()
    return code, json.loads(said.out), said.err


def test_the_conservation_audit_proves_every_messages_fate(spark, traffic, capsys):
    out = traffic.work / "conservation"
    code, verdict = audit(
        spark,
        capsys,
        "audit",
        "conservation",
        "--data",
        str(traffic.data),
        "--out",
        str(out),
        "--json",
        "--quiet",
    )
    assert code == 0, verdict["unexplained_details"]
    assert verdict["ok"] is True and verdict["unexplained"] == []
    assert {k: verdict[k] for k in EXPECTED} == EXPECTED
    messages = spark.read.parquet(str(out / "messages.parquet"))
    reasons = messages.where("fate = 'discarded'").groupBy("reason").count().collect()
    assert {r["reason"]: r["count"] for r in reasons} == {
        "server-stopped": 1,
        "no-subscribers": 1,
        "transaction-aborted": 2,
    }
    for table in ("messages", "summary", "fates_by_destination", "unexplained"):
        assert (out / f"{table}.parquet").is_dir()
        (csv,) = (out / f"{table}.csv").glob("*.csv")
        assert csv.read_text().splitlines()[0]
    assert (out / "report.html").read_text().count("<svg") >= 1


def test_the_cleanup_audit_finds_every_removal_due_and_in_time(spark, traffic, capsys):
    out = traffic.work / "cleanup"
    code, verdict, progress = audit_told(
        spark, capsys, "audit", "cleanup", "--data", str(traffic.data), "--out", str(out), "--json"
    )
    assert code == 0, verdict
    steps = [line for line in progress.splitlines() if line.startswith("[audit ")]
    assert "reading the journal at" in steps[0] and "done in" in steps[-1], progress
    assert verdict["removals"] == 8
    assert verdict["premature_removals"] == [] and verdict["outlived"] == []
    stores = {(r["store"], r["destination"]): r["removals"] for r in verdict["lag_percentiles"]}
    assert stores == {
        ("volqueue", "/queue/expire"): 3,
        ("persqueue", "/queue/pexpire"): 3,
        ("persqueue", "/queue/dmq-src"): 2,
    }
    assert verdict["runs"] > 2 and verdict["overran_runs"] == []
    for table in ("runs", "removals_per_run", "lag_percentiles", "premature_removals"):
        assert (out / f"{table}.parquet").is_dir() and list((out / f"{table}.csv").glob("*.csv"))
    report = (out / "report.html").read_text()
    assert "Audit passed." in report and "Cleanup lag, persqueue" in report
    assert "Removals per run" in report and report.count("<svg") >= 3


@pytest.fixture(scope="module")
def corrupted(traffic: Traffic) -> tuple[Path, str, str]:
    """A copy of the journal with one acknowledgement taken out and a removal of a message
    that had not expired put in; (its folder, the message without its ack, the one
    removed)."""
    journal = traffic.work / "corrupted"
    shutil.copytree(traffic.data / "journal", journal)
    acked = [r for r in records(journal, "acknowledged") if r["destination"] == "/queue/work"]
    unacked, removed = acked[0], acked[1]
    run = next(r for r in records(journal, "cleanup_started") if r["store"] == "persqueue")
    for path in journal.glob("*.jsonl"):
        lines = path.read_text().splitlines(keepends=True)
        kept = [line for line in lines if json.loads(line) != unacked]
        path.write_text("".join(kept))
    fake = {
        "v": 1,
        "event": "removed",
        "ts": removed["ts"],
        "message_id": removed["message_id"],
        "destination": removed["destination"],
        "size": removed["size"],
        "persistent": removed["persistent"],
        "expires": removed["ts"] - 1000,  # it claims to have expired: it never did
        "store": "persqueue",
        "run": run["run"],
    }
    with next(journal.glob("*.jsonl")).open("a") as out:
        out.write(json.dumps(fake) + "\n")
    return journal, unacked["message_id"], removed["message_id"]


def test_the_audits_name_exactly_the_messages_of_a_corrupted_journal(
    spark, traffic, corrupted, capsys
):
    journal, unacked, removed = corrupted
    common = ("--data", str(traffic.data), "--journal", str(journal), "--json", "--quiet")
    code, verdict = audit(
        spark, capsys, "audit", "conservation", *common, "--out", str(traffic.work / "c1")
    )
    assert code == 1 and verdict["ok"] is False
    assert sorted(verdict["unexplained"]) == sorted([unacked, removed])
    problems = {d["message_id"]: d["problems"] for d in verdict["unexplained_details"]}
    assert "never settled" in problems[unacked]
    assert "removed by a cleanup run" in problems[removed]

    code, verdict = audit(
        spark, capsys, "audit", "cleanup", *common, "--out", str(traffic.work / "c2")
    )
    assert code == 1 and verdict["ok"] is False
    assert [r["message_id"] for r in verdict["premature_removals"]] == [removed]
    assert verdict["premature_removals"][0]["expires"] == 0, "as received, not as claimed"
    assert len(verdict["runs_disagreeing"]) == 1


def test_the_report_opens_in_a_browser_with_its_charts(traffic):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium is not None, "chromium is installed by `make test` (see the Makefile)"
    report = traffic.work / "conservation" / "report.html"
    assert report.exists(), "written by the conservation test"
    html = report.read_text()
    assert "src=" not in html and "href=" not in html, "the report loads nothing"
    shown = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", report.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    dom = shown.stdout
    assert "Audit passed." in dom
    assert dom.count("<svg") >= 1 and dom.count("<rect") >= 5
    assert "/queue/work" in dom and "Fates per destination" in dom


def test_an_audit_without_java_says_so(traffic, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(Path(sys.executable).parent)  # python, no java
    done = subprocess.run(
        [*WIREMQ, "audit", "conservation", "--data", str(traffic.data), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 2
    assert "Java was not found" in done.stderr and "openjdk-17" in done.stderr


def test_an_audit_of_a_missing_journal_says_so(tmp_path):
    done = subprocess.run(
        [*WIREMQ, "audit", "cleanup", "--data", str(tmp_path / "nothing")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "no journal at" in done.stderr


# -- a standalone Spark cluster ---------------------------------------------------------------


@dataclass
class Cluster:
    url: str
    env: dict[str, str]


def _daemon(env: dict[str, str], action: str, cls: str, *args: str) -> None:
    script = Path(pyspark.__file__).parent / "sbin" / "spark-daemon.sh"
    subprocess.run(
        ["bash", str(script), action, cls, "1", *args],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )


MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A Spark master and one worker (1 core, 1 GiB) on loopback, from the installed
    pyspark's sbin scripts; stopped after the test."""
    port, ui, worker_ui = free_port(), free_port(), free_port()
    env = {
        **os.environ,
        "SPARK_HOME": str(Path(pyspark.__file__).parent),
        "SPARK_PID_DIR": str(tmp_path / "pids"),
        "SPARK_LOG_DIR": str(tmp_path / "logs"),
        "SPARK_IDENT_STRING": f"wiremq-test-{os.getpid()}",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_WORKER_DIR": str(tmp_path / "work"),
    }
    url = f"spark://127.0.0.1:{port}"
    try:
        _daemon(
            env,
            "start",
            MASTER,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(ui),
        )
        _daemon(
            env,
            "start",
            WORKER,
            "--host",
            "127.0.0.1",
            "--webui-port",
            str(worker_ui),
            "--cores",
            "1",
            "--memory",
            "1g",
            url,
        )

        def worker_alive() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as page:
                    state = json.load(page)
            except (OSError, ValueError):  # not up, or a page not yet whole (under load)
                return False
            return any(w.get("state") == "ALIVE" for w in state.get("workers", []))

        logs = tmp_path / "logs"
        assert until(worker_alive, timeout=60), "\n".join(
            p.read_text()[-2000:] for p in logs.glob("*") if p.is_file()
        )
        yield Cluster(url, env)
    finally:
        for cls in (WORKER, MASTER):
            _daemon(env, "stop", cls)


def test_an_audit_runs_on_a_standalone_cluster(traffic, cluster, tmp_path):
    done = subprocess.run(
        [
            *WIREMQ,
            "audit",
            "conservation",
            "--data",
            str(traffic.data),
            "--master",
            cluster.url,
            "--driver-memory",
            "1g",
            "--out",
            str(tmp_path / "out"),
            "--json",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        env=cluster.env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    verdict = json.loads(done.stdout)
    assert verdict["ok"] is True
    assert {k: verdict[k] for k in EXPECTED} == EXPECTED
