"""One session's work in progress, and the answers it owes as each piece is done.

A client's messages travel down the pipelines, its acknowledgements and
COMMITs are stored, its durable subscriptions registered, its XA branches
prepared, all at their own pace. ``WorkInProgress`` counts what the session
started and has not finished; it is told when each piece is done (as the
``MessageWaiter`` of the client's messages, the ``UnitOwner`` of its COMMITs,
or directly), answers through the session's callback (``completed`` with the
request's receipt, or ``refused``), and once nothing is left runs what waited
for that: a DISCONNECT's receipt, an ERROR, requests held behind a SUBSCRIBE.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from wiremq.modules.errors import Refused
from wiremq.modules.message import Message
from wiremq.modules.pipeline.transaction_manager import Unit
from wiremq.modules.runtime import Answer

Done = Callable[[], None]
Failed = Callable[[Refused], None]


class Answers(Protocol):
    """How a session answers its client (the part of ``SessionCallback`` it needs)."""

    def completed(self, receipt: str) -> None: ...
    def early_answer(self, receipt: str) -> Answer | None: ...
    def refused(self, refusal: Refused, receipt: str | None) -> None: ...


class WorkInProgress:
    """See the module docstring."""

    __slots__ = ("answers", "count", "_on_idle")

    def __init__(self, answers: Answers) -> None:
        self.answers = answers
        self.count = 0  # pieces of work started and not finished
        self._on_idle: Callable[[], None] | None = None

    def started(self, count: int = 1) -> None:
        self.count += count

    def done(self, receipt: str | None, count: int = 1) -> None:
        """``count`` pieces are done; ``receipt`` (if any) is answered."""
        self.count -= count
        if receipt is not None:
            self.answers.completed(receipt)
        if not self.count and self._on_idle is not None:
            action, self._on_idle = self._on_idle, None
            action()

    def failed(self, refusal: Refused, receipt: str | None) -> None:
        """A piece failed: the client is told (naming ``receipt``) and it is over."""
        self.answers.refused(refusal, receipt)
        self.done(None)

    def answer(self, receipt: str | None) -> None:
        """A request took effect at once: its receipt (if any) is answered."""
        if receipt is not None:
            self.answers.completed(receipt)

    def later(self, receipt: str | None, call: Callable[[Done, Failed], None]) -> None:
        """Run ``call(done, failed)`` for a request that takes effect later: its receipt
        is answered when ``done``, a refusal naming it when ``failed`` (see ``start``)."""
        self.start(
            lambda: call(lambda: self.done(receipt), lambda refusal: self.failed(refusal, receipt))
        )

    def start(self, call: Callable[[], None]) -> None:
        """Run ``call``, which starts a piece of work that reports here when it is done
        (maybe before ``call`` returns); if ``call`` refuses at once, nothing started."""
        self.count += 1
        try:
            call()
        except Refused:
            self.count -= 1
            raise

    def when_idle(self, action: Callable[[], None]) -> None:
        """Run ``action`` once everything started so far is done (now, if nothing is)."""
        if self.count:
            self._on_idle = action
        else:
            action()

    # -- the MessageWaiter of the session's messages --------------------------------------

    def messages_completed(self, messages: list[Message]) -> None:
        """The pipeline is done with messages the client sent: their receipts go (unless
        they went with the messages' store commit already)."""
        completed = self.answers.completed
        for message in messages:
            if message.receipt is not None and not message.answered:
                completed(message.receipt)
        self.done(None, len(messages))

    def early_answer(self, receipt: str) -> Answer | None:
        """A stored message's receipt, for the log writer to send (``MessageWaiter``)."""
        return self.answers.early_answer(receipt)

    def message_refused(self, message: Message, refusal: Refused) -> None:
        """The server does not take a message: the client is told which one (the refusal
        takes the place of anything waiting for this, a DISCONNECT's receipt say)."""
        self.failed(refusal, message.receipt)

    # -- the UnitOwner of the session's COMMITs -------------------------------------------

    def unit_completed(self, unit: Unit) -> None:
        """A COMMIT is stored and its messages have left the pipeline."""
        self.done(unit.receipt)

    def unit_failed(self, unit: Unit, refusal: Refused) -> None:
        self.failed(refusal, unit.receipt)
