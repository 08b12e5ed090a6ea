"""Slowness per client, the egress load factor, and the slow-subscriber verdict."""

import pytest

from tests.defaults import EGRESS_LIMITS as DEFAULT_LIMITS
from tests.defaults import SETTINGS
from tests.fakes import FakeRuntime
from wiremq.config.groups import SlowSubscriberSettings
from wiremq.modules.flow.egress_queues import (
    EgressQueue,
    EgressQueues,
    QueueLimits,
)
from wiremq.modules.flow.slowness import (
    SlownessMeter,
    SlowSubscriberPolicy,
    Verdict,
    egress_load_factor,
)

WINDOW = 60.0  # SlowSubscriber.window's default


def blocked_for(meter: SlownessMeter, clock: FakeRuntime, seconds: float) -> None:
    meter.blocked()
    clock.advance(seconds)
    meter.unblocked()


def test_a_client_never_blocked_is_not_slow() -> None:
    clock = FakeRuntime()
    meter = SlownessMeter(clock.monotonic, WINDOW)
    clock.advance(120)
    assert meter.share() == 0.0


def test_share_of_the_window_spent_blocked() -> None:
    clock = FakeRuntime()
    meter = SlownessMeter(clock.monotonic, WINDOW)
    blocked_for(meter, clock, 10)
    clock.advance(20)
    blocked_for(meter, clock, 5)
    assert meter.share() == pytest.approx(15 / 60)


def test_an_open_interval_counts_up_to_now() -> None:
    clock = FakeRuntime()
    meter = SlownessMeter(clock.monotonic, WINDOW)
    meter.blocked()
    clock.advance(30)
    assert meter.share() == pytest.approx(0.5)
    clock.advance(60)
    assert meter.share() == 1.0


@pytest.mark.parametrize(("later", "share"), [(30, 0.5), (45, 0.25), (60, 0.0), (600, 0.0)])
def test_intervals_slide_out_of_the_window(later: float, share: float) -> None:
    clock = FakeRuntime()
    meter = SlownessMeter(clock.monotonic, WINDOW)
    blocked_for(meter, clock, 30)
    clock.advance(later)
    assert meter.share() == pytest.approx(share)


def test_an_open_interval_older_than_the_window_is_cut_at_its_start() -> None:
    clock = FakeRuntime()
    meter = SlownessMeter(clock.monotonic, window=10)
    meter.blocked()
    clock.advance(100)
    meter.unblocked()
    clock.advance(4)
    assert meter.share() == pytest.approx(0.6)


def test_blocked_and_unblocked_are_idempotent() -> None:
    clock = FakeRuntime()
    meter = SlownessMeter(clock.monotonic, WINDOW)
    meter.unblocked()  # not blocked: nothing happens
    meter.blocked()
    clock.advance(6)
    meter.blocked()  # already blocked: the interval still starts at 0
    clock.advance(6)
    meter.unblocked()
    clock.advance(6)
    meter.unblocked()
    assert meter.share() == pytest.approx(12 / 60)


def test_many_short_stalls_are_measured_in_bounded_memory() -> None:
    clock = FakeRuntime()
    meter = SlownessMeter(clock.monotonic, WINDOW)
    for _ in range(10_000):  # 100 s of 4 ms stalls every 10 ms
        blocked_for(meter, clock, 0.004)
        clock.advance(0.006)
    assert meter.share() == pytest.approx(0.4, abs=0.01)
    assert len(meter._spans) <= 61  # a span per second of the window, at most


def test_touching_intervals_merge_exactly() -> None:
    clock = FakeRuntime()
    meter = SlownessMeter(clock.monotonic, window=10, spans=10)
    for _ in range(4):
        blocked_for(meter, clock, 5)  # each starts where the last ended
    assert len(meter._spans) == 1
    assert meter.share() == 1.0
    clock.advance(3)
    assert meter.share() == pytest.approx(0.7)


def test_a_merged_span_straddling_the_window_start_counts_pro_rata() -> None:
    clock = FakeRuntime()
    meter = SlownessMeter(clock.monotonic, window=10, spans=1)  # merge within 10 s
    blocked_for(meter, clock, 1)  # [0, 1]
    clock.advance(2)
    blocked_for(meter, clock, 1)  # [3, 4]: merged into one span [0, 4] holding 2 s
    clock.advance(7)  # now 11: the window starts at 1, three quarters of the span are in it
    assert meter.share() == pytest.approx(0.15)  # 2 s x 3/4 (exactly, it was 1 s)


@pytest.mark.parametrize(("window", "spans"), [(0, 60), (-1, 60), (60, 0)])
def test_a_meter_needs_a_window_and_spans(window: float, spans: int) -> None:
    with pytest.raises(ValueError):
        SlownessMeter(FakeRuntime().monotonic, window, spans)


def client(queued_units: int, max_depth: int = 100) -> EgressQueues:
    """A client with ``queued_units`` single-unit messages on D-1."""
    queues = EgressQueues((QueueLimits(max_depth, 4),) * len(DEFAULT_LIMITS))
    for _ in range(queued_units):
        queues.enqueue(EgressQueue.D1, b"m", b"")
    return queues


@pytest.mark.parametrize(
    ("queued", "capacity", "factor"),
    [
        ([0, 0], None, 0.0),
        ([100, 150], None, 25.0),  # 250 of 2 clients x 5 queues x 100 units
        ([100, 150], 500, 50.0),  # 250 of a configured 500
        ([600, 600], 1000, 120.0),  # BLOCK lets queues past max-depth
        ([], None, 0.0),  # no clients at all
    ],
)
def test_egress_load_factor(queued: list[int], capacity: int | None, factor: float) -> None:
    clients = [client(units) for units in queued]
    assert egress_load_factor(clients, capacity) == pytest.approx(factor)


@pytest.mark.parametrize(
    ("enabled", "share", "load", "verdict"),
    [
        (False, 0.1, 200, Verdict.OK),
        (False, 0.5, 200, Verdict.WARN),
        (False, 0.95, 200, Verdict.WARN),  # disconnecting is off by default
        (True, 0.49, 200, Verdict.OK),
        (True, 0.7, 200, Verdict.WARN),
        (True, 0.9, 100, Verdict.DISCONNECT),
        (True, 0.95, 99, Verdict.WARN),  # egress buffers are not under pressure
    ],
)
def test_slow_subscriber_verdict(
    enabled: bool, share: float, load: float, verdict: Verdict
) -> None:
    policy = SlowSubscriberPolicy(
        warn_share=0.5, disconnect_share=0.9, disconnect_enabled=enabled, disconnect_load_factor=100
    )
    assert policy.verdict(share, load) is verdict


def test_disconnecting_is_off_by_default() -> None:
    policy = SlowSubscriberPolicy.of(SlowSubscriberSettings.read(SETTINGS, "SlowSubscriber"))
    assert policy.verdict(1.0, 1000) is Verdict.WARN


@pytest.mark.parametrize(
    "arguments",
    [
        {"warn_share": 0.9, "disconnect_share": 0.5},
        {"warn_share": -0.1},
        {"disconnect_share": 1.5},
        {"disconnect_load_factor": -1},
    ],
)
def test_policy_refuses_bad_thresholds(arguments: dict[str, float]) -> None:
    valid = {
        "warn_share": 0.5,
        "disconnect_share": 0.9,
        "disconnect_enabled": False,
        "disconnect_load_factor": 100.0,
    }
    with pytest.raises(ValueError):
        SlowSubscriberPolicy(**{**valid, **arguments})
