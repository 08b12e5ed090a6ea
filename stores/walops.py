"""What one write-ahead log record says: the operations of one ``commit``, fully resolved.

``WalStore.commit`` decides everything against its in-memory state (each
appended message's position, which removals find a message, where a new
subscription starts, which topic messages every subscriber has passed) and
writes the outcome as plain operations. Applying them to ZODB later needs no
decision at all, so that ZODB ends up exactly as the in-memory state was,
whenever and in whatever batches the catch-up applies them.

A record's payload is one pickle (protocol 5) of ``(transactions, ops)``:
how many ``StoreTransaction``s the commit held, and the operations in the
order they were decided, each a tuple that starts with its code (below). If
the commit appends large messages (``bodies.OUT_OF_BAND_FROM``), their bodies
follow the pickle out of band, and the payload starts with ``OUT_OF_BAND``,
how many bodies follow (4 bytes) and the length of each (8 bytes each,
big-endian); a plain pickle starts with its protocol opcode (0x80) instead.
The payload is made in parts (``encode``), so that those bodies are written
from the messages' own bytes.

- ``(APPEND, seq, fields)``: a message (``StoredMessage.fields()``, whose
  second item is its destination) stored at position ``seq``.
- ``(REMOVE, destination, seq)``: the message at that position removed.
- ``(COLLECT, topic, upto)``: every message of ``topic`` at or below ``upto``
  removed (all its durable subscribers have passed them).
- ``(CLEAR, topic)``: every message of ``topic`` removed (its last durable
  subscription went).
- ``(SUBSCRIBE, client_id, name, topic, selector, acked_seq)``: a durable
  subscription created at position ``acked_seq``.
- ``(UNSUBSCRIBE, client_id, name)``: a durable subscription forgotten.
- ``(ACKNOWLEDGE, client_id, name, seq)``: a durable subscription's position
  moved forward to ``seq`` (the single acknowledgements it passes are dropped).
- ``(ACKNOWLEDGE_SINGLE, client_id, name, seq)``: the message at ``seq``, past
  the subscription's position, acknowledged on its own.

Operations on ``/queue/`` destinations go to the queue store, all others to
the topic store.
"""

from __future__ import annotations

import pickle
import struct
from typing import Any

from .api import QUEUE_PREFIX
from .bodies import BODY, OUT_OF_BAND_FROM, dumps, loads, out_of_band

APPEND = 0
REMOVE = 1
COLLECT = 2
CLEAR = 3
SUBSCRIBE = 4
UNSUBSCRIBE = 5
ACKNOWLEDGE = 6
ACKNOWLEDGE_SINGLE = 7

Op = tuple[Any, ...]

OUT_OF_BAND = b"O"  # the first byte of a payload with bodies after its pickle
_COUNT = struct.Struct(">I")


def encode(transactions: int, ops: list[Op]) -> tuple[bytes, ...]:
    """A record's payload in parts: the pickle, then the large bodies out of band (pickling
    may raise for a message that cannot be stored)."""
    for op in ops:  # a loop, no call per message: this runs for every commit
        if op[0] == APPEND and len(op[2][BODY]) >= OUT_OF_BAND_FROM:
            return _out_of_band(transactions, ops)
    return (pickle.dumps((transactions, tuple(ops)), protocol=5),)


def _out_of_band(transactions: int, ops: list[Op]) -> tuple[bytes, ...]:
    marked = tuple((op[0], op[1], out_of_band(op[2])) if op[0] == APPEND else op for op in ops)
    data, bodies = dumps((transactions, marked))
    lengths = struct.pack(f">I{len(bodies)}Q", len(bodies), *(len(b) for b in bodies))
    return (OUT_OF_BAND + lengths + data, *bodies)


def decode(payload: bytes) -> tuple[int, tuple[Op, ...]]:
    """What ``encode`` made, its parts one after the other."""
    if payload[:1] != OUT_OF_BAND:
        transactions, ops = pickle.loads(payload)
        return transactions, ops
    (count,) = _COUNT.unpack_from(payload, 1)
    lengths = struct.unpack_from(f">{count}Q", payload, 1 + _COUNT.size)
    start, end = 1 + _COUNT.size + 8 * count, len(payload) - sum(lengths)
    bodies, at = [], end
    for length in lengths:
        bodies.append(payload[at : at + length])
        at += length
    with memoryview(payload) as view:
        transactions, ops = loads(view[start:end], bodies)
    return transactions, ops


def split(ops: tuple[Op, ...]) -> tuple[list[Op], list[Op]]:
    """The operations for the queue store and those for the topic store, each in order."""
    queues: list[Op] = []
    topics: list[Op] = []
    for op in ops:
        code = op[0]
        destination = op[2][1] if code == APPEND else op[1] if code == REMOVE else ""
        (queues if destination.startswith(QUEUE_PREFIX) else topics).append(op)
    return queues, topics
