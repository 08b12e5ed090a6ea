"""The periodic tasks that walk every destination do it a slice per turn of the event
loop (``DestinationManager.sweepslice``): the work of one turn is bounded, and a pass
still reaches every destination. On the ``Net`` of ``tests/unit/net.py`` (a real core
on a fake clock) where a whole server is needed."""

from __future__ import annotations

from tests.fakes import FakeRuntime
from tests.unit.net import Peer
from tests.unit.test_journal_hooks import written
from wiremq.modules.destinations.rotation import Rotation
from wiremq.modules.persistence.cleanup import Periodic

SLICE = 4
QUEUES = 23  # not a multiple of the slice


def test_a_pass_hands_out_every_entry_once_a_slice_at_a_time():
    queues = {f"q{i}": i for i in range(10)}
    topics = {"t": -1}
    rotation = Rotation(queues, topics)
    slices = [rotation.next_slice(SLICE)]
    while not rotation.done:
        slices.append(rotation.next_slice(SLICE))
    assert [len(s) for s in slices] == [4, 4, 3]
    assert sorted(v for s in slices for v in s) == [-1, *range(10)]

    first = rotation.next_slice(SLICE)  # a new pass
    del queues["q5"]  # removed meanwhile: skipped
    queues["late"] = 99  # made meanwhile: the next pass reaches it
    rest = []
    while not rotation.done:
        rest.extend(rotation.next_slice(SLICE))
    assert sorted(first + rest) == [-1, 0, 1, 2, 3, 4, 6, 7, 8, 9]
    again = rotation.next_slice(100)
    assert 99 in again and rotation.done


def test_a_periodic_task_with_more_to_do_goes_on_at_the_next_turn_then_waits():
    runtime = FakeRuntime()
    rotation = Rotation({f"d{i}": i for i in range(10)})
    turns: list[tuple[float, list[int]]] = []

    def action() -> bool:
        turns.append((runtime.now, rotation.next_slice(SLICE)))
        return not rotation.done

    started = runtime.now
    Periodic(runtime, lambda: 5.0, action).start()
    runtime.advance(5.0)
    assert [(t - started, len(s)) for t, s in turns] == [(5, 4), (5, 4), (5, 2)]
    runtime.advance(5.0)
    assert [t - started for t, _ in turns[3:]] == [10, 10, 10], "then the next pass"


def test_the_volatile_sweep_visits_a_slice_per_turn_and_reaches_every_queue(make_net):
    net = make_net({"DestinationManager.sweepslice": SLICE}, journal=True)
    producer = Peer(net, "producer")
    names = [f"/queue/slice-{i}" for i in range(QUEUES)]
    soon = str(int(net.runtime.now * 1000) + 500)
    for name in names:
        producer.send(name, "expires", {"expires": soon})
        producer.send(name, "stays")
    net.runtime.advance(1.0)
    registry = net.core.destinations

    def reached() -> int:  # queues whose sweep has run: their expired message is gone
        return sum(registry.queues[name].fates.expired for name in names)

    per_turn: list[int] = []
    more = True
    while more:
        before = reached()
        more = registry.sweep_volatile()
        per_turn.append(reached() - before)
    assert per_turn == [4, 4, 4, 4, 4, 3], "at most a slice per turn, every queue once"
    assert registry.totals()["expired"] == QUEUES
    assert [len(registry.queues[name].waiting()) for name in names] == [1] * QUEUES
    runs = [r for r in written(net) if r["event"].startswith("cleanup_")]
    assert [r["event"] for r in runs] == ["cleanup_started", "cleanup_ended"], "one run a pass"
    assert (runs[1]["scanned"], runs[1]["removed"]) == (2 * QUEUES, QUEUES)


def test_the_survey_finds_the_busiest_and_rates_a_slice_at_a_time(make_net):
    net = make_net()
    producer = Peer(net, "producer")
    names = [f"/queue/depth-{i}" for i in range(8)]
    for depth, name in enumerate(names):
        for n in range(depth + 1):
            producer.send(name, f"m{n}")
    survey = net.core.survey

    def a_pass(now: float) -> int:
        visits = 1
        survey.visit(now, 3, 2)
        while not survey.passed:
            survey.visit(now, 3, 2)
            visits += 1
        return visits

    assert a_pass(0.0) == 3  # 8 queues, 3 a visit (and the busiest known each time)
    assert [d.name for d in survey.busiest(2)] == [names[7], names[6]]
    assert survey.rates(names[7])["publish_rate"] is None, "seen once: no rate yet"

    for n in range(20):
        producer.send(names[0], f"more{n}")  # now the busiest: 21 messages
    consumer = Peer(net, "consumer")
    consumer.subscribe(names[7])  # empties the one that was
    a_pass(10.0)
    assert [d.name for d in survey.busiest(2)] == [names[0], names[6]]
    assert survey.rates(names[0]) == {"publish_rate": 2.0, "deliver_rate": 0.0, "ack_rate": 0.0}
    assert survey.rates(names[7]) == {"publish_rate": 0.0, "deliver_rate": 0.8, "ack_rate": 0.8}
    assert survey.rates(names[3])["publish_rate"] == 0.0
