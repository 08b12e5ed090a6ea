"""Periodic tasks outlive a run that raises."""

from __future__ import annotations

from tests.fakes import FakeRuntime
from wiremq.modules.cleanup import Periodic


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
