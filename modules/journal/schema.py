"""The journal's schema: every field and every event, one versioned structure.

The writer (``encoding.py``) builds each event's JSON Lines record from this
table, the Spark jobs (``wiremq.analytics``) read the journal with the types
declared here, and ``docs/journal.md`` documents it (a test checks that the
document names every event and field). A record is one JSON object on one
line; a field whose value is unknown or does not apply is left out.

Changing what a field means, or removing one, takes a new ``SCHEMA_VERSION``;
adding an event or a field does not (readers ignore what they do not know).
"""

from __future__ import annotations

from dataclasses import dataclass

SCHEMA_VERSION = 1

# The value types a field may have (the JSON type, and what Spark reads it as).
STRING = "string"
LONG = "long"
BOOLEAN = "boolean"


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    type: str
    doc: str


FIELDS: tuple[Field, ...] = (
    Field("v", LONG, "schema version of the record (SCHEMA_VERSION)"),
    Field("event", STRING, "what happened (one of EVENTS)"),
    Field("ts", LONG, "when, in ms since the epoch (the server's wall clock)"),
    Field("message_id", STRING, "the message's id (the MESSAGE frame's message-id)"),
    Field("destination", STRING, "the queue or topic (/queue/NAME, /topic/NAME)"),
    Field("size", LONG, "body bytes"),
    Field("persistent", BOOLEAN, "whether the message is persistent"),
    Field("expires", LONG, "when the message expires, ms since the epoch (0: never)"),
    Field("store", STRING, "the store the event applies to (STORES)"),
    Field("seq", LONG, "the message's position in its store"),
    Field("session", STRING, "the session of the subscription concerned"),
    Field("subscription", STRING, "the subscription's id within its session"),
    Field("ack", STRING, "the subscription's ack mode (auto, client, client-individual)"),
    Field("requeue", BOOLEAN, "whether a NACK gives the message back for redelivery"),
    Field("reason", STRING, "why (REASONS, or a refusal's or a plugin's own text)"),
    Field("dmq", STRING, "the dead message queue a message was moved to"),
    Field("run", STRING, "the cleanup run concerned"),
    Field("interval", LONG, "the store's cleanupinterval when the run began, in ms"),
    Field("transaction_time", LONG, "the store's cleanuptransactiontime, in ms"),
    Field("transaction_size", LONG, "the store's cleanuptransactionsize, in messages"),
    Field("scanned", LONG, "messages a cleanup run examined"),
    Field("removed", LONG, "messages a cleanup run removed"),
    Field("server", STRING, "the server run (random, new at every start)"),
    Field("durable", STRING, "a durable subscription, as client-id/name"),
    Field("to", STRING, "the destination an operator moved a message to"),
    Field("redelivered", BOOLEAN, "whether a consumed delivery was flagged redelivered"),
)
FIELD_TYPES = {f.name: f.type for f in FIELDS}

# Every record starts with these.
HEAD = ("v", "event", "ts")
# Every message life event has these.
MESSAGE = ("message_id", "destination", "size", "persistent")
SUBSCRIPTION = ("session", "subscription")


@dataclass(frozen=True, slots=True)
class Event:
    name: str
    fields: tuple[str, ...]  # besides HEAD, in the order written
    doc: str


_EVENTS = (
    Event("server_started", ("server",), "the server started; the journal (re)opened"),
    Event("server_stopped", ("server",), "the server stopped cleanly; the journal closed"),
    Event(
        "received",
        (*MESSAGE, "expires"),
        "a SEND was taken into its pipeline (admission); a dead message queue's copy of an "
        "expired message is received there too",
    ),
    Event("stored", (*MESSAGE, "store", "seq"), "the message was committed to a store"),
    Event(
        "delivered",
        (*MESSAGE, *SUBSCRIPTION, "ack"),
        "the message was handed to a subscription (queued for its client); in auto mode "
        "recorded only for a delivery that leaves without being written (else: consumed)",
    ),
    Event(
        "redelivered",
        (*MESSAGE, *SUBSCRIPTION, "ack"),
        "the message was handed to a subscription again, flagged redelivered",
    ),
    Event(
        "acknowledged",
        (*MESSAGE, *SUBSCRIPTION),
        "the subscription acknowledged the delivery (ACK)",
    ),
    Event(
        "consumed",
        (*MESSAGE, *SUBSCRIPTION, "redelivered"),
        "auto mode: the delivery was written to the client's socket, which delivers and "
        "acknowledges it: one record in place of delivered and acknowledged",
    ),
    Event(
        "nacked",
        (*MESSAGE, *SUBSCRIPTION, "requeue"),
        "the subscription rejected the delivery (NACK); requeue false drops the message "
        "(for a durable subscriber: acknowledges it)",
    ),
    Event(
        "requeued",
        (*MESSAGE, *SUBSCRIPTION, "reason"),
        "a delivery not acknowledged went back: to its queue, or for a durable subscriber "
        "to its store (the subscription ended)",
    ),
    Event(
        "unacknowledged",
        (*MESSAGE, *SUBSCRIPTION, "reason"),
        "an acknowledgement was undone: its transaction failed, the message went back",
    ),
    Event(
        "expired",
        (*MESSAGE, "expires", "store", "dmq", "run"),
        "the message expired and left its destination (never delivered again); dmq when it "
        "was moved to a dead message queue, run when a cleanup run found it",
    ),
    Event(
        "removed",
        (*MESSAGE, "expires", "store", "run"),
        "a cleanup run removed the (expired) message from its store",
    ),
    Event(
        "dead_lettered",
        (*MESSAGE, "dmq", "reason"),
        "the message was moved to a dead message queue (its copy is received there)",
    ),
    Event(
        "discarded",
        (*MESSAGE, *SUBSCRIPTION, "reason"),
        "the message was dropped on purpose; with a subscription: for that subscriber only",
    ),
    Event(
        "moved",
        (*MESSAGE, "to"),
        "an operator moved the message to another destination (the console's move or retry): "
        "its copy is received there",
    ),
    Event(
        "refused",
        (*MESSAGE, "reason"),
        "the server did not take the message: its sender got an ERROR",
    ),
    Event(
        "cleanup_started",
        ("store", "run", "interval", "transaction_time", "transaction_size"),
        "a cleanup run of a store began",
    ),
    Event(
        "cleanup_ended",
        ("store", "run", "scanned", "removed"),
        "a cleanup run of a store ended",
    ),
    Event(
        "subscription_removed",
        ("destination", "durable"),
        "a durable subscription was removed (UNSUBSCRIBE): what the store kept only for it goes",
    ),
)
EVENTS: dict[str, Event] = {e.name: e for e in _EVENTS}

# The stores an event may name: the persistent queue and topic stores, and the
# non-persistent queue messages' VolQueueStore.
PERSQUEUE = "persqueue"
TOPICS = "topics"
VOLQUEUE = "volqueue"
STORES = (PERSQUEUE, TOPICS, VOLQUEUE)

# The reasons the server itself gives (``discarded``, ``requeued``, ``unacknowledged``,
# ``dead_lettered``); a refusal's reason is its ERROR's text, a plugin's discard its own.
EGRESS_DISCARD_OLDEST = "egress-discard-oldest"  # the client's egress queue was full
SLOW_SUBSCRIBER = "slow-subscriber"  # a discard-oldest topic dropped it for a full window
NO_SUBSCRIBERS = "no-subscribers"  # a topic message nobody subscribed to (nor stored)
SUBSCRIBER_LEFT = "subscriber-left"  # the subscription ended before it was acknowledged
TRANSACTION_ABORTED = "transaction-aborted"  # ABORT, or the connection went away
TRANSACTION_FAILED = "transaction-failed"  # its COMMIT failed (ERROR); nothing applied
TRANSACTION_DISCARDED = "transaction-discarded"  # the memory manager or an XA timeout did
SERVER_STOPPED = "server-stopped"  # a non-persistent message still held at shutdown
EXPIRED = "expired"  # why a message was dead-lettered
REDELIVERY_LIMIT = "redelivery limit"  # dead-lettered: delivered maxredeliveries times
REJECTED = "rejected"  # dead-lettered: NACKed without requeue
PURGED = "purged"  # an operator purged (or deleted) its queue
DELETED = "deleted"  # an operator deleted the message
REASONS = (
    EGRESS_DISCARD_OLDEST,
    SLOW_SUBSCRIBER,
    NO_SUBSCRIBERS,
    SUBSCRIBER_LEFT,
    TRANSACTION_ABORTED,
    TRANSACTION_FAILED,
    TRANSACTION_DISCARDED,
    SERVER_STOPPED,
    EXPIRED,
    REDELIVERY_LIMIT,
    REJECTED,
    PURGED,
    DELETED,
)


def store_of(destination: str) -> str:
    """The persistent store a destination's stored messages are in."""
    return PERSQUEUE if destination.startswith("/queue/") else TOPICS
