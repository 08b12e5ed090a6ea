"""How a message is made (in C, ``modules/_message.c``): every field from its arguments and
headers as ``message.py`` documents them; its MESSAGE frame's tail (in C too), encoded once
per STOMP version; and a message read back from a store
(``Message.from_stored``) is the one that was sent: its delivery mode from its headers, its
timestamp and expiry as they were."""

from __future__ import annotations

import gc
import sys

import pytest

from wiremq.modules.flow.egress_queues import EgressQueue, new_entry
from wiremq.modules.ids import Numbered
from wiremq.modules.message import (
    FRAME_ONLY_HEADERS,
    NO_TAILS,
    Message,
    passes_through,
    plain_admitted,
    plain_arrivals,
    plain_entries,
    shared_target,
    take_sends,
    waiting_runs,
)
from wiremq.modules.stomp.encoder import escaped_message_tail
from wiremq.modules.stomp.events import Acknowledge, Send

RECEIVED = 1_700_000_000_123  # ms since 1970


def _sent(headers: dict[str, str]) -> Message:
    message = Message("m-1", "/queue/q", headers, b"body", expires=RECEIVED + 60_000)
    message.timestamp = RECEIVED
    return message


def test_a_new_message_takes_its_mode_queue_receipt_and_transaction_from_its_headers():
    sender, waiter = object(), object()
    headers = {"persistent": "true", "receipt": "r-7", "transaction": "tx", "x": "y"}
    message = Message("m-1", "/queue/q", headers, b"12345", sender, waiter, 9, RECEIVED)  # type: ignore[arg-type]
    assert (message.message_id, message.destination, message.body) == ("m-1", "/queue/q", b"12345")
    assert message.headers is headers
    assert message.persistent is True
    assert message.egress_queue is EgressQueue.G1
    assert (message.receipt, message.transaction) == ("r-7", "tx")
    assert (message.sender, message.waiter) == (sender, waiter)
    assert (message.expires, message.timestamp, message.size) == (9, RECEIVED, 5)
    # as a message that has been nowhere yet
    user_headers = len("persistent:true") + 1 + len("x:y") + 1  # as ``StoredMessage.size``
    assert (message.store_seq, message.arrival, message.stored_size) == (0, 0, 5 + user_headers)
    assert (message.answered, message.redelivered) == (False, False)
    assert (message.target, message.unit) == (None, None)
    assert message.wire is NO_TAILS
    for unset in ("level", "group", "home"):  # a queue sets them
        assert not hasattr(message, unset)
    assert gc.is_tracked(message)


@pytest.mark.parametrize(
    ("headers", "queue"),
    [
        ({}, EgressQueue.D1),
        ({"persistent": "false", "class-of-service": "2"}, EgressQueue.D2),
        ({"class-of-service": "3"}, EgressQueue.D3),
        ({"class-of-service": "9"}, EgressQueue.D1),  # not a class of service: the default
        ({"persistent": "true", "class-of-service": "3"}, EgressQueue.G1),
    ],
)
def test_a_message_goes_out_through_the_egress_queue_of_its_mode_and_class_of_service(
    headers: dict[str, str], queue: EgressQueue
) -> None:
    message = Message("m-1", "/topic/t", headers, b"")
    assert message.egress_queue is queue
    assert message.persistent is (headers.get("persistent") == "true")
    assert (message.receipt, message.transaction, message.sender, message.waiter) == (None,) * 4
    assert (message.expires, message.timestamp) == (0, 0)


def test_a_message_is_made_by_keyword_through_new_and_with_a_tuple_the_same_way():
    by_keyword = Message(
        body=b"b", headers={"receipt": "r"}, destination="/queue/q", message_id="m", timestamp=4
    )
    through_new = Message.__new__(Message, "m", "/queue/q", {"receipt": "r"}, b"b", timestamp=4)
    # with an argument tuple, as type.__call__ hands them (the class's tp_new, not its
    # vectorcall)
    with_a_tuple = type.__call__(Message, "m", "/queue/q", {"receipt": "r"}, b"b", timestamp=4)
    for message in (by_keyword, through_new, with_a_tuple):
        assert (message.message_id, message.receipt, message.timestamp, message.size) == (
            "m",
            "r",
            4,
            1,
        )


@pytest.mark.parametrize(
    ("args", "kwargs", "error"),
    [
        (("m", "/queue/q", {}), {}, "missing argument body"),
        (("m", "/queue/q", [("a", "b")], b""), {}, "headers are a dict"),
        (("m", "/queue/q", {}, b""), {"colour": "red"}, "unexpected or repeated argument 'colour'"),
        (("m", "/queue/q", {}, b""), {"body": b"again"}, "unexpected or repeated argument 'body'"),
        (("m", "/queue/q", {}, b"", None, None, 0, 0, "extra"), {}, "at most 8 arguments"),
        (("m", "/queue/q", {}, 5), {}, "has no len"),
    ],
)
def test_a_message_made_wrongly_is_a_type_error_that_says_why(
    args: tuple[object, ...], kwargs: dict[str, object], error: str
) -> None:
    with pytest.raises(TypeError, match=error):
        Message(*args, **kwargs)  # type: ignore[arg-type]


def test_making_a_message_keeps_no_reference_it_should_not():
    headers, body = {"receipt": "r"}, b"x" * 64
    before = sys.getrefcount(headers), sys.getrefcount(body)
    messages = [Message("m", "/queue/q", headers, body) for _ in range(100)]
    assert sys.getrefcount(headers) == before[0] + 100
    del messages
    assert (sys.getrefcount(headers), sys.getrefcount(body)) == before


def _tail_args(message: Message) -> tuple[object, ...]:
    return (
        message.message_id,
        message.destination,
        message.headers,
        FRAME_ONLY_HEADERS,
        message.body,
        message.redelivered,
    )


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
@pytest.mark.parametrize(
    "headers",
    [
        {"x": "y", "receipt": "r", "content-length": "4"},  # nothing to escape: the C encoder
        {"x": "a:b\nc\r", "ü": "é"},  # escaped for 1.1 and 1.2: the Python one
    ],
)
def test_a_messages_tail_is_the_encoders_and_is_kept_for_its_version(
    headers: dict[str, str], version: str
) -> None:
    message = Message("m-1", "/queue/q", headers, b"body")
    tail = message.wire_tail(version)
    assert tail == escaped_message_tail(*_tail_args(message), version)  # type: ignore[arg-type]
    assert message.wire == {version: tail}
    assert message.wire_tail(version) is tail  # kept: encoded once for every subscriber
    assert tail.startswith(b"message-id:m-1\n") and tail.endswith(b"\n\nbody\0")
    assert b"receipt:" not in tail  # a SEND's own headers stay behind


def test_each_version_gets_its_tail_in_a_dict_of_the_message_s_own():
    first, second = Message("m-1", "/queue/q", {}, b""), Message("m-2", "/queue/q", {}, b"")
    tails = {version: first.wire_tail(version) for version in ("1.2", "1.0")}
    assert first.wire == tails
    assert NO_TAILS == {}  # shared by every new message: never written to
    assert second.wire is NO_TAILS
    first.mark_redelivered()  # a redelivery's tail says so: encoded again
    assert b"redelivered:true" in first.wire_tail("1.2")
    assert first.wire_tail("1.0") != tails["1.0"]


def test_a_tail_asked_for_wrongly_is_a_type_error():
    message = Message("m-1", "/queue/q", {}, b"")
    with pytest.raises(TypeError, match="takes one argument"):
        message.wire_tail()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Message.wire_tail(object(), "1.2")  # type: ignore[arg-type]
    message.wire = ()  # type: ignore[assignment]
    with pytest.raises(TypeError, match="wire tails are a dict"):
        message.wire_tail("1.2")
    del message.message_id
    message.wire = {}
    with pytest.raises(AttributeError, match="message_id"):
        message.wire_tail("1.2")


def test_a_tail_keeps_no_reference_it_should_not():
    message = Message("m-1", "/queue/q", {"x": "y"}, b"x" * 64)
    version = "".join(["1.", "2"])  # a str of its own, to count its references
    before = sys.getrefcount(version)
    tail = message.wire_tail(version)
    assert sys.getrefcount(version) == before + 1  # the key of the message's tails
    assert sys.getrefcount(tail) == 3  # here, the tails, the call's argument
    for _ in range(100):
        message.wire_tail(version)
    assert (sys.getrefcount(version), sys.getrefcount(tail)) == (before + 1, 3)
    del message
    assert sys.getrefcount(version) == before


def test_a_batch_passes_through_when_no_message_is_persistent_transacted_or_committed():
    def plain() -> Message:
        return Message("m", "/queue/q", {}, b"")

    assert passes_through([]) and passes_through([plain(), plain()])
    persistent = Message("m", "/queue/q", {"persistent": "true"}, b"")
    transacted = Message("m", "/queue/q", {"transaction": "tx"}, b"")
    committed = plain()
    committed.unit = object()  # type: ignore[assignment]
    for held in (persistent, transacted, committed, "not a message"):
        assert not passes_through([plain(), held, plain()])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="a list of messages"):
        passes_through((plain(),))  # type: ignore[arg-type]


def test_a_batch_s_shared_target_is_the_one_every_message_has():
    here, there = object(), object()

    def to(target: object) -> Message:
        message = Message("m", "/queue/q", {}, b"")
        message.target = target  # type: ignore[assignment]
        return message

    assert shared_target([to(here), to(here)]) is here
    for batch in ([], [to(here), to(there)], [to(here), to(None)], [to(here), "a message?"]):
        assert shared_target(batch) is None  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="a list of messages"):
        shared_target((to(here),))  # type: ignore[arg-type]


def test_take_sends_makes_a_message_of_each_send_of_a_run_to_one_domain():
    sender, waiter = object(), object()
    headers = {"persistent": "true", "receipt": "r"}
    events = [Send("/queue/a", {}, b"1"), Send("/queue/b", headers, b"22")]
    events += [Send("/topic/t", {}, b"3"), Send("/queue/c", {}, b"4")]
    events += [Acknowledge("m", "s", False, {}), Send("/queue/d", {}, b"5")]  # type: ignore[list-item]
    sends: list[Message] = []
    before = sys.getrefcount(sender), sys.getrefcount(headers)
    ids = Numbered("x-")
    assert take_sends(events, 0, Send, "/queue/", sends, ids, sender, waiter, RECEIVED) == 2  # type: ignore[arg-type]
    first, second = sends
    assert (first.message_id, first.destination, first.body) == ("x-1", "/queue/a", b"1")
    assert (second.message_id, second.headers, second.size) == ("x-2", headers, 2)
    assert second.persistent and second.receipt == "r"
    assert (first.sender, first.waiter, first.expires, first.timestamp) == (
        sender,
        waiter,
        0,
        RECEIVED,
    )
    assert sys.getrefcount(sender) == before[0] + 2 and sys.getrefcount(headers) == before[1] + 1
    assert take_sends(events, 2, Send, "/topic/", sends, lambda: "own", None, None, 0) == 3  # type: ignore[arg-type]
    assert sends[-1].message_id == "own" and sends[-1].sender is None
    assert take_sends(events, 3, Send, "/queue/", sends, ids, None, None, 0) == 4  # type: ignore[arg-type]
    assert take_sends(events, 4, Send, "/queue/", sends, ids, None, None, 0) == 4  # an ACK  # type: ignore[arg-type]
    assert take_sends(events, 5, Send, "/queue/", sends, ids, None, None, 0) == 6  # type: ignore[arg-type]
    assert [m.message_id for m in sends] == ["x-1", "x-2", "own", "x-3", "x-4"]
    del sends, first, second
    gc.collect()
    assert (sys.getrefcount(sender), sys.getrefcount(headers)) == before
    with pytest.raises(TypeError, match="take_sends"):
        take_sends(tuple(events), 0, Send, "/queue/", [], ids, None, None, 0)  # type: ignore[arg-type]
    with pytest.raises(ZeroDivisionError):
        take_sends(events, 0, Send, "/queue/", [], lambda: 1 / 0, None, None, 0)  # type: ignore[arg-type]


def test_plain_admitted_takes_the_rest_of_a_run_that_needs_no_look_of_its_own():
    sender, other, target, elsewhere = object(), object(), object(), object()

    def sent(destination: str = "/queue/q", by: object = sender, **headers: str) -> Message:
        return Message("m", destination, dict(headers), b"", by)  # type: ignore[arg-type]

    placed = sent()
    placed.target = target  # type: ignore[assignment]
    batch = [sent(), placed, sent(), sent("/queue/other"), sent(), sent(by=other), sent()]
    batch += [sent(expires="1"), sent(**{"class-of-service": "1"}), sent(transaction="t")]
    batch += [sent()]
    admitted: list[Message] = []
    assert plain_admitted(batch, 0, target, sender, "/queue/q", admitted) == 3
    assert admitted == batch[:3] and all(m.target is target for m in batch[:3])
    assert batch[3].target is None
    assert plain_admitted(batch, 4, target, sender, "/queue/q", admitted) == 5  # another sender
    assert plain_admitted(batch, 6, target, sender, None, []) == 6  # no name: none resolved
    elsewhere_placed = sent()
    elsewhere_placed.target = elsewhere  # type: ignore[assignment]
    assert plain_admitted([elsewhere_placed], 0, target, sender, "/queue/q", []) == 0
    for index in (7, 8, 9):  # expires, class-of-service, a transaction: a look of its own
        assert plain_admitted(batch, index, target, sender, "/queue/q", []) == index
    assert plain_admitted(batch, 10, target, sender, "/queue/q", admitted) == 11
    assert admitted == [*batch[:3], batch[4], batch[10]]
    for wrong in (
        (tuple(batch), 0, target, sender, "/queue/q", []),
        (batch, 0, target, sender, 1, []),
    ):
        with pytest.raises(TypeError, match="plain_admitted"):
            plain_admitted(*wrong)  # type: ignore[arg-type]


def test_plain_entries_make_a_run_s_deliveries_while_the_subscription_is_ready():
    G1, D1 = EgressQueue.G1, EgressQueue.D1
    owner, head = object(), b"MESSAGE\nsubscription:s\n"
    frame = (head, "1.2", owner, new_entry)

    def sent(body: bytes, persistent: bool = False) -> Message:
        headers = {"persistent": "true"} if persistent else {}
        return Message(f"m{len(body)}", "/queue/q", headers, body)

    run = [sent(b"a"), sent(b"bb"), None, sent(b"c" * 5000), sent(b"dddd", persistent=True)]
    entries: list = []
    #                          large, slots, nbytes_left, burst, work_left
    got = plain_entries(run, 0, D1, None, frame, (4096, 10, 10**6, 10, 100), entries)
    assert got == (2, 2, 3, 8, 98)  # up to the None, which the caller passes over
    first = entries[0]
    assert (first.head, first.owner, first.item) == (head, owner, run[0])
    assert first.tail == run[0].wire_tail("1.2") and first.work == 1
    assert plain_entries(run, 3, D1, None, frame, (4096, 10, 10**6, 10, 100), []) == (
        3,
        0,
        0,
        10,
        100,
    )  # large
    assert plain_entries(run, 4, D1, None, frame, (1 << 20, 10, 10**6, 10, 100), []) == (
        4,
        0,
        0,
        10,
        100,
    )  # G-1's
    assert plain_entries(run, 4, G1, None, frame, (1 << 20, 10, 10**6, 10, 100), []) == (
        5,
        1,
        4,
        9,
        99,
    )
    both = [sent(b"x"), sent(b"yy", persistent=True), sent(b"z")]
    assert plain_entries(both, 0, G1, G1, frame, (100, 10, 10**6, 10, 100), [])[:3] == (
        3,
        3,
        4,
    )  # in order
    ready = [sent(b"1"), sent(b"22"), sent(b"333")]
    assert plain_entries(ready, 0, D1, None, frame, (100, 2, 10**6, 10, 100), [])[:2] == (
        2,
        2,
    )  # slots
    assert plain_entries(ready, 0, D1, None, frame, (100, 10, 3, 10, 100), [])[:2] == (
        2,
        2,
    )  # bytes
    assert plain_entries(ready, 0, D1, None, frame, (100, 10, 10**6, 1, 0), [])[:2] == (
        1,
        1,
    )  # egress full
    assert plain_entries(ready, 0, D1, None, frame, (100, 10, 10**6, 0, 1), [])[:2] == (
        1,
        1,
    )  # work fits
    wrong_calls = [(tuple(ready), 0, D1, None, frame, (1, 1, 1, 1, 1), [])]
    wrong_calls += [(ready, 0, D1, None, ("head", "1.2", owner, new_entry), (1, 1, 1, 1, 1), [])]
    wrong_calls += [
        (ready, 0, D1, None, frame, (1, 1, 1, None, 1), []),
        (ready, 0, D1, None, frame),
    ]
    for wrong in wrong_calls:
        with pytest.raises(TypeError, match="plain_entries"):
            plain_entries(*wrong)  # type: ignore[arg-type]


def test_plain_arrivals_number_the_run_a_queue_takes_at_its_default_level():
    keys = ("priority", "JMSXGroupID")

    def sent(body: bytes, **headers: str) -> Message:
        return Message("m", "/queue/q", dict(headers), body)

    stored = sent(b"s")
    stored.store_seq = 5
    batch = [sent(b"a"), sent(b"bb"), sent(b"ccc"), sent(b"d", priority="4"), sent(b"e")]
    batch += [stored, sent(b"f", JMSXGroupID="g")]
    assert plain_arrivals(batch, 1, 40, keys, None) == (3, 5)  # bb, ccc: 2 + 3 bytes
    assert [m.arrival for m in batch[:4]] == [0, 41, 42, 0]
    with pytest.raises(AttributeError):
        batch[1].level  # noqa: B018 (a plain queue's messages are not routed: no level)
    assert plain_arrivals(batch, 3, 40, keys, None) == (3, 0)  # a priority header: not plain
    assert plain_arrivals(batch, 4, 7, keys, 4) == (5, 1)  # then one read back from a store
    assert (batch[4].arrival, batch[4].level, batch[4].group, stored.arrival) == (8, 4, None, 0)
    assert plain_arrivals(batch, 6, 0, keys, None) == (6, 0)  # a group
    assert plain_arrivals(batch[:3], 0, 0, keys, 4) == (3, 6)
    assert [(m.level, m.group) for m in batch[:3]] == [(4, None)] * 3
    assert plain_arrivals([], 0, 0, keys, None) == (0, 0)
    wrong_calls = [(tuple(batch), 0, 0, keys, None), (batch, "0", 0, keys, None)]
    wrong_calls += [(batch, 0, 0, list(keys), None), (batch, 0, 0, keys, "4"), (batch, 0, 0, keys)]
    for wrong in wrong_calls:
        with pytest.raises(TypeError, match="plain_arrivals"):
            plain_arrivals(*wrong)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="a list of messages"):
        plain_arrivals(["not a message"], 0, 0, keys, None)  # type: ignore[list-item]


def test_waiting_runs_take_each_message_from_its_waiter_in_runs_of_one_waiter():
    first, second = object(), object()
    before = sys.getrefcount(first), sys.getrefcount(second)
    waiters = [first, first, None, second, first]
    batch = [Message(f"m{n}", "/queue/q", {}, b"", waiter=w) for n, w in enumerate(waiters)]  # type: ignore[arg-type]
    runs = waiting_runs(batch)
    assert [(waiter, [m.message_id for m in run]) for waiter, run in runs] == [
        (first, ["m0", "m1"]),
        (second, ["m3"]),
        (first, ["m4"]),
    ]
    assert all(message.waiter is None for message in batch)  # each told once
    assert waiting_runs(batch) == []
    del runs, waiters
    assert (sys.getrefcount(first), sys.getrefcount(second)) == before
    for wrong in ((batch[0],), [batch[0], "a message?"]):
        with pytest.raises(TypeError, match="a list of messages"):
            waiting_runs(wrong)  # type: ignore[arg-type]


def test_a_stored_persistent_message_comes_back_persistent_at_its_position():
    sent = _sent({"destination": "/queue/q", "persistent": "true", "class-of-service": "3"})
    back = Message.from_stored(sent.to_stored(now_ms=RECEIVED + 5), 42)
    assert back.persistent
    assert back.egress_queue is EgressQueue.G1
    assert back.store_seq == 42
    assert back.timestamp == RECEIVED
    assert back.expires == RECEIVED + 60_000
    assert back.headers == {"persistent": "true", "class-of-service": "3"}


def test_a_stored_non_persistent_message_comes_back_non_persistent_with_its_timestamp():
    """An XA branch's record keeps a non-persistent SEND until the branch is committed."""
    sent = _sent({"destination": "/queue/q", "class-of-service": "2", "receipt": "r"})
    back = Message.from_stored(sent.to_stored(now_ms=RECEIVED + 5), 0)
    assert not back.persistent
    assert back.egress_queue is EgressQueue.D2
    assert back.store_seq == 0
    assert back.timestamp == RECEIVED
