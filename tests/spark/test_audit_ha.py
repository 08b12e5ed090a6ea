"""The conservation audit over the journals of an HA pair (docs/journal.md, "Across an HA
pair"): messages received on one node and acknowledged on the other across kill -9
failovers, and non-persistent ones lost with the node that held them, all explained."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.ha.failover import Consumer, Ledger, Producer, drained
from tests.ha.pair import WIREMQ, Pair, wait
from tests.integration.clients import connect
from tests.spark.test_audits_end_to_end import audit
from tests.stores.store_servers import PostgresServer, postgres_unavailable

pytestmark = pytest.mark.timeout(900)
KILLS = 2
VOLATILE = 5  # non-persistent messages waiting on the node killed first


def test_the_audit_explains_every_message_across_kill_9_failovers(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reason = postgres_unavailable()
    if reason:
        pytest.skip(reason)
    postgres = PostgresServer()
    try:
        postgres.start()
        pair = Pair(tmp_path, postgres.create_database("audit"))
        try:
            ledger = _traffic(pair)
        finally:
            pair.close()
        exported = subprocess.run(
            [*WIREMQ, "export", "--data", str(tmp_path / "a"), "--config", str(pair.config)]
            + ["--out", str(tmp_path / "snapshot.parquet")],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert exported.returncode == 0, exported.stderr
    finally:
        postgres.remove()
    code, verdict = audit(
        spark,
        capsys,
        "audit",
        "conservation",
        *("--journal", str(tmp_path / "a" / "journal")),
        *("--journal", str(tmp_path / "b" / "journal")),
        *("--snapshot", str(tmp_path / "snapshot.parquet")),
        *("--out", str(tmp_path / "audit")),
        "--json",
        "--quiet",
    )
    assert code == 0, verdict["unexplained_details"]
    assert verdict["unexplained"] == [] and verdict["still_stored"] == 0
    assert verdict["lost"] >= VOLATILE  # and whatever was in flight, never receipted
    assert verdict["acknowledged"] >= len(ledger.confirmed)


def _traffic(pair: Pair) -> Ledger:
    """Load over ``KILLS`` kill -9 failovers, with non-persistent messages waiting on the
    first node killed; every node stopped cleanly at the end."""
    pair.start()
    ledger = Ledger()
    producers = [Producer(pair.hosts, ledger, f"p{i}") for i in range(2)]
    consumers = [Consumer(pair.hosts, ledger, f"c{i}") for i in range(2)]
    for client in (*producers, *consumers):
        client.start()
    try:
        active = pair.wait_active()
        sender, told = connect(active.stomp_port)
        for number in range(VOLATILE):
            sender.send("/queue/volatile", f"v{number}", receipt=f"v{number}")
        assert told.wait_until(lambda: len(told.receipts) == VOLATILE)
        for _ in range(KILLS):
            goal = len(ledger.confirmed) + 50
            wait(lambda goal=goal: len(ledger.confirmed) >= goal, 60, "load", *pair.nodes)
            active.kill()
            (standby,) = [n for n in pair.nodes if n is not active]
            pair.wait_active(standby)
            active.start()
            wait(lambda a=active: a.role() == "standby", 60, "a standby again", active)
            active = standby
        for producer in producers:
            producer.stop()
        assert drained(ledger, 120)
    finally:
        for client in (*producers, *consumers):
            client.stop()
    for node in pair.nodes:  # the standby first: the active's stop would hand it the lease
        if node is not active:
            assert node.terminate() == 0
    assert active.terminate() == 0
    return ledger
