"""Per-client egress priority queues, drained into a byte-bounded transmit queue."""

import sys
from collections import deque
from collections.abc import Callable

import pytest

from tests.defaults import EGRESS_LIMITS as DEFAULT_LIMITS
from wiremq.modules.flow.egress_queues import (
    EgressQueue,
    EgressQueues,
    Entry,
    Policy,
    QueueLimits,
    new_entry,
)
from wiremq.modules.message import Message
from wiremq.modules.stomp._fast import Maker, frame_parts, take_frames

C1, D3, D2, D1, G1 = EgressQueue
DEFAULT_MAX_DEPTH = DEFAULT_LIMITS[0].max_depth
UNIT = 2048


class Writer:
    """Records what drain() hands over, and counts it on a TCP transmit queue of ``bound``
    bytes (the server's is the transport's write buffer): there is room while its
    ``depth`` is below the bound, and a message placed then is counted whole, so the
    depth may go over the bound until bytes are ``sent``."""

    def __init__(self, bound: int = 1 << 30) -> None:
        self.bound = bound
        self.depth = 0
        self.written: list[tuple[bytes, int]] = []

    def drain(self, queues: EgressQueues) -> list[bytes]:
        taken, indicated, discarded = queues.drain(max(0, self.bound - self.depth))
        for index, entry in enumerate(taken):
            self.depth += entry.nbytes
            self.written.append((entry.head, discarded if index == indicated else 0))
        return [entry.head for entry in taken]

    def sent(self, nbytes: int) -> None:
        """The client acknowledged ``nbytes``: they are gone from the transmit queue."""
        self.depth -= nbytes


def limits(queue: EgressQueue, max_depth: int, min_burst: int) -> tuple[QueueLimits, ...]:
    """The default limits, with ``queue``'s replaced."""
    chosen = list(DEFAULT_LIMITS)
    chosen[queue] = QueueLimits(max_depth, min_burst)
    return tuple(chosen)


def frame(name: str, nbytes: int) -> tuple[bytes, bytes]:
    """A head naming the frame and a tail padding it to ``nbytes`` in all."""
    head = name.encode()
    return head, b"x" * (nbytes - len(head))


@pytest.mark.parametrize(
    ("nbytes", "units"), [(0, 1), (1, 1), (2047, 1), (2048, 1), (2049, 2), (4096, 2), (4097, 3)]
)
def test_a_frame_counts_its_work_units(nbytes: int, units: int) -> None:
    queues = EgressQueues(DEFAULT_LIMITS)
    head = b"h"[:nbytes]
    queues.enqueue(D1, head, b"x" * (nbytes - len(head)))
    assert queues.queued_work == units


@pytest.mark.parametrize(
    ("persistent", "cos", "queue"),
    [(True, 1, G1), (True, 3, G1), (False, 1, D1), (False, 2, D2), (False, 3, D3)],
)
def test_a_message_queue_by_persistence_and_class_of_service(
    persistent: bool, cos: int, queue: EgressQueue
) -> None:
    headers = {"persistent": str(persistent).lower(), "class-of-service": str(cos)}
    assert Message("id", "/queue/q", headers, b"").egress_queue is queue


def test_labels_and_default_limits_are_the_seeds() -> None:
    """The registry's ClientEgress defaults, read through ``queue_limits``."""
    assert [queue.label for queue in EgressQueue] == ["C-1", "D-3", "D-2", "D-1", "G-1"]
    assert [(lim.max_depth, lim.min_burst) for lim in DEFAULT_LIMITS] == [
        (20000, 4),
        (20000, 4),
        (20000, 4),
        (20000, 4),
        (20000, 255),
    ]


def test_drain_is_strict_priority_and_fifo_within_a_queue() -> None:
    queues = EgressQueues(DEFAULT_LIMITS)
    for queue in reversed(EgressQueue):  # lowest priority first
        queues.enqueue(queue, f"{queue.label}a".encode(), b"")
        queues.enqueue(queue, f"{queue.label}b".encode(), b"")
    assert Writer().drain(queues) == [
        f"{queue.label}{n}".encode() for queue in EgressQueue for n in "ab"
    ]
    assert not queues.pending


def test_an_entry_keeps_its_owner_and_frame() -> None:
    queues = EgressQueues(DEFAULT_LIMITS)
    owner = object()
    queues.enqueue(D1, b"head", b"tail", owner)
    got = queues.drain(1 << 30).entries
    assert [(e.head, e.tail, e.owner, e.nbytes, e.work) for e in got] == [
        (b"head", b"tail", owner, 8, 1)
    ]


def test_whole_message_rule() -> None:
    """Below the bound the whole next message goes; at or above it nothing does."""
    queues = EgressQueues(DEFAULT_LIMITS)
    writer = Writer(bound=100)
    for n in range(5):
        queues.enqueue(D1, *frame(f"m{n}", 60))
    assert writer.drain(queues) == [b"m0", b"m1"]  # 0 -> 60 -> 120: over the bound
    assert writer.depth == 120
    writer.sent(20)  # 100: at the bound, still no room
    assert writer.drain(queues) == []
    writer.sent(1)  # 99: room for one whole message
    assert writer.drain(queues) == [b"m2"]
    assert writer.depth == 159


def test_a_higher_priority_frame_overtakes_waiting_messages() -> None:
    queues = EgressQueues(DEFAULT_LIMITS)
    writer = Writer(bound=1)
    queues.enqueue(D1, b"m0", b"")
    queues.enqueue(D1, b"m1", b"")
    assert writer.drain(queues) == [b"m0"]
    queues.enqueue(C1, b"RECEIPT", b"")
    writer.sent(writer.depth)
    assert writer.drain(queues) == [b"RECEIPT"]


def test_what_is_queued_after_a_drain_goes_in_the_next_by_priority() -> None:
    queues = EgressQueues(DEFAULT_LIMITS)
    queues.enqueue(D1, b"m0", b"")
    [m0] = queues.drain(1).entries  # the budget takes one whole frame
    queues.enqueue(C1, b"RECEIPT", b"")
    assert [e.head for e in queues.drain(1 << 30).entries] == [b"RECEIPT"]
    assert m0.head == b"m0" and not queues.pending


@pytest.mark.parametrize(
    ("max_depth", "min_burst", "queued", "nbytes", "room"),
    [
        (3, 0, [UNIT, UNIT], UNIT, True),  # 2 + 1 <= 3
        (3, 0, [UNIT, UNIT], UNIT + 1, False),  # 2 + 2 > 3
        (1, 4, [5 * UNIT] * 3, 5 * UNIT, True),  # 3 messages < min burst 4
        (1, 4, [5 * UNIT] * 4, 1, False),  # burst used up and over max-depth
        (1, 0, [], 2 * UNIT, False),  # bigger than max-depth on its own
    ],
)
def test_has_room_follows_max_depth_and_min_burst(
    max_depth: int, min_burst: int, queued: list[int], nbytes: int, room: bool
) -> None:
    queues = EgressQueues(limits(D2, max_depth, min_burst))
    for size in queued:
        queues.enqueue(D2, *frame("m", size))
    assert queues.has_room(D2, nbytes) is room
    assert queues.has_room(D1, nbytes)  # other queues are unaffected


@pytest.mark.parametrize("queue", list(EgressQueue))
def test_ready_until_the_queue_is_full(queue: EgressQueue) -> None:
    queues = EgressQueues(limits(queue, 2, 1))
    queues.enqueue(queue, *frame("m", UNIT))
    assert queues.ready(queue)
    queues.enqueue(queue, *frame("m", UNIT))
    assert not queues.ready(queue)
    Writer().drain(queues)
    assert queues.ready(queue)


@pytest.mark.parametrize("queue", list(EgressQueue))
def test_block_never_discards_and_goes_over_max_depth(queue: EgressQueue) -> None:
    queues = EgressQueues(limits(queue, 2, 1), Policy.BLOCK)
    for n in range(4):
        queues.enqueue(queue, *frame(f"m{n}", UNIT))
    row = queues.stats()[queue.label]
    assert (row["length_msgs"], row["length_work"], row["discards_msgs"]) == (4, 4, 0)
    assert Writer().drain(queues) == [b"m0", b"m1", b"m2", b"m3"]


@pytest.mark.parametrize("queue", [C1, G1])
def test_control_and_persistent_frames_are_never_discarded(queue: EgressQueue) -> None:
    queues = EgressQueues(limits(queue, 2, 1), Policy.DISCARD_OLDEST)
    for n in range(4):
        queues.enqueue(queue, *frame(f"m{n}", UNIT))
    assert queues.stats()[queue.label]["discards_msgs"] == 0
    assert queues.discarded == 0
    assert not queues.ready(queue)
    assert Writer().drain(queues) == [b"m0", b"m1", b"m2", b"m3"]


@pytest.mark.parametrize("queue", [D3, D2, D1])
def test_discard_oldest_makes_room_and_indicates_it_on_the_next_message(
    queue: EgressQueue,
) -> None:
    dropped: list[bytes] = []
    queues = EgressQueues(
        limits(queue, 2, 1), Policy.DISCARD_OLDEST, on_discard=lambda e: dropped.append(e.head)
    )
    for n in range(5):
        queues.enqueue(queue, *frame(f"m{n}", UNIT))
    assert dropped == [b"m0", b"m1", b"m2"]
    assert queues.discarded == 3
    row = queues.stats()[queue.label]
    assert (row["length_msgs"], row["length_work"], row["discards_msgs"]) == (2, 2, 3)
    writer = Writer()
    writer.drain(queues)
    assert writer.written == [(b"m3", 3), (b"m4", 0)]
    assert queues.discarded == 0


def test_discard_frees_just_enough_for_a_large_message() -> None:
    queues = EgressQueues(limits(D1, 4, 0), Policy.DISCARD_OLDEST)
    for n in range(4):
        queues.enqueue(D1, *frame(f"s{n}", 1))
    queues.enqueue(D1, *frame("big", 2 * UNIT))  # 2 units: two small ones go
    assert Writer().drain(queues) == [b"s2", b"s3", b"big"]


def test_min_burst_lets_large_messages_in_before_discarding() -> None:
    queues = EgressQueues(limits(D1, 1, 4), Policy.DISCARD_OLDEST)
    for n in range(5):
        queues.enqueue(D1, *frame(f"m{n}", 5 * UNIT))
    row = queues.stats()["D-1"]
    assert (row["length_msgs"], row["discards_msgs"]) == (4, 1)


def test_a_message_bigger_than_max_depth_is_taken_alone() -> None:
    queues = EgressQueues(limits(D1, 2, 0), Policy.DISCARD_OLDEST)
    queues.enqueue(D1, *frame("old", 1))
    queues.enqueue(D1, *frame("huge", 10 * UNIT))
    assert Writer().drain(queues) == [b"huge"]
    assert queues.stats()["D-1"]["discards_msgs"] == 1


def test_the_indication_skips_control_frames() -> None:
    queues = EgressQueues(limits(D1, 1, 1), Policy.DISCARD_OLDEST)
    queues.enqueue(D1, *frame("m0", 1))
    queues.enqueue(D1, *frame("m1", 1))  # m0 discarded
    queues.enqueue(C1, b"RECEIPT", b"")
    writer = Writer()
    writer.drain(queues)
    assert writer.written == [(b"RECEIPT", 0), (b"m1", 1)]


def test_the_indication_goes_on_whatever_message_comes_next() -> None:
    queues = EgressQueues(limits(D1, 1, 1), Policy.DISCARD_OLDEST)
    queues.enqueue(D1, *frame("m0", 1))
    queues.enqueue(D1, *frame("m1", 1))  # m0 discarded
    queues.enqueue(G1, b"persistent", b"")
    queues.policy = Policy.BLOCK  # the policy may change at run time
    queues.enqueue(D1, *frame("m2", 1))
    writer = Writer()
    writer.drain(queues)
    assert writer.written == [(b"m1", 1), (b"m2", 0), (b"persistent", 0)]


def test_stats_are_those_of_show_client_stats_queue() -> None:
    queues = EgressQueues(DEFAULT_LIMITS)
    writer = Writer(bound=1)
    queues.enqueue(C1, b"CONNECTED", b"")
    for _ in range(3):
        queues.enqueue(G1, *frame("p", 3 * UNIT))
    writer.drain(queues)  # the bound lets one frame out: CONNECTED
    stats = queues.stats()
    assert list(stats) == ["C-1", "D-3", "D-2", "D-1", "G-1", "total"]
    assert stats["C-1"] == {
        "length_msgs": 0,
        "length_work": 0,
        "hwm_work": 1,
        "max_work": DEFAULT_MAX_DEPTH,
        "discards_msgs": 0,
        "delivered_msgs": 1,
    }
    assert stats["G-1"]["length_msgs"] == 3
    assert stats["G-1"]["length_work"] == 9
    assert stats["G-1"]["hwm_work"] == 9
    assert stats["total"] == {
        "length_msgs": 3,
        "length_work": 9,
        "max_work": 5 * DEFAULT_MAX_DEPTH,
        "discards_msgs": 0,
        "delivered_msgs": 1,
    }
    assert (queues.queued_work, queues.capacity_work) == (9, 5 * DEFAULT_MAX_DEPTH)


def test_clear_returns_everything_in_drain_order() -> None:
    queues = EgressQueues(limits(D1, 1, 1), Policy.DISCARD_OLDEST)
    queues.enqueue(G1, b"g", b"")
    queues.enqueue(D1, b"d0", b"")
    queues.enqueue(D1, b"d1", b"")
    queues.enqueue(C1, b"c", b"")
    assert [entry.head for entry in queues.clear()] == [b"c", b"d1", b"g"]
    assert not queues.pending
    assert queues.queued_work == 0
    assert queues.discarded == 0


@pytest.mark.parametrize(
    "make",
    [
        lambda: EgressQueues(DEFAULT_LIMITS[:4]),
        lambda: QueueLimits(max_depth=0, min_burst=4),
        lambda: QueueLimits(max_depth=20000, min_burst=-1),
    ],
)
def test_bad_limits_are_refused(make: Callable[[], object]) -> None:
    with pytest.raises(ValueError):
        make()


def _entries(names_and_sizes: list[tuple[str, int]], owner: object = None) -> list[Entry]:
    """Entries as a delivery run makes them (``new_entry``), with their work units."""
    made = []
    for name, nbytes in names_and_sizes:
        head, tail = frame(name, nbytes)
        made.append(new_entry(head, tail, owner, (nbytes + 2047) >> 11 or 1, name))
    return made


def test_a_run_is_queued_as_its_frames_one_by_one() -> None:
    """``enqueue_run`` counts what ``enqueue`` of each frame would: work, high-water mark,
    the queue non-empty, the frames drained in order."""
    sizes = [("m0", 100), ("m1", UNIT + 1), ("m2", 10)]
    one_by_one, in_a_run = EgressQueues(DEFAULT_LIMITS), EgressQueues(DEFAULT_LIMITS)
    for name, nbytes in sizes:
        one_by_one.enqueue(D2, *frame(name, nbytes))
    entries = _entries(sizes)
    in_a_run.enqueue_run(D2, entries, sum(entry.work for entry in entries))
    assert in_a_run.stats() == one_by_one.stats()
    assert in_a_run.holds(D2) and not in_a_run.holds(D1)
    assert Writer().drain(in_a_run) == [b"m0", b"m1", b"m2"]


def test_a_run_under_discard_oldest_discards_as_its_frames_would() -> None:
    dropped: list[bytes] = []
    queues = EgressQueues(
        limits(D1, 2, 1), Policy.DISCARD_OLDEST, on_discard=lambda e: dropped.append(e.head)
    )
    entries = _entries([(f"m{n}", UNIT) for n in range(5)])
    queues.enqueue_run(D1, entries, 5)
    assert dropped == [b"m0", b"m1", b"m2"] and queues.discarded == 3
    assert queues.stats()["D-1"]["length_work"] == 2


@pytest.mark.parametrize(
    ("max_depth", "min_burst", "queued", "room"),
    [(4, 0, [UNIT, UNIT], (-2, 2)), (4, 3, [UNIT], (2, 3)), (2, 0, [3 * UNIT], (-1, -1))],
)
def test_room_is_what_has_room_counts(
    max_depth: int, min_burst: int, queued: list[int], room: tuple[int, int]
) -> None:
    queues = EgressQueues(limits(D2, max_depth, min_burst))
    for size in queued:
        queues.enqueue(D2, *frame("m", size))
    assert queues.room(D2) == room


def test_take_frames_keeps_the_whole_message_rule_and_counts_work() -> None:
    entries = deque(_entries([("m0", 60), ("m1", 60), ("m2", UNIT + 1)]))
    taken: list[Entry] = []
    assert take_frames(entries, taken, 0, 100) == (120, 2)  # m1 crosses the bound, whole
    assert [e.item for e in taken] == ["m0", "m1"] and len(entries) == 1
    assert take_frames(entries, taken, 120, 100) == (120, 0)  # at the bound: nothing
    assert take_frames(entries, taken, 0, 1) == (UNIT + 1, 2) and not entries


def test_take_frames_refuses_what_is_not_an_entry_and_leaves_it_queued() -> None:
    entries: deque[object] = deque([*_entries([("m0", 10)]), ("not", "an entry")])
    taken: list[Entry] = []
    with pytest.raises(TypeError, match="egress entry"):
        take_frames(entries, taken, 0, 1000)
    assert [e.item for e in taken] == ["m0"] and list(entries) == [("not", "an entry")]
    with pytest.raises(TypeError, match="take_frames"):
        take_frames(entries, (), 0, 1000)


def test_frame_parts_are_heads_and_tails_and_the_owners_runs() -> None:
    first, second = object(), object()
    entries = [
        *_entries([("a", 10), ("b", 10)], first),
        *_entries([("c", 10)], second),
        *_entries([("d", 10)], first),
        *_entries([("e", 10)], None),
    ]
    parts: list[bytes] = []
    runs = frame_parts(entries, parts)
    assert parts == [part for entry in entries for part in (entry.head, entry.tail)]
    assert runs == [(first, ["a", "b"]), (second, ["c"]), (first, ["d"]), (None, ["e"])]
    assert frame_parts([], parts) == []
    with pytest.raises(TypeError, match="egress entry"):
        frame_parts([("head", "tail")], [])


def test_an_entry_is_made_in_c_as_its_named_tuple_makes_it():
    owner, item = object(), object()
    before = sys.getrefcount(owner), sys.getrefcount(item)
    entry = new_entry(b"head", b"tail", owner, 1, item)
    assert type(entry) is Entry
    assert entry == Entry(b"head", b"tail", owner, 1, item)  # type: ignore[arg-type]
    assert (entry.owner, entry.item, entry.nbytes) == (owner, item, 8)
    assert (sys.getrefcount(owner), sys.getrefcount(item)) == (before[0] + 1, before[1] + 1)
    del entry
    assert (sys.getrefcount(owner), sys.getrefcount(item)) == before
    with pytest.raises(TypeError, match="Entry takes 5 positional items"):
        new_entry(b"head", b"tail", owner, 1)
    with pytest.raises(TypeError, match="Entry takes 5 positional items"):
        new_entry(b"head", b"tail", owner, 1, item=item)
    for cls in (tuple, dict, "Entry"):
        with pytest.raises(TypeError, match="not a NamedTuple"):
            Maker(cls)
