"""The journal's record kinds, and how a record becomes JSON Lines.

A hook (``recorder.py``) adds a record ``(kind, slot2, slot3, ...)`` naming the
objects concerned (a message, a subscription, a list of messages) to its
journal's ``Recorder``, which writes it at once, in C (``_encode.c``), at the time
now: one line per event, and a record that names a list of messages one line per
message (the SENDs of one read, the messages one write put on a socket). Each
kind has a plan, derived here from the schema, so that every field of every event
has exactly one place it is read from. ``encode`` writes a batch of whole records
``(kind, ts, ...)`` the same way (tests, and the bench's generated journals).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from wiremq.modules.journal import _encode, schema

# The value types of the C encoder.
STR, INT, BOOL, MS, LEN = range(5)
_BY_SCHEMA_TYPE = {schema.STRING: STR, schema.LONG: INT, schema.BOOLEAN: BOOL}

ITEM = -1  # the slot of the element a record is expanded over


@dataclass(frozen=True, slots=True)
class From:
    """Where a field's value is read: a record slot, then attributes (str) and tuple
    indexes (int); ``type`` when it is not the schema's own (a length, seconds)."""

    slot: int
    path: tuple[str | int, ...] = ()
    type: int | None = None


@dataclass(frozen=True, slots=True)
class Const:
    """A field whose value is the same in every line of a kind."""

    value: object


Source = From | Const | None  # None: the field does not apply to this kind


def message_at(slot: int) -> dict[str, Source]:
    """The message fields of a ``Message`` in ``slot``."""
    return {
        "message_id": From(slot, ("message_id",)),
        "destination": From(slot, ("destination",)),
        "size": From(slot, ("size",)),
        "persistent": From(slot, ("persistent",)),
        "expires": From(slot, ("expires",)),
        "seq": From(slot, ("store_seq",)),
    }


def stored_at(slot: int) -> dict[str, Source]:
    """The message fields of a ``(position, StoredMessage)`` in ``slot``."""
    return {
        "message_id": From(slot, (1, "message_id")),
        "destination": From(slot, (0, 0)),
        "size": From(slot, (1, "body"), LEN),
        "persistent": Const(True),
        "expires": From(slot, (1, "expires")),
        "seq": From(slot, (0, 1)),
    }


def subscription_at(slot: int) -> dict[str, Source]:
    """The fields of a ``Subscription`` in ``slot``."""
    return {
        "session": From(slot, ("session_id",)),
        "subscription": From(slot, ("sub_id",)),
        "ack": From(slot, ("ack_mode",)),
    }


@dataclass(frozen=True, slots=True)
class Kind:
    """One shape of hook record and the event it is written as."""

    event: str
    sources: dict[str, Source]
    expand: int = -1  # the slot of a list to write one line per element of
    plan: tuple[Any, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "plan", self._plan())

    def _plan(self) -> tuple[Any, ...]:
        """(head, expand, destination op, ops) for ``_encode.encode``."""
        event = schema.EVENTS[self.event]
        head = f'{{"v":{schema.SCHEMA_VERSION},"event":"{event.name}"'
        ops: list[tuple[bytes, int, tuple[str | int, ...], int]] = [(b',"ts":', 1, (), MS)]
        destination_op = -1
        for name in event.fields:
            if name not in self.sources:
                raise ValueError(f"journal kind {self.event}: no source for field {name!r}")
            source = self.sources[name]
            if isinstance(source, Const):
                head += f',"{name}":{json.dumps(source.value)}'
            elif isinstance(source, From):
                if name == "destination":
                    destination_op = len(ops)
                kind = _BY_SCHEMA_TYPE[schema.FIELD_TYPES[name]]
                ops.append(
                    (
                        f',"{name}":'.encode(),
                        source.slot,
                        source.path,
                        kind if source.type is None else source.type,
                    )
                )
        return (head.encode(), self.expand, destination_op, tuple(ops))


_KINDS: list[Kind] = []


def _kind(event: str, expand: int = -1, /, **sources: Source) -> int:
    _KINDS.append(Kind(event, sources, expand))
    return len(_KINDS) - 1


# -- the record kinds: (kind, ts, slot 2, slot 3, ...) ---------------------------------------
# (kind, ts, server id)
SERVER_STARTED = _kind("server_started", server=From(2))
SERVER_STOPPED = _kind("server_stopped", server=From(2))
# (kind, ts, messages)
RECEIVED = _kind("received", 2, **message_at(ITEM))
# (kind, ts, messages, store)
STORED = _kind("stored", 2, **message_at(ITEM), store=From(3))
# (kind, ts, subscription, message)
DELIVERED = _kind("delivered", **message_at(3), **subscription_at(2))
REDELIVERED = _kind("redelivered", **message_at(3), **subscription_at(2))
# (kind, ts, subscription, messages)
ACKNOWLEDGED = _kind("acknowledged", 3, **message_at(ITEM), **subscription_at(2))
CONSUMED = _kind(
    "consumed",
    3,
    **message_at(ITEM),
    **subscription_at(2),
    redelivered=From(ITEM, ("redelivered",)),
)
# (kind, ts, subscription, messages, requeue)
NACKED = _kind("nacked", 3, **message_at(ITEM), **subscription_at(2), requeue=From(4))
# (kind, ts, subscription, messages, reason)
REQUEUED = _kind("requeued", 3, **message_at(ITEM), **subscription_at(2), reason=From(4))
UNACKNOWLEDGED = _kind(
    "unacknowledged", 3, **message_at(ITEM), **subscription_at(2), reason=From(4)
)
DISCARDED_FOR = _kind("discarded", 3, **message_at(ITEM), **subscription_at(2), reason=From(4))
# (kind, ts, messages, reason)
DISCARDED = _kind(
    "discarded", 2, **message_at(ITEM), session=None, subscription=None, reason=From(3)
)
REFUSED = _kind("refused", 2, **message_at(ITEM), reason=From(3))
# (kind, ts, [(position, stored message)], reason)
DISCARDED_STORED = _kind(
    "discarded", 2, **stored_at(ITEM), session=None, subscription=None, reason=From(3)
)
# (kind, ts, messages, to)
MOVED = _kind("moved", 2, **message_at(ITEM), to=From(3))
# (kind, ts, [(position, stored message)], to)
MOVED_STORED = _kind("moved", 2, **stored_at(ITEM), to=From(3))
# (kind, ts, messages, store, dmq, run)
EXPIRED = _kind("expired", 2, **message_at(ITEM), store=From(3), dmq=From(4), run=From(5))
# (kind, ts, messages, dmq, reason)
DEAD_LETTERED = _kind("dead_lettered", 2, **message_at(ITEM), dmq=From(3), reason=From(4))
# (kind, ts, [(position, stored message)], store, dmq, run)
EXPIRED_STORED = _kind("expired", 2, **stored_at(ITEM), store=From(3), dmq=From(4), run=From(5))
# (kind, ts, [(position, stored message)], store, run)
REMOVED_STORED = _kind("removed", 2, **stored_at(ITEM), store=From(3), run=From(4))
# (kind, ts, messages, store, run)
REMOVED = _kind("removed", 2, **message_at(ITEM), store=From(3), run=From(4))
# (kind, ts, [(position, stored message)], dmq, reason)
DEAD_LETTERED_STORED = _kind("dead_lettered", 2, **stored_at(ITEM), dmq=From(3), reason=From(4))
# (kind, ts, store, run, interval ms, transaction time ms, transaction size)
CLEANUP_STARTED = _kind(
    "cleanup_started",
    store=From(2),
    run=From(3),
    interval=From(4),
    transaction_time=From(5),
    transaction_size=From(6),
)
# (kind, ts, store, run, scanned, removed)
CLEANUP_ENDED = _kind("cleanup_ended", store=From(2), run=From(3), scanned=From(4), removed=From(5))
# (kind, ts, topic, durable)
SUBSCRIPTION_REMOVED = _kind("subscription_removed", destination=From(2), durable=From(3))

KINDS = tuple(_KINDS)
PLANS = _encode.compile(tuple(kind.plan for kind in KINDS))


@dataclass(frozen=True, slots=True)
class DestinationSwitch:
    """Which destinations are journaled: ``default``, except the ``exceptions`` (the
    destinations whose own ``Destination.journal`` says otherwise)."""

    default: bool
    exceptions: frozenset[str]


def _exceptions(switch: DestinationSwitch) -> frozenset[str] | None:
    """The encoder's destinations to look up (None: every line is written)."""
    return switch.exceptions if switch.exceptions or not switch.default else None


def encode(records: list[tuple[Any, ...]], switch: DestinationSwitch) -> bytes:
    """The JSON Lines of a batch of whole records ``(kind, ts, ...)`` (ts in seconds), less
    the lines of destinations whose journal is switched off."""
    return _encode.encode(PLANS, records, switch.default, _exceptions(switch))


def recorder(switch: DestinationSwitch) -> Any:
    """A ``Recorder``: ``add(kind, slot2, ...)`` writes a record at the time now, ``take()``
    returns the bytes written since the last take, ``lines`` counts their lines."""
    return _encode.Recorder(PLANS, switch.default, _exceptions(switch))
