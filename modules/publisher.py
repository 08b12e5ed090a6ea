"""Test messages an operator publishes from the admin console.

A published message goes down its destination's pipeline as a client's SEND
does: admission (its headers checked, its expiry set, the destination made on
first use), the spool checks, storage, distribution, and the audit journal
records it. It is sent and waited for by a ``ConsoleSender``: the message's
``Sender`` (may do anything: the console checked the caller's permissions; a
producer whose watermarks stop nothing, the one message being on its way) and
its waiter, told when the pipeline is done with it (stored, if persistent: the
answer is a receipt) or refuses it. It counts among the destination's producers
only until then.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from wiremq.modules.destinations.registry import Destinations
from wiremq.modules.domains import domain_of
from wiremq.modules.errors import Refused
from wiremq.modules.message import FRAME_ONLY_HEADERS, Batch, Message
from wiremq.modules.operations import Failed, OperationError
from wiremq.modules.runtime import Answer
from wiremq.modules.sender import Sender

PERSISTENT = "persistent"


class ConsoleSender:
    """Who sends one published message and waits for it (``MessageWaiter``), its producer
    and transaction owner (``TransactionOwner``: it has no transactions)."""

    def __init__(
        self, destinations: Destinations, done: Callable[[str], None], failed: Failed
    ) -> None:
        self.destinations = destinations
        self.done = done
        self.failed = failed

    def messages_completed(self, messages: list[Message]) -> None:
        self.destinations.forget_producer(self)
        self.done(messages[0].message_id)

    def early_answer(self, receipt: str) -> Answer | None:
        """None: the operator's answer (HTTP) waits until the message is distributed."""
        return None

    def message_refused(self, message: Message, refusal: Refused) -> None:
        self.destinations.forget_producer(self)
        status = 400 if refusal.message.startswith("invalid") else 409
        detail = f": {refusal.detail}" if refusal.detail else ""
        self.failed(OperationError(status, f"refused ({refusal.message}){detail}"))

    def stop_reading(self, reason: object) -> None:
        """A watermark tripped: the one message is on its way already."""

    def start_reading(self, reason: object) -> None:
        """The watermark cleared."""

    def transaction_discarded(self, name: str, refusal: Refused) -> None:
        """It opens no transaction (a ``transaction`` header is refused before)."""


class Publisher:
    """Publishes test messages (see the module docstring)."""

    def __init__(
        self,
        destinations: Destinations,
        submit: Callable[[str, Batch], None],
        new_id: Callable[[], str],
        now_ms: Callable[[], int],
    ) -> None:
        self.destinations = destinations
        self.submit = submit
        self.new_id = new_id
        self.now_ms = now_ms

    def publish(
        self,
        name: str,
        headers: Mapping[str, str],
        body: bytes,
        persistent: bool,
        done: Callable[[str], None],
        failed: Failed,
    ) -> None:
        """Send one message to ``name``; ``done(message id)`` once the server has it (stored,
        if ``persistent``), else ``failed`` with what refused it."""
        domain = domain_of(name)
        if domain is None:
            raise OperationError(400, f"{name[:200]!r} is neither /queue/NAME nor /topic/NAME")
        frame_only = sorted(FRAME_ONLY_HEADERS & set(headers))
        if frame_only:
            raise OperationError(
                400, f"headers {frame_only} describe a SEND frame, not a message: leave them out"
            )
        sent = {k: v for k, v in headers.items() if k != PERSISTENT}
        if persistent:
            sent[PERSISTENT] = "true"
        console = ConsoleSender(self.destinations, done, failed)
        sender = Sender(access=None, producer=console, transactions=console)
        message = Message(self.new_id(), name, sent, body, sender, console, timestamp=self.now_ms())
        self.submit(domain, [message])
