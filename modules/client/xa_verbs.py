"""One session's XA verbs: the core's side of wiremq's XA extension (``docs/xa.md``).

The ``XAController`` (``pipeline/xa.py``) keeps the branches by XID, their
states, timeouts and prepared state; this is what one session asks of it, with
the session as the owner its branches are associated with. A prepare and a
rollback take effect once stored, and a commit once its unit is stored and
delivered: each counts as the session's work in progress until then.
"""

from __future__ import annotations

from wiremq.modules.client.progress import WorkInProgress
from wiremq.modules.pipeline.xa import XAController
from wiremq.modules.sender import TransactionOwner


class SessionXA:
    """See the module docstring."""

    def __init__(
        self, controller: XAController, owner: TransactionOwner, progress: WorkInProgress
    ) -> None:
        self.controller = controller
        self.owner = owner
        self.progress = progress

    def start(self, xid: str, timeout: str | None, receipt: str | None) -> None:
        """Start a branch on this session (``timeout``: seconds, as the client wrote them;
        None: the default)."""
        self.controller.start(self.owner, xid, timeout)
        self.progress.answer(receipt)

    def join(self, xid: str, receipt: str | None) -> None:
        self.controller.join(self.owner, xid)
        self.progress.answer(receipt)

    def end(self, xid: str, receipt: str | None) -> None:
        self.controller.end(self.owner, xid)
        self.progress.answer(receipt)

    def prepare(self, xid: str, receipt: str | None) -> None:
        owner = self.owner
        self.progress.later(
            receipt, lambda done, failed: self.controller.prepare(owner, xid, done, failed)
        )

    def commit(self, xid: str, one_phase: bool, receipt: str | None) -> None:
        owner, progress = self.owner, self.progress
        progress.start(lambda: self.controller.commit(owner, xid, one_phase, progress, receipt))

    def rollback(self, xid: str, receipt: str | None) -> None:
        owner = self.owner
        self.progress.later(
            receipt, lambda done, failed: self.controller.rollback(owner, xid, done, failed)
        )

    def recover(self) -> list[str]:
        """The XIDs of the prepared branches, in order."""
        return self.controller.recover()
