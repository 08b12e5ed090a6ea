"""The journal's encoder (C) against a plain-Python reading of the same plans."""

from __future__ import annotations

import json
import random
import time
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wiremq.modules.journal import encoding, schema
from wiremq.modules.journal.encoding import ITEM, KINDS, Const, DestinationSwitch, encode
from wiremq.modules.message import Message
from wiremq.stores.records import StoredMessage

EVERYTHING = DestinationSwitch(True, frozenset())


def reference(record: tuple[Any, ...]) -> list[dict[str, Any]]:
    """What a record should become, read from its kind's sources in Python."""
    kind = KINDS[record[0]]
    items = record[kind.expand] if kind.expand >= 0 else [None]
    lines = []
    for item in items:
        line: dict[str, Any] = {
            "v": schema.SCHEMA_VERSION,
            "event": kind.event,
            "ts": int(record[1] * 1000),
        }
        for name in schema.EVENTS[kind.event].fields:
            source = kind.sources[name]
            if source is None:
                continue
            if isinstance(source, Const):
                line[name] = source.value
                continue
            value = item if source.slot == ITEM else record[source.slot]
            for step in source.path:
                if value is None:
                    break
                value = value[step] if isinstance(step, int) else getattr(value, step)
            if value is None:
                continue
            line[name] = len(value) if source.type == encoding.LEN else value
        lines.append(line)
    return lines


def lines(data: bytes) -> list[dict[str, Any]]:
    assert data.endswith(b"\n") or not data
    return [json.loads(line) for line in data.decode().split("\n")[:-1]]


def subscription(session: str, sub_id: str, ack: str = "auto") -> SimpleNamespace:
    return SimpleNamespace(
        session_id=session,
        sub_id=sub_id,
        ack_mode=ack,
    )


def message(n: int, destination: str = "/queue/q", **headers: str) -> Message:
    sent = Message(f"wmq-test-{n}", destination, headers, b"x" * (n % 50))
    sent.expires = n * 7 % 3 and 1_800_000_000_000 + n
    sent.store_seq = n % 4
    return sent


def stored(n: int, destination: str = "/queue/q") -> tuple[tuple[str, int], StoredMessage]:
    return (destination, n), StoredMessage(f"wmq-s-{n}", destination, (), b"y" * n, expires=n)


def every_kind() -> list[tuple[Any, ...]]:
    """One record of every kind, with varied values."""
    sub = subscription("wmq-test-s1", "0", "client")
    msgs = [message(n) for n in range(3)]
    found = [stored(n) for n in range(1, 3)]
    t = 1_795_000_000.123
    return [
        (encoding.SERVER_STARTED, t, "abcd"),
        (encoding.SERVER_STOPPED, t, "abcd"),
        (encoding.RECEIVED, t, msgs),
        (encoding.STORED, t, msgs, schema.PERSQUEUE),
        (encoding.DELIVERED, t, sub, msgs[0]),
        (encoding.REDELIVERED, t, sub, msgs[1]),
        (encoding.ACKNOWLEDGED, t, sub, msgs),
        (encoding.CONSUMED, t, subscription("wmq-test-s2", "1"), msgs),
        (encoding.NACKED, t, sub, msgs[:1], False),
        (encoding.REQUEUED, t, sub, msgs, schema.SUBSCRIBER_LEFT),
        (encoding.UNACKNOWLEDGED, t, sub, msgs, schema.TRANSACTION_FAILED),
        (encoding.DISCARDED_FOR, t, sub, msgs, schema.EGRESS_DISCARD_OLDEST),
        (encoding.DISCARDED, t, msgs, schema.NO_SUBSCRIBERS),
        (encoding.REFUSED, t, msgs[:1], "invalid class-of-service header"),
        (encoding.DISCARDED_STORED, t, found, schema.PURGED),
        (encoding.MOVED, t, msgs, "/queue/elsewhere"),
        (encoding.MOVED_STORED, t, found, "/queue/elsewhere"),
        (encoding.EXPIRED, t, msgs, schema.VOLQUEUE, None, "abcd-volqueue-3"),
        (encoding.DEAD_LETTERED, t, msgs, "/queue/DMQ", schema.EXPIRED),
        (encoding.EXPIRED_STORED, t, found, schema.PERSQUEUE, "/queue/DMQ", None),
        (encoding.REMOVED_STORED, t, found, schema.PERSQUEUE, "abcd-persqueue-2"),
        (encoding.REMOVED, t, msgs, schema.VOLQUEUE, "abcd-volqueue-3"),
        (encoding.DEAD_LETTERED_STORED, t, found, "/queue/DMQ", schema.EXPIRED),
        (encoding.CLEANUP_STARTED, t, schema.PERSQUEUE, "abcd-persqueue-2", 60000, 1000, 500),
        (encoding.CLEANUP_ENDED, t, schema.PERSQUEUE, "abcd-persqueue-2", 2, 2),
        (encoding.SUBSCRIPTION_REMOVED, t, "/topic/t", "client/name"),
    ]


def test_every_kind_writes_its_event_with_the_schemas_fields():
    records = every_kind()
    assert {r[0] for r in records} == set(range(len(KINDS))), "a kind is not exercised"
    written = lines(encode(records, EVERYTHING))
    assert written == [line for record in records for line in reference(record)]
    for line in written:
        event = schema.EVENTS[line["event"]]
        assert set(line) <= {*schema.HEAD, *event.fields}
        if "message_id" in event.fields:  # a message life event: at least these
            assert set(schema.MESSAGE) <= set(line), line
        for name, value in line.items():
            expected = {schema.STRING: str, schema.LONG: int, schema.BOOLEAN: bool}
            assert isinstance(value, expected[schema.FIELD_TYPES[name]]), (name, value)


def test_every_event_of_the_schema_has_a_kind_and_every_field_a_source():
    assert {k.event for k in KINDS} == set(schema.EVENTS)
    for kind in KINDS:
        assert set(schema.EVENTS[kind.event].fields) <= set(kind.sources)


def test_values_that_repeat_and_values_that_do_not_are_written_alike():
    """The encoder copies what it wrote for a value it met before: interleaved
    subscriptions, destinations and times must still each get their own."""
    rng = random.Random(7)
    subs = [subscription(f"wmq-t-s{i}", f"{i}", rng.choice(["auto", "client"])) for i in range(20)]
    destinations = ["/queue/a", "/queue/b", "/topic/t", '/queue/"quoted"', "/queue/é"]
    msgs = [message(n, rng.choice(destinations)) for n in range(2000)]
    records: list[tuple[Any, ...]] = [(encoding.RECEIVED, 1_795_000_000.0, msgs)]
    for n, sent in enumerate(msgs):
        sub = rng.choice(subs)
        at = 1_795_000_000 + rng.random() * 5
        records.append((encoding.DELIVERED, at, sub, sent))
        if n % 7 == 0:
            records.append((encoding.ACKNOWLEDGED, at, sub, rng.sample(msgs, 5)))
    written = lines(encode(records, EVERYTHING))
    assert written == [line for record in records for line in reference(record)]


def test_the_destination_switch_leaves_out_the_lines_of_destinations_switched_off():
    msgs = [message(n, d) for n, d in enumerate(["/queue/a", "/queue/b", "/queue/a", "/topic/t"])]
    run = (encoding.CLEANUP_ENDED, 1.0, schema.VOLQUEUE, "r", 1, 1)  # no destination: kept
    records = [(encoding.RECEIVED, 1.0, msgs), run]
    off_for_a = lines(encode(records, DestinationSwitch(True, frozenset({"/queue/a"}))))
    assert [line.get("destination") for line in off_for_a] == ["/queue/b", "/topic/t", None]
    only_a = lines(encode(records, DestinationSwitch(False, frozenset({"/queue/a"}))))
    assert [line.get("destination") for line in only_a] == ["/queue/a", "/queue/a", None]
    none = lines(encode(records, DestinationSwitch(False, frozenset())))
    assert [line["event"] for line in none] == ["cleanup_ended"]


@settings(max_examples=300, deadline=None)
@given(destination=st.text(max_size=40), sub_id=st.text(max_size=40), reason=st.text())
def test_any_text_is_written_as_valid_json_that_reads_back_the_same(destination, sub_id, reason):
    sent = Message("wmq-x-1", destination, {}, b"")
    sub = subscription("wmq-x-s1", sub_id)
    records = [
        (encoding.DELIVERED, 1.5, sub, sent),
        (encoding.DISCARDED_FOR, 1.5, sub, [sent], reason),
    ]
    written = lines(encode(records, EVERYTHING))

    def readable(text: str) -> str:  # lone surrogates cannot be UTF-8: written escaped
        return text.encode("utf-8", "backslashreplace").decode("utf-8")

    assert written[0]["destination"] == readable(destination)
    assert written[0]["subscription"] == readable(sub_id)
    assert written[1]["reason"] == readable(reason)


def test_a_record_of_the_wrong_shape_is_an_error_not_a_crash():
    with pytest.raises(ValueError, match="unknown record kind"):
        encode([(len(KINDS), 1.0)], EVERYTHING)
    with pytest.raises(TypeError, match="expected str"):
        encode([(encoding.SERVER_STARTED, 1.0, 42)], EVERYTHING)
    with pytest.raises(TypeError):
        encode([(encoding.RECEIVED, 1.0, 42)], EVERYTHING)  # not a sequence
    with pytest.raises(IndexError):
        encode([(encoding.SERVER_STARTED, 1.0)], EVERYTHING)  # a slot missing
    assert encode([], EVERYTHING) == b""


def test_a_recorder_writes_each_record_at_the_time_it_is_added_and_counts_its_lines():
    msgs = [message(n, d) for n, d in enumerate(["/queue/a", "/queue/b", "/queue/a"])]
    recorder = encoding.recorder(DestinationSwitch(True, frozenset({"/queue/a"})))
    before = int(time.time() * 1000)
    recorder.add(encoding.RECEIVED, msgs)
    recorder.add(encoding.CLEANUP_ENDED, schema.VOLQUEUE, "r", 1, 1)
    after = int(time.time() * 1000)
    assert recorder.lines == 2, "the lines written, not those of destinations switched off"
    with pytest.raises(AttributeError):
        recorder.add(encoding.RECEIVED, [msgs[1], 42])  # fails half-way: nothing of it kept
    assert recorder.lines == 2
    written = lines(recorder.take())
    assert [line.get("destination") for line in written] == ["/queue/b", None]
    assert all(before <= line["ts"] <= after for line in written)
    assert recorder.lines == 0 and recorder.take() == b""
    recorder.add(encoding.RECEIVED, msgs[1:2])  # memos of the bytes taken do not apply
    (again,) = lines(recorder.take())
    assert {k: v for k, v in again.items() if k != "ts"} == {
        k: v for k, v in written[0].items() if k != "ts"
    }
