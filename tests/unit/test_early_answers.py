"""Which receipts go with a store commit for the log writer to send (``early_answers``)."""

from __future__ import annotations

from wiremq.modules.message import Message
from wiremq.modules.pipeline.storage import early_answers


class Waiter:
    """A session whose socket takes an early answer, or not (``can``)."""

    def __init__(self, can: bool = True) -> None:
        self.can = can
        self.asked: list[str] = []

    def early_answer(self, receipt: str) -> object | None:
        self.asked.append(receipt)
        return ("answer", receipt) if self.can else None


def message(waiter: Waiter, receipt: str | None) -> Message:
    headers = {"persistent": "true", **({"receipt": receipt} if receipt else {})}
    return Message("m", "/queue/q", headers, b"body", waiter=waiter)  # type: ignore[arg-type]


def test_a_commit_carrying_one_receipt_hands_it_over_and_marks_its_message():
    waiter = Waiter()
    batch = [message(waiter, None), message(waiter, "r1"), message(waiter, None)]
    assert early_answers(batch) == [("answer", "r1")]
    assert [m.answered for m in batch] == [False, True, False]


def test_a_commit_carrying_several_receipts_leaves_them_to_the_event_loop():
    first, second = Waiter(), Waiter()
    batch = [message(first, "r1"), message(second, "r2")]
    assert early_answers(batch) == []
    assert not any(m.answered for m in batch)
    assert first.asked == second.asked == []


def test_a_socket_that_cannot_take_it_leaves_the_receipt_unmarked():
    batch = [message(Waiter(can=False), "r1")]
    assert early_answers(batch) == []
    assert not batch[0].answered
