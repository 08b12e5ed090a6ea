"""Group commit: when batches close, and what happens on success and failure."""

from __future__ import annotations

import pytest

from tests.fakes import FakeRuntime
from wiremq.modules.persistence.groupcommit import GroupCommit


class Log:
    def __init__(self) -> None:
        self.commits: list[list[int]] = []
        self.committed: list[list[int]] = []
        self.failed: list[list[int]] = []
        self.fail_next = False

    def commit(self, batch: list[int]) -> int:
        if self.fail_next:
            self.fail_next = False
            raise OSError("disk full")
        self.commits.append(list(batch))
        return len(batch)


def make(max_items=5, max_bytes=1000, max_delay=0.005, commit_seconds=0.0, source=None):
    """A group commit whose commits each take ``commit_seconds`` on the fake clock."""
    runtime = FakeRuntime()
    worker = runtime.worker("store")
    log = Log()

    def commit(batch):
        runtime.now += commit_seconds
        return log.commit(batch)

    group = GroupCommit(
        runtime,
        lambda batch, done, failed: worker.submit(lambda: commit(batch), done, failed),
        lambda batch, result: log.committed.append(batch),
        lambda batch, error: log.failed.append(batch),
        size=lambda item: item,
        max_items=max_items,
        max_bytes=max_bytes,
        max_delay=max_delay,
        source=source,
    )
    return runtime, worker, log, group


def test_an_idle_worker_takes_what_one_turn_of_the_loop_collected():
    runtime, worker, log, group = make()
    for item in (1, 2, 3):
        group.add(item)
    assert worker.calls == []  # nothing handed over before the turn ends
    runtime.run_soon()
    worker.run()
    assert log.commits == [[1, 2, 3]]
    assert log.committed == [[1, 2, 3]]


def test_a_batch_closes_at_max_items_or_max_bytes_and_closed_batches_commit_together():
    runtime, worker, log, group = make(max_items=3, max_bytes=100)
    for item in (1, 1, 1, 60, 50, 1):
        group.add(item)
    assert len(worker.calls) == 1  # [1, 1, 1] closed at 3 items and went to the idle worker
    worker.run()  # [60, 50] closed at 100 bytes meanwhile; [1] closes when the commit ends
    assert log.commits == [[1, 1, 1], [60, 50, 1]]


def test_items_added_during_a_commit_go_together_when_it_finishes():
    runtime, worker, log, group = make(max_items=100)
    group.add(1)
    runtime.run_soon()  # the first batch goes to the worker
    for item in (2, 3, 4):
        group.add(item)  # the commit of [1] is running
    assert len(worker.calls) == 1
    worker.run()  # [1] finishes, then [2, 3, 4] is committed at once
    assert log.commits == [[1], [2, 3, 4]]


def test_producers_a_commit_answers_share_the_next_one_with_those_that_waited():
    # Producers that each wait for their receipt: 1 and 2 are committed, 3 and 4 come
    # meanwhile; the batch [3, 4] waits for 1's and 2's producers to come back instead
    # of being committed at once (which would make two halves alternate for good).
    runtime, worker, log, group = make(max_items=100, commit_seconds=0.001)
    group.add(1)
    group.add(2)
    runtime.run_soon()
    group.add(3)
    group.add(4)
    worker.run()
    assert log.commits == [[1, 2]] and worker.calls == []  # [3, 4] waits
    group.add(5)
    group.add(6)  # the answered producers are back: as large as expected
    runtime.run_soon()
    worker.run()
    assert log.commits == [[1, 2], [3, 4, 5, 6]]
    group.add(7)
    runtime.run_soon()
    assert worker.calls == []  # the next commit is expected to carry 4 again


def test_producers_answered_as_their_commit_synced_are_not_expected_twice():
    # Items 11 and 21 (producers 1 and 2: the tens) are committed; their receipts went
    # out as the record synced, so 12 and 22 are back before the commit's end is heard,
    # with 31 from producer 3. The next commit is expected to carry 2 + 1 items: the
    # batch goes at once, not after waiting for 1 and 2 a second time.
    runtime, worker, log, group = make(
        max_items=100, commit_seconds=0.001, source=lambda item: item // 10
    )
    group.add(11)
    group.add(21)
    runtime.run_soon()
    for item in (12, 22, 31):
        group.add(item)
    worker.run()  # [11, 21] finishes, and [12, 22, 31] is committed at once
    assert log.commits == [[11, 21], [12, 22, 31]]
    group.add(13)  # the next is expected to carry 3: 13 waits for 2's and 3's
    runtime.run_soon()
    assert worker.calls == []


def test_the_batch_waits_for_the_answered_at_most_as_long_as_the_last_commit_took():
    runtime, worker, log, group = make(max_items=100, commit_seconds=0.002)
    group.add(1)
    runtime.run_soon()
    group.add(2)
    worker.run()  # [1] took 2 ms: [2] waits up to 2 ms for 1's producer
    runtime.advance(0.0019)
    assert log.commits == [[1]] and worker.calls == []
    runtime.advance(0.0002)
    worker.run()
    assert log.commits == [[1], [2]]


def test_the_wait_for_the_answered_never_passes_the_oldest_items_max_delay():
    runtime, worker, log, group = make(max_items=100, max_delay=0.005, commit_seconds=0.004)
    group.add(1)
    runtime.run_soon()
    group.add(2)  # at 0 s, while [1] is committed (until 4 ms)
    worker.run()
    runtime.advance(0.0009)  # 4.9 ms: within the last commit's 4 ms, within max_delay
    assert log.commits == [[1]] and worker.calls == []
    runtime.advance(0.0002)  # 5.1 ms: [2] has waited max_delay
    worker.run()
    assert log.commits == [[1], [2]]


def test_max_delay_closes_a_batch_while_the_worker_is_busy():
    runtime, worker, log, group = make(max_items=100, max_delay=0.005)
    group.add(1)
    runtime.run_soon()
    group.add(2)
    runtime.advance(0.006)  # the delay passed: [2] is closed, waiting for the worker
    group.add(3)  # a new batch
    worker.run()
    assert log.commits == [[1], [2, 3]]  # what waited behind [1] goes in one commit


def test_max_delay_zero_commits_every_item_alone():
    runtime, worker, log, group = make(max_delay=0)
    for item in (1, 2, 3):
        group.add(item)
    worker.run()
    assert log.commits == [[1], [2], [3]]


def test_a_failed_commit_reports_its_batch_and_the_next_batch_goes_on():
    runtime, worker, log, group = make()
    log.fail_next = True
    group.add(1)
    runtime.run_soon()
    group.add(2)
    worker.run()
    assert log.failed == [[1]]
    assert log.committed == [[2]]


@pytest.mark.parametrize("busy", [False, True])
def test_when_committed_waits_for_everything_added_so_far(busy):
    runtime, worker, log, group = make(max_items=100)
    if busy:
        group.add(1)
        runtime.run_soon()
    group.add(2)
    called = []
    group.when_committed(lambda: called.append(len(log.commits)))
    group.add(3)  # added after the call: not waited for, but may share the batch
    assert called == []
    runtime.run_soon()
    worker.run()
    assert called and called[0] >= (2 if busy else 1)
    assert [2] in log.commits or [2, 3] in log.commits


def test_when_committed_runs_at_once_when_nothing_is_pending():
    _, _, _, group = make()
    called = []
    group.when_committed(lambda: called.append(True))
    assert called == [True]
