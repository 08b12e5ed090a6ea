"""A message inside the server: what the pipeline carries and destinations deliver.

The MESSAGE frame's bytes after the ``subscription`` line are the same for every
subscriber, so they are encoded once per message (per STOMP version, whose header
escaping differs) and shared by every delivery; a delivery only prepends its own
short head.
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from wiremq.modules._message import bind as bind_message
from wiremq.modules._message import passes_through as passes_through
from wiremq.modules._message import plain_admitted as plain_admitted
from wiremq.modules._message import plain_arrivals as plain_arrivals
from wiremq.modules._message import plain_entries as plain_entries
from wiremq.modules._message import shared_target as shared_target
from wiremq.modules._message import take_sends as take_sends
from wiremq.modules._message import waiting_runs as waiting_runs
from wiremq.modules.flow.egress_queues import EgressQueue
from wiremq.modules.stomp.encoder import escaped_message_tail, plain_message_tail
from wiremq.stores.records import JMS_DEFAULT_PRIORITY, StoredMessage

if TYPE_CHECKING:
    from wiremq.config.groups import DestinationPolicy
    from wiremq.modules.errors import Refused
    from wiremq.modules.flow.watermarks import Producer, Watermark
    from wiremq.modules.runtime import Answer
    from wiremq.modules.sender import Sender

# Headers of a SEND that describe the SEND itself, not the message.
FRAME_ONLY_HEADERS = frozenset(
    {"destination", "receipt", "transaction", "content-length", "message-id", "subscription", "ack"}
)
CLASS_OF_SERVICE = "class-of-service"
PRIORITY = "priority"
GROUP = "JMSXGroupID"
MAX_PRIORITY = 9
DELIVERY_COUNT = "x-delivery-count"  # on a redelivery: how many deliveries came before
# The egress queue of a non-persistent message, by its class-of-service header.
BY_CLASS_OF_SERVICE = {"1": EgressQueue.D1, "2": EgressQueue.D2, "3": EgressQueue.D3}
# A message's wire tails before any is encoded (``Message.wire``): shared, so never changed
# (a Mapping to the type checker; ``wire_tail`` makes a new dict to add one).
NO_TAILS: Mapping[str, bytes] = {}


def priority_of(text: str) -> int:
    """JMS priority 0..9 from a ``priority`` header; the default when it is not one."""
    if text.isascii() and text.isdigit() and int(text) <= MAX_PRIORITY:
        return int(text)
    return JMS_DEFAULT_PRIORITY


class MessageWaiter(Protocol):
    """Who waits for the pipeline to be done with a message: the session that sent it
    (its receipt waits), or the committed transaction it belongs to. Told once per
    message, of several at once in the order they were sent."""

    def messages_completed(self, messages: list[Message]) -> None: ...
    def message_refused(self, message: Message, refusal: Refused) -> None: ...
    def early_answer(self, receipt: str) -> Answer | None:
        """The receipt of a message about to be synced, held for the log writer to send
        (``modules/runtime.Answer``), or None if it cannot go that way."""


class StorageStep(Protocol):
    """A pipeline's storage step, as a committed transaction hands back the messages it
    took from it: once the transaction is stored, or when it failed."""

    def unit_stored(self, batch: list[Message], kept: list[Message]) -> None: ...
    def unit_dropped(self, kept: list[Message]) -> None: ...


class CommittedUnit(Protocol):
    """The committed transaction a message belongs to (``pipeline/transaction.Unit``), as
    a storage step sees it: the step hands the message over instead of storing it."""

    def arrive(self, message: Message, step: StorageStep, store: bool) -> None: ...


class Target(Protocol):
    """A message's destination as the pipeline reaches it through the message (a queue or
    a topic: ``destinations/destination.Destination``): admission checks its policy and
    producers, the spool its quotas and store, distribution hands the message to it.
    Admission resolves it; nothing below the pipeline needs more of it."""

    @property
    def name(self) -> str: ...
    @property
    def domain(self) -> str: ...
    @property
    def policy(self) -> DestinationPolicy: ...
    @property
    def producers(self) -> Container[Producer]: ...
    @property
    def fail_when_full(self) -> bool: ...
    @property
    def store_watermark(self) -> Watermark | None: ...
    @property
    def removed(self) -> bool: ...
    def add_producer(self, producer: Producer) -> None: ...
    def enqueue(self, messages: Sequence[Message]) -> None: ...
    def dispatch(self) -> None: ...


class Message:
    """One message: its content, where it goes, who sent it and who waits for it.

    Admission may still set the ``expires`` header and the expiry (``maxttl``); after
    that the content is not changed, but for the redelivery headers (``redelivered_before``,
    which gives it a headers dict of its own).
    """

    # Made in C (``modules/_message.c``, bound below): ``Message(message_id, destination,
    # headers, body, sender=None, waiter=None, expires=0, timestamp=0)`` sets each of these
    # as its comment says.
    message_id: str
    destination: str
    headers: dict[str, str]  # as sent, including the frame-only ones
    body: bytes
    persistent: bool  # its ``persistent`` header is "true"
    expires: int  # ms since the epoch; 0 = never
    store_seq: int  # position in its persistent store, once stored (0 until then)
    arrival: int  # order of arrival in its queue, across delivery modes (0 until then)
    egress_queue: EgressQueue  # delivered through: G-1 if persistent, else D-<cos> (D-1)
    _stored_size: int  # ``stored_size`` once worked out (-1 until then)
    transaction: str | None  # its ``transaction`` header
    receipt: str | None  # its ``receipt`` header
    answered: bool  # its receipt went with its store commit (``early_answers``; False)
    sender: Sender | None  # None: the server's own (given back, moved, read back)
    waiter: MessageWaiter | None  # told when the pipeline is done with it; None once told
    target: Target | None  # resolved by admission (its destination; None until then)
    size: int  # the body's length
    redelivered: bool  # False
    unit: CommittedUnit | None  # the committed transaction it belongs to (None)
    wire: Mapping[str, bytes]  # its tail by STOMP version, once encoded (NO_TAILS)
    timestamp: int  # when the server received it (ms since the epoch)
    # Set by its queue when it needs them (queue.py, levels.py), not when made.
    level: int
    group: str | None
    home: object

    __slots__ = (
        "message_id",
        "destination",
        "headers",
        "body",
        "persistent",
        "expires",
        "store_seq",
        "arrival",
        "egress_queue",
        "_stored_size",
        "transaction",
        "receipt",
        "answered",
        "sender",
        "waiter",
        "target",
        "size",
        "redelivered",
        "unit",
        "wire",
        "timestamp",
        "level",
        "group",
        "home",
    )

    if TYPE_CHECKING:

        def __init__(
            self,
            message_id: str,
            destination: str,
            headers: dict[str, str],
            body: bytes,
            sender: Sender | None = None,
            waiter: MessageWaiter | None = None,
            expires: int = 0,
            timestamp: int = 0,
        ) -> None: ...

        def wire_tail(self, stomp_version: str) -> bytes:
            """The MESSAGE frame after its subscription/ack lines, escaped for
            ``stomp_version``: encoded once per version and kept in ``wire`` (made in C,
            ``_message.c``)."""

    @property
    def user_headers(self) -> list[tuple[str, str]]:
        """Headers passed on to consumers."""
        return [(k, v) for k, v in self.headers.items() if k not in FRAME_ONLY_HEADERS]

    def own_tail(self, stomp_version: str) -> bytes:
        """``wire_tail`` for one delivery alone, not kept with the message: a large
        message's (``workpool``), so that its copy lives only while that delivery waits."""
        tail = self.wire_tail(stomp_version)
        self.wire = NO_TAILS
        return tail

    def expired(self, now_ms: int) -> bool:
        return self.expires != 0 and self.expires <= now_ms

    @property
    def stored_size(self) -> int:
        """Bytes the message takes in a persistent store (``StoredMessage.size``)."""
        size = self._stored_size
        if size < 0:
            size = len(self.body)
            for name, value in self.headers.items():
                if name not in FRAME_ONLY_HEADERS:
                    size += len(name) + len(value) + 2
            self._stored_size = size
        return size

    def to_stored(self, now_ms: int) -> StoredMessage:
        """The message as a persistent store keeps it."""
        return StoredMessage(
            self.message_id,
            self.destination,
            tuple(self.user_headers),
            self.body,
            self.priority,
            self.expires,
            self.timestamp or now_ms,
        )

    @property
    def priority(self) -> int:
        """JMS priority 0..9 from the ``priority`` header; 4 when absent or invalid."""
        text = self.headers.get(PRIORITY)
        return JMS_DEFAULT_PRIORITY if text is None else priority_of(text)

    @property
    def redeliveries(self) -> int:
        """Deliveries that came back unacknowledged (``x-delivery-count``, which the
        server sets on a redelivered message)."""
        if not self.redelivered:
            return 0
        return int(self.headers.get(DELIVERY_COUNT, "0"))

    @classmethod
    def from_stored(cls, stored: StoredMessage, seq: int) -> Message:
        """A message read back from a store, at position ``seq`` of its destination's (0:
        not there yet, an XA branch's SEND). Its delivery mode is the one it was sent with,
        from its ``persistent`` header: every message a destination's store keeps is
        persistent, but a prepared XA branch's record keeps a non-persistent SEND too.
        Its timestamp is when the server first received it."""
        message = cls(
            stored.message_id,
            stored.destination,
            dict(stored.headers),
            stored.body,
            expires=stored.expires,
            timestamp=stored.timestamp,
        )
        message.store_seq = seq
        return message

    def mark_redelivered(self) -> None:
        """It came back unacknowledged after a delivery: its next delivery is flagged
        redelivered and counts the earlier ones (``x-delivery-count``, in a headers dict
        of its own); its cached wire form changes."""
        self.redelivered_before(self.redeliveries + 1)

    def redelivered_before(self, count: int) -> None:
        """Flagged as ``count`` deliveries coming back left it (a message read back from
        the store, which keeps no delivery state)."""
        self.headers = {**self.headers, DELIVERY_COUNT: str(count)}
        self.redelivered = True
        self.wire = NO_TAILS

    def redelivery(self) -> Message:
        """A copy flagged as redelivered, for one subscriber of a message others share."""
        copy = Message(
            self.message_id,
            self.destination,
            self.headers,
            self.body,
            expires=self.expires,
            timestamp=self.timestamp,
        )
        copy.persistent = self.persistent
        copy.egress_queue = self.egress_queue
        copy.store_seq = self.store_seq
        copy.redelivered = self.redelivered
        copy.mark_redelivered()
        return copy

    def __repr__(self) -> str:
        return f"<Message {self.message_id} to {self.destination} ({self.size} B)>"


bind_message(
    Message,
    EgressQueue.G1,
    EgressQueue.D1,
    BY_CLASS_OF_SERVICE,
    NO_TAILS,
    plain_message_tail,
    escaped_message_tail,
    FRAME_ONLY_HEADERS,
)

# Messages travel the pipelines in batches (the SENDs of one read from a socket, say).
Batch = list[Message]


class Stage(Protocol):
    """Anything a batch of messages can be handed to (a pipeline module, a chain's end)."""

    def handle(self, batch: Batch) -> None: ...
