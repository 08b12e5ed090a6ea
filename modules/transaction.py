"""The transaction module and the transaction manager it hands transacted work to.

Frames inside a transaction (SENDs and ACKs) are held per connection until
COMMIT, then released in order: held messages continue down the chain after
the transaction module, held acknowledgements are applied. ABORT, or the
connection going away, drops them.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from wiremq.modules.message import Message
from wiremq.modules.pipeline import ModuleContext, PipelineModule, release
from wiremq.modules.stomp.frames import ProtocolError


class TransactionManager:
    """Open transactions of every connection."""

    def __init__(self) -> None:
        self._open: dict[tuple[object, str], list[Callable[[], None]]] = {}
        self.domains: set[str] = set()  # domains whose chain has a transaction module

    def _require(self, owner: object, transaction: str) -> list[Callable[[], None]]:
        held = self._open.get((owner, transaction))
        if held is None:
            raise ProtocolError(
                "unknown transaction",
                f"transaction {transaction!r} was not begun on this connection",
            )
        return held

    def check(self, owner: object, transaction: str, domain: str) -> None:
        """Refuse work for a transaction that is not open, or a domain without transactions."""
        if domain not in self.domains:
            raise ProtocolError(
                "transactions disabled",
                f"the {domain} pipeline has no transaction module (see config.xml)",
            )
        self._require(owner, transaction)

    def begin(self, owner: object, transaction: str) -> None:
        if not self.domains:
            raise ProtocolError(
                "transactions disabled", "no pipeline has a transaction module (see config.xml)"
            )
        if (owner, transaction) in self._open:
            raise ProtocolError(
                "transaction already begun", f"transaction {transaction!r} is already open"
            )
        self._open[(owner, transaction)] = []

    def hold(self, owner: object, transaction: str, action: Callable[[], None]) -> None:
        """Keep an action to run at COMMIT."""
        self._require(owner, transaction).append(action)

    def commit(self, owner: object, transaction: str) -> None:
        held = self._require(owner, transaction)
        del self._open[(owner, transaction)]
        for action in held:
            action()

    def abort(self, owner: object, transaction: str) -> None:
        self._require(owner, transaction)
        del self._open[(owner, transaction)]

    def abort_all(self, owner: object) -> None:
        """Drop every open transaction of a connection that went away."""
        for key in [k for k in self._open if k[0] is owner]:
            del self._open[key]


class TransactionModule(PipelineModule):
    """Passes non-transacted messages straight on; holds transacted ones until COMMIT."""

    name = "transaction"

    def __init__(self, context: ModuleContext) -> None:
        super().__init__(context)
        self.manager = context.broker.transactions
        self.manager.domains.add(context.domain)

    def handle(self, message: Message) -> None:
        transaction = message.transaction
        if transaction is None:
            self.downstream.handle(message)
            return
        self.manager.hold(message.origin, transaction, partial(self.downstream.handle, message))
        release(message)  # the SEND is accepted now; its receipt need not wait for COMMIT
