"""XA: distributed transaction branches over STOMP (wiremq's extension, ``docs/xa.md``).

A branch is named by its XID, which a transaction coordinator chooses, and
which SENDs and ACKs carry as their ``transaction`` header while a connection
is associated with the branch:

- ``BEGIN xa:start`` (optional ``xa-timeout``, seconds; else
  ``XATransactionController.defaulttimeout``) starts a branch on this
  connection; ``BEGIN xa:join`` associates this connection with an ended one.
- ``COMMIT xa:end`` ends the association (the branch stays, idle, for the
  coordinator); ``COMMIT xa:prepare`` prepares it: its messages and
  acknowledgements are stored as prepared (the RECEIPT comes once they are),
  and from then on it survives anything, a crash included, until
  ``COMMIT xa:commit`` (the second phase) or ``ABORT`` from any connection.
  ``COMMIT xa:onephase`` commits a branch that was not prepared.
- ``ABORT`` (``xa:rollback``) rolls a branch back.
- ``RECOVER`` (with a ``receipt``) answers with a RECEIPT listing the prepared
  XIDs (``xa-count``, ``xids``), after a restart say.

A branch not prepared within its timeout is rolled back, as is one the
transaction memory manager discards; its later ``prepare`` or ``commit`` fails
with an ERROR saying why. A prepared branch is never discarded.

Prepared state is kept through the store interface alone (no change to
``stores/``): in one queue log no client can name (``PREPARED_AREA``: a control
character in it, which admission refuses), one store transaction writes a
branch record (its durable subscribers' acknowledgements, as JSON), a copy of
each message it sends (headers say its XID and destination), and *moves* each
stored queue message it acknowledged there (``StoreTransaction.moves``: taken
from its queue in the same atomic commit, so that no consumer gets it while the
branch is prepared, also after a restart). The second phase is then the
branch's COMMIT as a ``Unit`` whose one store transaction appends its messages
to their destinations, removes its records from the area and stores its
durable acknowledgements; a rollback removes them and moves the acknowledged
messages back to their queues (they are delivered again, flagged redelivered).
At start-up ``restore`` reads the area back into prepared branches.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING

import structlog

from wiremq.config.groups import XASettings
from wiremq.modules.destinations.registry import Destinations
from wiremq.modules.domains import P2P
from wiremq.modules.errors import Refused
from wiremq.modules.journal.schema import TRANSACTION_ABORTED
from wiremq.modules.memory.txmemory import Candidate
from wiremq.modules.message import Message
from wiremq.modules.pipeline.chain import Batch, GivenBack
from wiremq.modules.pipeline.transaction_manager import (
    Taken,
    Transaction,
    TransactionManager,
    Unit,
    UnitOwner,
    apply_acks,
)
from wiremq.modules.runtime import Runtime, Timer
from wiremq.modules.sender import TransactionOwner
from wiremq.stores.api import QUEUE_PREFIX, Committed, MessageStore, StoreTransaction
from wiremq.stores.durable import SubscriptionKey
from wiremq.stores.records import StoredMessage

if TYPE_CHECKING:
    from wiremq.modules.persistence.store import Persistence

log = structlog.get_logger("wiremq.xa")

# The queue log that holds prepared branches: a name no client can use.
PREPARED_AREA = QUEUE_PREFIX + "\x1fxa-prepared"
XID_HEADER = "xa-xid"  # in each record of the area: the branch it belongs to
ROLE_HEADER = "xa-role"  # branch (its record), send (a message it sends), acked
DESTINATION_HEADER = "xa-destination"  # where a message goes (send) or came from (acked)
EXPIRES_HEADER = "xa-expires"  # its expiry (records in the area never expire)
_RECORD_HEADERS = frozenset({XID_HEADER, ROLE_HEADER, DESTINATION_HEADER, EXPIRES_HEADER})
# Printable ASCII but space and comma (RECOVER lists XIDs separated by commas).
_XID = re.compile(r"[\x21-\x2b\x2d-\x7e]{1,512}")


class State(Enum):
    ACTIVE = "active"  # a connection is associated with it: its SENDs and ACKs join it
    IDLE = "idle"  # ended: waiting for the coordinator's prepare, commit or rollback
    PREPARING = "preparing"  # its prepared state is being stored
    PREPARED = "prepared"  # stored as prepared: it survives anything until committed
    COMMITTING = "committing"  # its second phase runs
    ROLLING_BACK = "rolling back"  # its prepared state is being removed


@dataclass(eq=False)
class Branch(Transaction):
    """One XA branch (its ``name`` is its XID)."""

    xa = True

    timeout: float = 0.0  # seconds from its start
    state: State = State.ACTIVE
    on_dropped: Callable[[Branch], None] | None = None  # the controller forgets it
    timer: Timer | None = None
    # Once prepared: the positions of its records in the area, the stored copies of the
    # queue messages it acknowledged there (by position), its durable subscribers'
    # acknowledgements, and what the acknowledgements took from live consumers.
    records: list[int] = field(default_factory=list)
    acked: dict[int, StoredMessage] = field(default_factory=dict)
    durable: StoreTransaction = field(default_factory=StoreTransaction)
    taken: Taken = field(default_factory=list)

    def candidate(self, now: float) -> Candidate:
        prepared = self.state not in (State.ACTIVE, State.IDLE)
        timed_out = not prepared and now >= self.started + self.timeout
        return Candidate(
            id(self), True, self.nbytes, len(self.messages), self.started, prepared, timed_out
        )

    def dropped(self) -> None:
        if self.on_dropped is not None:
            self.on_dropped(self)


class XAController:
    """XA branches by XID: their states, timeouts and prepared state in the store."""

    def __init__(
        self,
        settings: XASettings,
        transactions: TransactionManager,
        persistence: Persistence | None,
        destinations: Destinations,
        submit: Callable[[str, Batch], None],
        runtime: Runtime,
    ) -> None:
        """``submit(domain, batch)`` starts messages down a pipeline (rolled-back
        acknowledged messages go to their queues again that way)."""
        self.settings = settings
        self.transactions = transactions
        self.persistence = persistence
        self.destinations = destinations
        self.submit = submit
        self.runtime = runtime
        self.branches: dict[str, Branch] = {}
        # Branches rolled back by the server (timeout, discard), remembered for one more
        # default timeout so that their coordinator's prepare or commit is told why.
        self.outcomes: dict[str, Refused] = {}

    # -- association ---------------------------------------------------------------------

    def start(self, owner: TransactionOwner, xid: str, timeout_text: str | None) -> None:
        """``BEGIN xa:start``: a new branch on this connection."""
        _check_xid(xid)
        timeout = self._timeout(timeout_text)
        if xid in self.branches:
            raise Refused("duplicate XID", f"XA branch {xid!r} exists already")
        branch = Branch(xid, owner, self.runtime.monotonic(), timeout=timeout)
        branch.on_dropped = self._rolled_back
        self.transactions.associate(owner, branch)
        self.transactions.memory.opened(branch)
        self.branches[xid] = branch
        self.outcomes.pop(xid, None)
        branch.timer = self.runtime.call_later(timeout, lambda: self._timed_out(branch))

    def _timeout(self, text: str | None) -> float:
        if text is None:
            return self.settings.defaulttimeout
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if not 0 < value <= 30 * 86400:
            raise Refused(
                "invalid xa-timeout header", f"xa-timeout {text[:64]!r} is not 0 to 30 days in s"
            )
        return value

    def join(self, owner: TransactionOwner, xid: str) -> None:
        """``BEGIN xa:join``: associate this connection with an ended branch."""
        branch = self._existing(xid)
        if branch.state is not State.IDLE:
            raise _protocol(branch, "only an ended branch can be joined")
        self.transactions.associate(owner, branch)
        branch.state = State.ACTIVE

    def end(self, owner: TransactionOwner, xid: str) -> None:
        """``COMMIT xa:end``: the connection leaves the branch; it waits for its
        coordinator (and still times out)."""
        branch = self._existing(xid)
        if branch.owner is not owner:
            raise _protocol(branch, "this connection is not associated with it")
        self.transactions.dissociate(branch)
        branch.state = State.IDLE

    def _existing(self, xid: str) -> Branch:
        """The branch, or the refusal saying it was rolled back or never existed."""
        branch = self.branches.get(xid)
        if branch is not None:
            return branch
        outcome = self.outcomes.get(xid)
        if outcome is not None:
            raise outcome
        raise Refused("unknown XID", f"there is no XA branch {xid!r} (XAER_NOTA)")

    def _ended(self, owner: TransactionOwner, xid: str) -> Branch:
        """The branch, ended by this connection if it was still on it; refused if another
        connection is on it, or if it was discarded (then it is over)."""
        branch = self._existing(xid)
        if branch.owner is not None and branch.owner is not owner:
            raise _protocol(branch, "another connection is associated with it: end it there")
        if branch.owner is owner:
            self.transactions.dissociate(branch)
            branch.state = State.IDLE
        if branch.discarded is not None:
            self._rolled_back(branch)
            raise branch.discarded
        return branch

    # -- prepare ---------------------------------------------------------------------------

    def prepare(
        self,
        owner: TransactionOwner,
        xid: str,
        done: Callable[[], None],
        failed: Callable[[Refused], None],
    ) -> None:
        """``COMMIT xa:prepare``: store the branch as prepared; ``done`` once it is."""
        branch = self._ended(owner, xid)
        if branch.state is not State.IDLE:
            raise _protocol(branch, f"it is {branch.state.value}")
        self._cancel_timer(branch)
        branch.state = State.PREPARING
        changes, taken = apply_acks(branch.acks)
        branch.acks = []
        branch.taken = taken
        merged = StoreTransaction.merged(changes)
        by_position = {(m.destination, m.store_seq): m for _, ms in taken for m in ms}
        now_ms = self.runtime.now_ms()
        moves = tuple(
            (position, _record(by_position[position].to_stored(now_ms), xid, "acked"))
            for position in merged.removals
        )
        branch.durable = StoreTransaction(
            acknowledgements=merged.acknowledgements,
            single_acknowledgements=merged.single_acknowledgements,
        )
        durable_taken = [
            (s.durable_key, m.store_seq)
            for s, ms in taken
            if s.durable_key is not None
            for m in ms
            if m.store_seq
        ]
        appends = (
            _branch_record(xid, branch.durable, durable_taken),
            *(_record(m.to_stored(now_ms), xid, "send") for m in branch.messages),
        )
        stored = StoreTransaction(appends=appends, moves=moves)

        def prepared(result: Committed) -> None:
            branch.records = [seq for seq in result.positions if seq]
            branch.acked = {
                seq: copy for seq, (_, copy) in zip(result.moved, moves, strict=True) if seq
            }
            branch.records += branch.acked
            branch.state = State.PREPARED
            log.info("xa.prepared", xid=xid, messages=len(branch.messages), acks=len(taken))
            done()

        def not_stored(error: Exception) -> None:
            refusal = Refused(
                "transaction rolled back", f"XA branch {xid!r} could not be prepared: {error}"
            )
            self._give_back(branch, None)
            self._rolled_back(branch, refusal)
            failed(refusal)

        if self.persistence is None:
            prepared(Committed(positions=(0,) * len(appends), moved=(None,) * len(moves)))
        else:
            self.persistence.commit(stored, prepared, not_stored)

    # -- commit ----------------------------------------------------------------------------

    def commit(
        self,
        owner: TransactionOwner,
        xid: str,
        one_phase: bool,
        told: UnitOwner,
        receipt: str | None,
    ) -> None:
        """``COMMIT xa:commit`` (a prepared branch) or ``xa:onephase`` (one not prepared):
        committed as a ``Unit`` (``TransactionManager.commit``); ``told`` hears how it
        ended, with ``receipt``."""
        branch = self._ended(owner, xid)
        if one_phase:
            if branch.state is not State.IDLE:
                raise _protocol(branch, f"it is {branch.state.value}: xa:commit commits it")
            self._cancel_timer(branch)
            self._forget(branch)
            self.transactions.commit(branch, told, receipt)
            return
        if branch.state is not State.PREPARED:
            raise _protocol(branch, f"it is {branch.state.value}: xa:commit needs it prepared")
        branch.state = State.COMMITTING
        # Its records leave the area and its durable acknowledgements are stored in the
        # same store transaction that appends its messages.
        changes = replace(
            branch.durable, removals=tuple((PREPARED_AREA, seq) for seq in branch.records)
        )
        second_phase = Transaction(xid, None, branch.started, self._messages(branch))
        self.transactions.commit(second_phase, _SecondPhase(self, branch, told), receipt, changes)

    def _messages(self, branch: Branch) -> list[Message]:
        """The branch's messages as they go on: those it holds, or, recovered after a
        restart, made again from its records."""
        for message in branch.messages:
            if message.target is None:
                message.target = self.destinations.resolve(message.destination)
        return branch.messages

    # -- rollback --------------------------------------------------------------------------

    def rollback(
        self,
        owner: TransactionOwner,
        xid: str,
        done: Callable[[], None],
        failed: Callable[[Refused], None],
    ) -> None:
        """``ABORT``: roll the branch back; ``done`` once it is (stored, if prepared)."""
        branch = self.branches.get(xid)
        if branch is None and xid in self.outcomes:
            del self.outcomes[xid]  # rolled back already: the coordinator heard of it now
            done()
            return
        branch = self._existing(xid)
        if branch.owner is not None and branch.owner is not owner:
            raise _protocol(branch, "another connection is associated with it: end it there")
        if branch.state in (State.ACTIVE, State.IDLE):
            self.transactions.end(branch)
            self.transactions.journal.discarded(branch.messages, TRANSACTION_ABORTED)
            self._cancel_timer(branch)
            self._forget(branch)
            log.info("xa.rolled_back", xid=xid)
            done()
            return
        if branch.state is not State.PREPARED:
            raise _protocol(branch, f"it is {branch.state.value}")
        branch.state = State.ROLLING_BACK
        moves = tuple(((PREPARED_AREA, seq), _original(copy)) for seq, copy in branch.acked.items())
        removals = tuple((PREPARED_AREA, seq) for seq in branch.records if seq not in branch.acked)

        def stored(result: Committed) -> None:
            back = [
                Message.from_stored(copy, seq)
                for (_, copy), seq in zip(moves, result.moved, strict=True)
                if seq
            ]
            self.transactions.journal.discarded(branch.messages, TRANSACTION_ABORTED)
            self._give_back(branch, back)
            self._forget(branch)
            log.info("xa.rolled_back", xid=xid, prepared=True)
            done()

        def not_stored(error: Exception) -> None:
            branch.state = State.PREPARED
            failed(Refused("rollback failed", f"XA branch {xid!r} stays prepared: {error}"))

        if self.persistence is None:
            stored(Committed(moved=(None,) * len(moves)))
        else:
            self.persistence.commit(
                StoreTransaction(removals=removals, moves=moves), stored, not_stored
            )

    def _give_back(self, branch: Branch, moved_back: list[Message] | None) -> None:
        """What the branch's acknowledgements took goes back to its consumers' destinations,
        flagged redelivered. ``moved_back``: the stored queue messages moved back from the
        area (a rollback of a prepared branch), which go to their queues down the
        pipeline at their new positions; the rest goes back as a NACK would send it."""
        persistence = self.persistence
        for subscription, messages in branch.taken:
            self.transactions.journal.unacknowledged(subscription, messages)
            destination = subscription.destination
            if moved_back is not None and destination.domain == P2P:
                messages = [m for m in messages if not m.store_seq]
            key = subscription.durable_key
            stored = [m.store_seq for m in messages if m.store_seq]
            if key is not None and stored and persistence is not None:
                persistence.acked_beyond.get(key, set()).difference_update(stored)
                # Its acknowledged position may not stay past what comes back to it.
                subscription.acked_position = min(subscription.acked_position, min(stored) - 1)
            if messages:  # those not moved back: their acknowledgement is undone
                destination.count("acknowledged", messages, undone=True)
                destination.rejected(subscription, messages, requeue=True)
        branch.taken = []
        if moved_back:
            for message in moved_back:
                message.mark_redelivered()
            self.submit(P2P, GivenBack(moved_back))

    # -- the server's own rollbacks --------------------------------------------------------

    def _timed_out(self, branch: Branch) -> None:
        branch.timer = None
        if branch.state in (State.ACTIVE, State.IDLE) and branch.discarded is None:
            self.transactions.memory.discards["timeout"] += 1
            self.transactions.discard(
                branch,
                Refused(
                    "transaction rolled back",
                    f"XA branch {branch.name!r} was not prepared within its timeout of "
                    f"{branch.timeout:g} s (XA_RBTIMEOUT)",
                ),
            )

    def _rolled_back(self, branch: Branch, refusal: Refused | None = None) -> None:
        """The branch was dropped: discarded (memory, timeout), its connection gone while
        on it, or its prepare failed (``refusal``). A discarded branch a connection is on
        stays, rollback-only, until that connection ends it; otherwise nothing of it
        remains but, for a while, why (its coordinator's prepare or commit is told)."""
        self._cancel_timer(branch)
        if branch.owner is not None:
            return
        self._forget(branch)
        reason = refusal or branch.discarded
        if reason is None:
            reason = Refused(
                "transaction rolled back",
                f"XA branch {branch.name!r}: its connection closed while on it",
            )
        self.outcomes[branch.name] = reason
        self.runtime.call_later(
            self.settings.defaulttimeout, lambda: self.outcomes.pop(branch.name, None)
        )

    def _forget(self, branch: Branch) -> None:
        if self.branches.get(branch.name) is branch:
            del self.branches[branch.name]
        self.transactions.memory.released(branch)

    def _cancel_timer(self, branch: Branch) -> None:
        if branch.timer is not None:
            branch.timer.cancel()
            branch.timer = None

    # -- recovery --------------------------------------------------------------------------

    def recover(self) -> list[str]:
        """The XIDs of the prepared branches, in order."""
        return sorted(x for x, b in self.branches.items() if b.state is State.PREPARED)

    def restore(self, store: MessageStore) -> int:
        """Make the prepared branches the store holds (at start-up, before any client);
        returns how many. Replays of durable subscribers skip what they acknowledged."""
        batch = store.read(PREPARED_AREA, now_ms=0, after_seq=0, limit=1 << 40, max_bytes=1 << 62)
        records: dict[str, list[tuple[int, StoredMessage]]] = {}
        for seq, stored in batch.messages:
            headers = dict(stored.headers)
            records.setdefault(headers.get(XID_HEADER, ""), []).append((seq, stored))
        for xid, found in records.items():
            self._restore_branch(xid, found)
        if self.branches:
            log.info("xa.recovered", prepared=len(self.branches))
        return len(self.branches)

    def _restore_branch(self, xid: str, records: list[tuple[int, StoredMessage]]) -> None:
        branch = Branch(xid, None, self.runtime.monotonic(), state=State.PREPARED)
        branch.on_dropped = self._rolled_back
        durable_taken: list[tuple[SubscriptionKey, int]] = []
        for seq, stored in records:
            headers = dict(stored.headers)
            role = headers[ROLE_HEADER]
            branch.records.append(seq)
            if role == "branch":
                described = json.loads(stored.body)
                branch.durable = StoreTransaction(
                    acknowledgements=tuple(
                        ((c, n), s) for c, n, s in described["acknowledgements"]
                    ),
                    single_acknowledgements=tuple(
                        ((c, n), s) for c, n, s in described["single_acknowledgements"]
                    ),
                )
                durable_taken = [((c, n), s) for c, n, s in described["durable_taken"]]
            elif role == "send":  # not in its destination's store yet: stored at COMMIT
                branch.messages.append(Message.from_stored(_original(stored), 0))
            else:
                branch.acked[seq] = stored
        if self.persistence is not None:
            for key, seq in durable_taken:
                self.persistence.acked_beyond.setdefault(key, set()).add(seq)
        self.branches[xid] = branch
        self.transactions.memory.opened(branch)
        self.transactions.memory.add(branch, sum(m.size for m in branch.messages))

    def state(self) -> dict[str, object]:
        by_state: dict[str, int] = {}
        for branch in self.branches.values():
            by_state[branch.state.value] = by_state.get(branch.state.value, 0) + 1
        return {"branches": by_state, "rolled_back_remembered": len(self.outcomes)}


class _SecondPhase:
    """Told how a prepared branch's COMMIT ended: the branch goes once its store
    transaction is applied; if nothing of it was applied, it stays prepared."""

    def __init__(self, controller: XAController, branch: Branch, told: UnitOwner) -> None:
        self.controller = controller
        self.branch = branch
        self.told = told

    def unit_completed(self, unit: Unit) -> None:
        self._finished(unit)
        self.told.unit_completed(unit)

    def unit_failed(self, unit: Unit, refusal: Refused) -> None:
        self._finished(unit)
        self.told.unit_failed(unit, refusal)

    def _finished(self, unit: Unit) -> None:
        branch = self.branch
        if unit.stored:
            self.controller._forget(branch)
            log.info("xa.committed", xid=branch.name, messages=len(unit.messages))
        else:
            branch.state = State.PREPARED


def _check_xid(xid: str) -> None:
    if not _XID.fullmatch(xid):
        raise Refused(
            "invalid XID",
            "an XID is 1 to 512 printable ASCII characters without spaces or commas",
        )


def _protocol(branch: Branch, why: str) -> Refused:
    return Refused("XA protocol error", f"XA branch {branch.name!r}: {why} (XAER_PROTO)")


def _record(stored: StoredMessage, xid: str, role: str) -> StoredMessage:
    """A message as the area keeps it for a branch: never expiring, saying where it goes
    (or came from)."""
    return replace(
        stored,
        destination=PREPARED_AREA,
        headers=(
            *stored.headers,
            (XID_HEADER, xid),
            (ROLE_HEADER, role),
            (DESTINATION_HEADER, stored.destination),
            (EXPIRES_HEADER, str(stored.expires)),
        ),
        expires=0,
    )


def _original(record: StoredMessage) -> StoredMessage:
    """The message a record of the area keeps, as it was."""
    headers = dict(record.headers)
    return replace(
        record,
        destination=headers[DESTINATION_HEADER],
        headers=tuple((k, v) for k, v in record.headers if k not in _RECORD_HEADERS),
        expires=int(headers[EXPIRES_HEADER]),
    )


def _branch_record(
    xid: str, durable: StoreTransaction, durable_taken: list[tuple[SubscriptionKey, int]]
) -> StoredMessage:
    described = {
        "acknowledgements": [[c, n, s] for (c, n), s in durable.acknowledgements],
        "single_acknowledgements": [[c, n, s] for (c, n), s in durable.single_acknowledgements],
        "durable_taken": [[c, n, s] for (c, n), s in durable_taken],
    }
    return StoredMessage(
        f"xa-branch:{xid}",
        PREPARED_AREA,
        ((XID_HEADER, xid), (ROLE_HEADER, "branch")),
        json.dumps(described).encode(),
    )
