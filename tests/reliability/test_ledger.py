"""The kill -9 test's rules, each shown breaking on a made-up record (no server)."""

from __future__ import annotations

import pytest

from tests.reliability.ledger import Delivery, Key, Ledger, ranges, report, violations

pytestmark = pytest.mark.reliability


def _sent(ledger: Ledger, *keys: Key, confirmed: bool = True, round_: int = 0) -> None:
    for key in keys:
        ledger.wrote(key, round_)
    if confirmed:
        ledger.confirm(list(keys), round_)


def _deliver(ledger: Ledger, body: str, round_: int, ack: str = "receipted") -> Delivery:
    """``ack``: "receipted", "written" (no receipt) or "none"."""
    delivery = ledger.delivered(body, round_, redelivered=False)
    if ack != "none":
        ledger.ack_written([delivery])
    if ack == "receipted":
        ledger.acknowledged(delivery)
    return delivery


def test_a_clean_record_breaks_nothing():
    ledger = Ledger()
    _sent(ledger, (0, 0), (0, 1), (1, 0))
    _sent(ledger, (0, 2), confirmed=False)  # written, lost in the kill: allowed
    _deliver(ledger, "producer-0:0", 0, ack="written")  # may come back, or not
    _deliver(ledger, "producer-1:0", 0, ack="none")
    _deliver(ledger, "producer-0:1", 1)  # backlog first
    _deliver(ledger, "producer-1:0", 1)  # a redelivery may come late
    assert violations(ledger) == {}


def test_each_rule_names_the_messages_that_broke_it():
    ledger = Ledger()
    _sent(ledger, *[(0, n) for n in range(6)], (1, 0), (1, 1))
    _deliver(ledger, "producer-0:0", 0)
    _deliver(ledger, "producer-0:0", 1)  # acked-returned
    _deliver(ledger, "producer-0:2", 1, ack="written")
    _deliver(ledger, "producer-0:1", 1)  # order: 1 after 2
    _deliver(ledger, "producer-0:3", 1, ack="none")  # stranded: never comes back
    _deliver(ledger, "producer-0:5", 2, ack="none")
    _deliver(ledger, "producer-0:5", 2)  # duplicate-in-round
    _deliver(ledger, "producer-7:0", 2)  # phantom: producer 7 sent nothing
    _deliver(ledger, "hello", 2)  # phantom
    ledger.error("round 2: traceback")
    broken = violations(ledger)  # (0, 4) and (1, 0..1) never delivered: lost
    assert {rule: [item.split(" ")[0] for item in items] for rule, items in broken.items()} == {
        "phantom": ["producer-7:0", "hello"],
        "lost": ["producer-0:4", "producer-1:0", "producer-1:1"],
        "stranded": ["producer-0:3"],
        "acked-returned": ["producer-0:0"],
        "duplicate-in-round": ["producer-0:5"],
        "order": ["producer-0:1"],
        "server-error": ["round"],
    }
    text = report(broken)
    assert "lost (confirmed, but never delivered): 3" in text
    assert "all: producer-0:4; producer-1:0..1" in text
    assert "producer-0:0 [sent r0; confirmed r0; delivered r0 #1, acked #2; delivered r1" in text


def test_an_unconfirmed_message_may_be_lost_but_not_invented():
    ledger = Ledger()
    _sent(ledger, (0, 0), confirmed=False)
    _deliver(ledger, "producer-0:0", 0, ack="none")
    _deliver(ledger, "producer-0:1", 0)
    assert list(violations(ledger)) == ["phantom"]


def test_ranges_compress_seqs_per_producer():
    bodies = ["producer-1:4", "producer-0:3", "producer-0:1", "producer-0:2", "x", "producer-0:9"]
    assert ranges(bodies) == "producer-0:1..3,9; producer-1:4; 'x'"
