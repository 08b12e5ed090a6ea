"""One session's standard transactions: the core's side of BEGIN, COMMIT and ABORT.

The transaction manager holds what a transaction's SENDs and ACKs hand it
(``pipeline/transaction_manager.py``); a COMMIT meets there, whole. This is the
session's side: it begins and aborts its transactions, takes one for COMMIT
and counts the COMMIT as work in progress until its owner (the session's
``WorkInProgress``) is told how it ended. It is the ``TransactionOwner`` the
manager keeps the session's transactions under: told at once when one of them
is discarded, and stopped (through the session's ``ReadGate``) while open
transactions hold too much memory.
"""

from __future__ import annotations

from collections.abc import Callable

from wiremq.modules.client.progress import WorkInProgress
from wiremq.modules.client.reading import ReadGate
from wiremq.modules.errors import Refused
from wiremq.modules.pipeline.transaction_manager import TransactionManager

Discarded = Callable[[str, Refused], None]


class SessionTransactions:
    """See the module docstring."""

    def __init__(
        self,
        manager: TransactionManager,
        progress: WorkInProgress,
        reading: ReadGate,
        discarded: Discarded,
    ) -> None:
        """``discarded(name, refusal)`` tells the client at once that a transaction of its
        was discarded."""
        self.manager = manager
        self.progress = progress
        self.reading = reading
        self.discarded = discarded

    def is_standard(self, name: str) -> bool:
        """Whether ``name`` is a standard transaction open on this session (else it may be
        an XA branch, or nothing)."""
        found = self.manager.find(self, name)
        return found is not None and not found.xa

    def begin(self, name: str, receipt: str | None) -> None:
        self.manager.begin(self, name)
        self.progress.answer(receipt)

    def commit(self, name: str, receipt: str | None) -> None:
        """COMMIT: its receipt is answered once its messages are stored and delivered."""
        found = self.manager.find(self, name)
        if found is not None and found.xa:
            raise Refused(
                "XA protocol error",
                f"COMMIT of XA branch {name!r} says what to do: xa:end, "
                "xa:prepare, xa:commit or xa:onephase",
            )
        transaction = self.manager.take(self, name)
        self.progress.started()
        self.manager.commit(transaction, self.progress, receipt)

    def abort(self, name: str, receipt: str | None) -> None:
        self.manager.abort(self, name)
        self.progress.answer(receipt)

    def abort_all(self) -> None:
        """The session ends: every open transaction is dropped."""
        self.manager.abort_all(self)

    # -- TransactionOwner ------------------------------------------------------------------

    def transaction_discarded(self, name: str, refusal: Refused) -> None:
        self.discarded(name, refusal)

    def stop_reading(self, reason: object) -> None:
        self.reading.stop_reading(reason)

    def start_reading(self, reason: object) -> None:
        self.reading.start_reading(reason)
