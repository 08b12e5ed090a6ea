"""The threshold type, usage-event thresholds, and the two-watermark gauge."""

import pytest

from wiremq.modules.flow.threshold import (
    OFF,
    Gauge,
    Threshold,
    Transition,
    percent_threshold,
)

SET, CLEAR = Transition.SET, Transition.CLEAR


def run(threshold: Threshold, values: list[float]) -> list[Transition | None]:
    return [threshold.update(value) for value in values]


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        # rises to high: set; stays set above low; clears at low
        ([5, 10, 8, 6, 5, 4], [None, SET, None, None, CLEAR, None]),
        # jumps straight past both bounds
        ([20, 0, 20], [SET, CLEAR, SET]),
        # hovers between the bounds without flapping
        ([10, 9, 11, 6, 11], [SET, None, None, None, None]),
        # never reaches high
        ([9.99, 0, 9.99], [None, None, None]),
    ],
)
def test_set_and_clear_with_hysteresis(values: list[float], expected: list[object]) -> None:
    assert run(Threshold(10, 5), values) == expected


@pytest.mark.parametrize(("high", "low"), [(OFF, 5), (10, OFF), (OFF, OFF)])
def test_an_off_threshold_never_trips(high: float, low: float) -> None:
    threshold = Threshold(high, low)
    assert not threshold.enabled
    assert run(threshold, [0, 10, 1e18, 0]) == [None] * 4
    assert not threshold.is_set


@pytest.mark.parametrize(("high", "low"), [(5, 10), (-2, 0), (10, -0.5)])
def test_bad_bounds_are_refused(high: float, low: float) -> None:
    with pytest.raises(ValueError):
        Threshold(high, low)


def test_equal_bounds_do_not_flap_at_the_bound() -> None:
    threshold = Threshold(10, 10)
    assert run(threshold, [10, 10, 10, 9, 10]) == [SET, None, None, CLEAR, SET]


def test_is_set_follows_transitions() -> None:
    threshold = Threshold(2, 1)
    threshold.update(2)
    assert threshold.is_set
    threshold.update(1)
    assert not threshold.is_set


@pytest.mark.parametrize(
    ("bounds", "value", "expected", "is_set"),
    [
        ((20, 15), 12, CLEAR, False),  # new low is above the value
        ((20, 5), 12, None, True),  # still between the bounds: stays set
        ((OFF, OFF), 12, CLEAR, False),  # switched off
    ],
)
def test_configure_re_evaluates_a_set_threshold(
    bounds: tuple[float, float], value: float, expected: Transition | None, is_set: bool
) -> None:
    threshold = Threshold(10, 5)
    threshold.update(12)
    assert threshold.configure(*bounds, value) is expected
    assert threshold.is_set is is_set
    assert (threshold.high, threshold.low) == bounds


def test_configure_can_set_a_clear_threshold() -> None:
    threshold = Threshold(OFF, OFF)
    assert threshold.configure(10, 5, 12) is SET
    assert threshold.is_set


def test_percent_threshold_at_80_and_60_percent() -> None:
    threshold = percent_threshold(1000, 80, 60)
    assert (threshold.high, threshold.low) == (800, 600)
    assert run(threshold, [799, 800, 601, 600]) == [None, SET, None, CLEAR]


def test_percent_threshold_of_an_off_capacity_is_off() -> None:
    assert not percent_threshold(OFF, 80, 60).enabled


@pytest.mark.parametrize(("set_percent", "clear_percent"), [(60, 80), (80, -1)])
def test_percent_threshold_refuses_bad_percentages(
    set_percent: float, clear_percent: float
) -> None:
    with pytest.raises(ValueError):
        percent_threshold(100, set_percent, clear_percent)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[bool] = []

    def __call__(self, tripped: bool) -> None:
        self.calls.append(tripped)


def test_gauge_counts_messages_and_bytes() -> None:
    gauge = Gauge()
    gauge.add(3, 300)
    gauge.remove(1, 100)
    assert (gauge.messages, gauge.bytes) == (2, 200)
    assert not gauge.tripped


@pytest.mark.parametrize(
    ("watermarks", "steps"),
    [
        # message watermark only: trips at 3 messages, untrips at 1
        ((3, 1, OFF, OFF), [(1, 10, False), (2, 10, True), (-1, -10, True), (-1, -10, False)]),
        # byte watermark only: trips at 1000 bytes, untrips at 500
        ((OFF, OFF, 1000, 500), [(1, 999, False), (1, 1, True), (-1, -501, False)]),
    ],
)
def test_gauge_trips_on_either_watermark(
    watermarks: tuple[float, float, float, float], steps: list[tuple[int, int, bool]]
) -> None:
    recorder = Recorder()
    gauge = Gauge(*watermarks, on_change=recorder)
    for messages, nbytes, tripped in steps:
        if messages > 0:
            gauge.add(messages, nbytes)
        else:
            gauge.remove(-messages, -nbytes)
        assert gauge.tripped is tripped
    assert recorder.calls == [True, False]


def test_gauge_untrips_only_when_every_set_watermark_has_cleared() -> None:
    recorder = Recorder()
    gauge = Gauge(msg_high=2, msg_low=1, byte_high=100, byte_low=50, on_change=recorder)
    gauge.add(2, 100)  # both set
    assert gauge.msg_threshold.is_set and gauge.byte_threshold.is_set
    gauge.remove(1, 0)  # messages clear, bytes still set
    assert gauge.tripped
    gauge.add(1, 0)  # messages set again: still one tripped state, no new call
    gauge.remove(1, 50)  # both clear together
    assert not gauge.tripped
    assert recorder.calls == [True, False]


def test_gauge_configure_re_evaluates_and_reports_the_change() -> None:
    recorder = Recorder()
    gauge = Gauge(on_change=recorder)
    gauge.add(5, 500)
    gauge.configure(5, 2, OFF, OFF)  # now at the new high watermark
    assert gauge.tripped
    gauge.configure(10, 8, OFF, OFF)  # the new low is above the count
    assert not gauge.tripped
    gauge.configure(OFF, OFF, 400, 100)
    assert gauge.tripped
    assert recorder.calls == [True, False, True]


def test_gauge_without_listener_still_tracks_state() -> None:
    gauge = Gauge(msg_high=1, msg_low=0)
    gauge.add(1, 1)
    assert gauge.tripped
