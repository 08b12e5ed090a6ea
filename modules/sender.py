"""Who sent a message: the small value a message carries down the pipeline instead of its
connection.

A client's session makes one ``Sender`` when its login is accepted and puts it on
every message it sends. The pipeline asks it three things and nothing else: what
the sender may do (admission checks write and create), which producer to count at
the destination (so that its watermarks can stop it), and whose transactions a
``transaction`` header names. Each is a small object of its own; none is the
connection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from wiremq.modules.errors import Refused
from wiremq.modules.flow.watermarks import Producer
from wiremq.modules.security.permissions import Access


class TransactionOwner(Producer, Protocol):
    """The session whose open transactions a ``transaction`` header names: its
    transactions are kept under it, it is told at once when one of them is discarded,
    and it is stopped (a ``Producer``) while transactions hold too much memory."""

    def transaction_discarded(self, name: str, refusal: Refused) -> None: ...


@dataclass(frozen=True, slots=True, eq=False)
class Sender:
    """Who sent a message (see the module docstring). Compared by identity: one per
    session, so that a run of one sender's messages is recognised by ``is``."""

    access: Access | None  # what the sender may do; None: anything (the server has no users)
    producer: Producer  # counted among a destination's producers; its watermarks stop it
    transactions: TransactionOwner  # whose open transactions the ``transaction`` header names
