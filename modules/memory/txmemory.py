"""TransactionMemSizeManager: the bytes held in open transactions, and which to discard.

Messages of open transactions (standard and XA) are held in memory until
COMMIT. ``TransactionMemSizeManager.uncommittedtxmemsizelimit`` bounds their
bytes in all; when a transacted SEND takes the total over it, the reduce
strategy (``txmemsizereducestategy``, the manual's spelling) chooses which
transactions to discard, and the order qualifier (``txtypeorder``) how
standard and XA transactions take turns:

- strategies: ``MAXBYTES`` (the largest in bytes first, the default),
  ``MAXMESSAGES`` (the most messages first), ``OLDESTTX``, ``YOUNGESTTX``,
  ``ALL`` (every one the order allows), ``NONE`` (none: the producer of the
  next transacted SEND is stopped instead, see ``TransactionMemory``);
- orders: ``MIXEDFIRSTSTANDARD`` (alternately, standard first, the default),
  ``MIXEDFIRSTXA``, ``FIRSTSTANDARD`` (every standard one before any XA one),
  ``FIRSTXA``, ``ONLYSTANDARD``, ``ONLYXA``.

Whatever the strategy and order, XA branches past their timeout and not
prepared go first, all of them (an implicit rollback), and a prepared branch is
never chosen: its coordinator was promised that it can commit. Otherwise
transactions are chosen one at a time, in that order, until the total is within
the limit or nothing the strategy and order allow is left.

``choose`` and the functions it is made of are pure: they take the open
transactions as ``Candidate`` values and return the ones to discard
(``tests/unit/test_txmemory.py`` checks their rules for any input).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import chain, zip_longest
from typing import Generic, Protocol, TypeVar

from wiremq.config.groups import TransactionMemorySettings
from wiremq.modules.errors import Refused
from wiremq.modules.flow.watermarks import Producer


@dataclass(frozen=True, slots=True)
class Candidate:
    """What the strategies know of one open transaction."""

    key: int  # whatever number the caller identifies it by
    xa: bool
    nbytes: int
    messages: int
    started: float  # when it began: older ones have smaller values
    prepared: bool = False  # an XA branch that was prepared: never discarded
    timed_out: bool = False  # an XA branch past its timeout (not prepared): discarded first


# How each strategy orders the transactions it may discard, first to go first.
_RANKS: dict[str, Callable[[Candidate], tuple[float, ...]]] = {
    "MAXBYTES": lambda c: (-c.nbytes, c.started),
    "MAXMESSAGES": lambda c: (-c.messages, -c.nbytes, c.started),
    "OLDESTTX": lambda c: (c.started,),
    "YOUNGESTTX": lambda c: (-c.started,),
    "ALL": lambda c: (c.started,),
}


def ordered(candidates: Iterable[Candidate], strategy: str, order: str) -> list[Candidate]:
    """The transactions ``strategy`` and ``order`` allow to discard, in the order they
    would go (timed-out and prepared branches aside: see ``choose``)."""
    if strategy == "NONE":
        return []
    rank = _RANKS[strategy]
    standard = sorted((c for c in candidates if not c.xa), key=rank)
    xa = sorted((c for c in candidates if c.xa), key=rank)
    if order == "ONLYSTANDARD":
        return standard
    if order == "ONLYXA":
        return xa
    if order == "FIRSTSTANDARD":
        return standard + xa
    if order == "FIRSTXA":
        return xa + standard
    first, second = (standard, xa) if order == "MIXEDFIRSTSTANDARD" else (xa, standard)
    pairs = zip_longest(first, second)
    return [c for c in chain.from_iterable(pairs) if c is not None]


def choose(
    candidates: Sequence[Candidate], total: int, limit: int, strategy: str, order: str
) -> list[Candidate]:
    """The transactions to discard, in order, for ``total`` bytes held against ``limit``."""
    if total <= limit:
        return []
    chosen = [c for c in candidates if c.timed_out and not c.prepared]
    total -= sum(c.nbytes for c in chosen)
    eligible = [c for c in candidates if not c.prepared and not c.timed_out]
    for candidate in ordered(eligible, strategy, order):
        if total <= limit and strategy != "ALL":
            break
        chosen.append(candidate)
        total -= candidate.nbytes
    return chosen


class Held(Protocol):
    """An open transaction as the memory manager sees it."""

    name: str
    nbytes: int

    @property
    def owner(self) -> Producer | None:
        """The connection it belongs to (None: an XA branch no connection is on)."""

    def candidate(self, now: float) -> Candidate: ...


T = TypeVar("T", bound=Held)


class TransactionMemory(Generic[T]):
    """The bytes open transactions hold, against ``uncommittedtxmemsizelimit``.

    ``add`` counts a held message's bytes; past the limit the strategy's choice
    is discarded through ``discard`` (the transaction manager's one place for
    it). Under NONE the sender is stopped instead (``stop_reading``) until the
    total is within the limit again; as stopped producers cannot COMMIT, when
    every connection holding an open transaction is stopped the one holding the
    oldest is read again (it can finish, and free what it holds), so the bound
    may then be passed by what that one transaction adds.
    """

    def __init__(
        self,
        settings: TransactionMemorySettings,
        discard: Callable[[T, Refused], None],
        now: Callable[[], float],
    ) -> None:
        self.limit = settings.uncommittedtxmemsizelimit
        self.strategy = settings.txmemsizereducestategy
        self.order = settings.txtypeorder
        self._discard = discard
        self._now = now
        self.holding: dict[T, None] = {}  # every open transaction, oldest first
        self.total = 0
        self.peak = 0
        self.discards: Counter[str] = Counter()  # by reason: the strategy, or "timeout"
        self._stopped: set[Producer] = set()

    def opened(self, transaction: T) -> None:
        self.holding[transaction] = None

    def add(self, transaction: T, nbytes: int) -> None:
        """``transaction`` holds ``nbytes`` more; past the limit, the strategy acts."""
        transaction.nbytes += nbytes
        self.total += nbytes
        if self.total > self.peak:
            self.peak = self.total
        if self.total > self.limit:
            self._reduce(transaction)

    def released(self, transaction: T) -> None:
        """``transaction`` holds nothing any more (committed, aborted, discarded)."""
        self.total -= transaction.nbytes
        transaction.nbytes = 0
        self.holding.pop(transaction, None)
        if self._stopped and self.total <= self.limit:
            stopped, self._stopped = self._stopped, set()
            for producer in stopped:
                producer.start_reading(self)

    def forget(self, producer: Producer) -> None:
        """A connection went away."""
        self._stopped.discard(producer)

    def _reduce(self, adding: T) -> None:
        now = self._now()
        by_key = {id(t): t for t in self.holding}
        candidates = [t.candidate(now) for t in self.holding]  # keyed by id()
        chosen = choose(candidates, self.total, self.limit, self.strategy, self.order)
        total, limit = self.total, self.limit
        for candidate in chosen:
            transaction = by_key[candidate.key]
            if candidate.timed_out:
                self.discards["timeout"] += 1
                reason = Refused(
                    "transaction rolled back",
                    f"XA branch {transaction.name!r} passed its timeout before it was prepared",
                )
            else:
                self.discards[self.strategy] += 1
                reason = Refused(
                    "transaction discarded",
                    f"transaction {transaction.name!r} was discarded to free memory "
                    f"({self.strategy}, {self.order}): open transactions held {total} bytes, "
                    f"over TransactionMemSizeManager.uncommittedtxmemsizelimit ({limit}); "
                    f"it held {candidate.nbytes} bytes in {candidate.messages} messages",
                )
            self._discard(transaction, reason)
        if self.total > self.limit and self.strategy == "NONE":
            self._stop(adding.owner)

    def _stop(self, producer: Producer | None) -> None:
        """Stop the sender; if that leaves every connection holding a transaction stopped,
        read the one holding the oldest."""
        if producer is None or producer in self._stopped:
            return
        self._stopped.add(producer)
        producer.stop_reading(self)
        owners = [t.owner for t in self.holding if t.owner is not None]
        if owners and all(owner in self._stopped for owner in owners):
            finisher = owners[0]
            self._stopped.discard(finisher)
            finisher.start_reading(self)

    def state(self) -> dict[str, object]:
        return {
            "bytes": self.total,
            "peak_bytes": self.peak,
            "limit": self.limit,
            "strategy": self.strategy,
            "order": self.order,
            "open": len(self.holding),
            "producers_stopped": len(self._stopped),
            "discards": dict(self.discards),
        }

    def __str__(self) -> str:
        return "transaction memory"
