"""A message read back from a store (``Message.from_stored``) is the one that was sent: its
delivery mode from its headers, its timestamp and expiry as they were."""

from __future__ import annotations

from wiremq.modules.flow.egress_queues import EgressQueue
from wiremq.modules.message import Message

RECEIVED = 1_700_000_000_123  # ms since 1970


def _sent(headers: dict[str, str]) -> Message:
    message = Message("m-1", "/queue/q", headers, b"body", expires=RECEIVED + 60_000)
    message.timestamp = RECEIVED
    return message


def test_a_stored_persistent_message_comes_back_persistent_at_its_position():
    sent = _sent({"destination": "/queue/q", "persistent": "true", "class-of-service": "3"})
    back = Message.from_stored(sent.to_stored(now_ms=RECEIVED + 5), 42)
    assert back.persistent
    assert back.egress_queue is EgressQueue.G1
    assert back.store_seq == 42
    assert back.timestamp == RECEIVED
    assert back.expires == RECEIVED + 60_000
    assert back.headers == {"persistent": "true", "class-of-service": "3"}


def test_a_stored_non_persistent_message_comes_back_non_persistent_with_its_timestamp():
    """An XA branch's record keeps a non-persistent SEND until the branch is committed."""
    sent = _sent({"destination": "/queue/q", "class-of-service": "2", "receipt": "r"})
    back = Message.from_stored(sent.to_stored(now_ms=RECEIVED + 5), 0)
    assert not back.persistent
    assert back.egress_queue is EgressQueue.D2
    assert back.store_seq == 0
    assert back.timestamp == RECEIVED
