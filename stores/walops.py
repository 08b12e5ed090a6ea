"""What one write-ahead log record says: the operations of one ``commit``, fully resolved.

``WalStore.commit`` decides everything against its in-memory state (each
appended message's position, which removals find a message, where a new
subscription starts, which topic messages every subscriber has passed) and
writes the outcome as plain operations. Applying them to ZODB later needs no
decision at all, so that ZODB ends up exactly as the in-memory state was,
whenever and in whatever batches the catch-up applies them.

A record's payload is one pickle (protocol 5) of ``(transactions, ops)``:
how many ``StoreTransaction``s the commit held, and the operations in the
order they were decided, each a tuple that starts with its code:

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
from typing import Any

from .api import QUEUE_PREFIX

APPEND = 0
REMOVE = 1
COLLECT = 2
CLEAR = 3
SUBSCRIBE = 4
UNSUBSCRIBE = 5
ACKNOWLEDGE = 6
ACKNOWLEDGE_SINGLE = 7

Op = tuple[Any, ...]


def encode(transactions: int, ops: list[Op]) -> bytes:
    """A record's payload (pickling may raise for a message that cannot be stored)."""
    return pickle.dumps((transactions, tuple(ops)), protocol=5)


def decode(payload: bytes | memoryview) -> tuple[int, tuple[Op, ...]]:
    transactions, ops = pickle.loads(payload)
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
