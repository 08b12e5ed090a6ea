"""Periodic tasks outlive a run that raises; the catch-up keeps up with the log."""

from __future__ import annotations

from types import SimpleNamespace

from tests.fakes import FakeRuntime
from wiremq.config.parameters import REGISTRY
from wiremq.config.settings import Settings
from wiremq.modules.persistence.cleanup import CatchUp, Periodic


def test_a_periodic_task_that_raises_once_keeps_running():
    runtime = FakeRuntime()
    runs: list[float] = []

    def action() -> None:
        runs.append(runtime.now)
        if len(runs) == 1:
            raise ValueError("a bad run")

    started = runtime.now
    Periodic(runtime, lambda: 5.0, action).start()
    runtime.advance(20)
    assert [run - started for run in runs] == [5, 10, 15, 20]


class BehindStore:
    """A store whose databases need ``backlog`` seconds of catch-up, spent on the fake
    clock, at most the time each call is given."""

    def __init__(self, runtime: FakeRuntime, backlog: float) -> None:
        self.runtime = runtime
        self.backlog = backlog
        self.calls: list[tuple[float, float]] = []  # (start, end) of each call

    def catch_up(self, max_seconds: float) -> int:
        start = self.runtime.now
        spent = min(self.backlog, max_seconds)
        self.backlog -= spent
        self.runtime.now += spent
        self.calls.append((start, self.runtime.now))
        return int(spent > 0)


def test_a_catch_up_that_runs_out_of_time_goes_on_at_once_then_waits_the_interval():
    """A log growing faster than one catch-up per interval takes in would grow without
    bound, and an open after a crash would replay all of it."""
    runtime = FakeRuntime()
    store = BehindStore(runtime, backlog=0.9)
    persistence = SimpleNamespace(store=store, reader=runtime.worker("store"))
    settings = Settings(
        REGISTRY, {"WriteAheadLog.catchupinterval": 0.2, "WriteAheadLog.catchuptime": 0.25}
    )
    catch_up = CatchUp(runtime, settings, persistence)  # type: ignore[arg-type]
    catch_up.start()
    while runtime.now < 1002.0:
        runtime.advance(0.001)  # the clock's step: how late the worker may start a call
        runtime.workers["store"].run()
    catch_up.stop()
    # 0.9 s of work: three runs use their whole time and the next follows at once; the
    # fourth finishes it; from then on, one every interval.
    pairs = zip(store.calls, store.calls[1:], strict=False)
    gaps = [round(start - end, 3) for (_, end), (start, _) in pairs]
    assert store.backlog == 0
    assert all(gap <= 0.001 for gap in gaps[:3]), gaps
    assert all(0.2 <= gap <= 0.202 for gap in gaps[3:8]), gaps
