"""What the soak's clients did and saw, and the rules the server must obey over it.

Every client thread writes here as it goes, under one lock; ``violations`` checks
the rules over the whole run once it is over. Events are numbered in the order
they were recorded. A client records what it is about to do *before* it does it
(a SEND, an ACK, a NACK, closing its socket), and what it saw *after* it saw it,
so a server reaction to an action is always recorded after the action.

Words (in the spirit of tests/reliability/ledger.py, made for many clients at once):

- *stream*: where each message is owed once: a queue, a durable subscription
  (``/topic/soak#D0``), or a non-durable topic subscription (named after its
  session, owed nothing).
- *confirmed*: a persistent SEND whose RECEIPT came, or a transacted one whose
  COMMIT's RECEIPT came.
- *cancelled*: a transacted SEND whose ABORT was written, or whose connection was
  closed by its client before any COMMIT; or a SEND that was cut in half.
- *held*: a client-mode delivery from its arrival until the client wrote its
  ACK or NACK, or closed, or the server was restarted. An auto-mode delivery is
  never held; it is consumed on arrival.
- *unread*: a confirmed message that a consumer in auto mode may have been sent
  and never read: the server is done with an auto-mode message once it is written
  to the socket, and what sat in the socket when its client hung up (FIN or RST,
  or the server closed it) is gone by the protocol's rules. So a message never
  consumed in a stream is excused when such a hang-up on that stream came after
  it was last available (written, or let go by its last consumer), unless it
  comes back after a restart: then the server had kept it, invisible.
- *consumed*: delivered in auto mode, or delivered and its ACK written, before the
  drain was over: a message that only comes back after a restart was lost to the
  clients all along (its story says it came back).
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field

RULES = {
    "lost": "confirmed persistent message never consumed in a stream it was owed to",
    "acked-returned": "delivered again after its ACK was receipted (or it was auto-consumed)",
    "cancelled-delivered": "an aborted, abandoned or half-sent SEND was delivered",
    "held-twice": "delivered while an earlier delivery in the same stream was still held",
    "unknown": "delivered, but no client ever wrote it",
    "after-drain": "delivered after the drain had consumed everything",
    "client-error": "an ERROR frame, or a client that failed",
}


@dataclass
class Message:
    destination: str
    persistent: bool
    written_at: int
    state: str = "written"  # "confirmed" / "cancelled" / "written" (nothing known)


@dataclass
class Delivery:
    order: int
    stream: str
    session: int
    message_id: str
    auto: bool
    redelivered: bool
    released_at: int | None = None  # when the hold ended (auto: on arrival)
    exempt: bool = False  # its hold ended at a moment the client cannot know
    ack_written: bool = False
    acked_at: int | None = None  # the ACK's RECEIPT arrived
    nacked: bool = False
    drain: int = 0  # 0: the soak, 1: the drain, 2: the quiet check, 3: after a restart


@dataclass
class Ledger:
    durables: tuple[str, ...]  # streams every persistent topic message is owed to
    messages: dict[str, Message] = field(default_factory=dict)
    deliveries: list[Delivery] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    restarts: list[int] = field(default_factory=list)
    sessions: Counter[str] = field(default_factory=Counter)  # "kind/how it ended"
    counts: Counter[str] = field(default_factory=Counter)  # figures
    drain: int = 0
    unread: int = 0  # confirmed messages excused as unread (set by ``violations``)
    clients: dict[int, str] = field(default_factory=dict)  # session -> client name
    auto_streams: dict[int, str] = field(default_factory=dict)  # session -> stream
    hangups: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    _held: dict[int, list[Delivery]] = field(default_factory=lambda: defaultdict(list))
    _events: int = 0
    _sessions: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _next(self) -> int:
        self._events += 1
        return self._events

    # -- sending ------------------------------------------------------------------------

    def new_session(self, client: str) -> int:
        with self._lock:
            self._sessions += 1
            self.clients[self._sessions] = client
            return self._sessions

    def written(self, message_id: str, destination: str, persistent: bool) -> None:
        with self._lock:
            self.messages[message_id] = Message(destination, persistent, self._next())
            self.counts["sent persistent" if persistent else "sent non-persistent"] += 1

    def settle(self, message_ids: list[str], state: str) -> None:
        """Confirmed or cancelled (see the module's words)."""
        with self._lock:
            for message_id in message_ids:
                self.messages[message_id].state = state
            self.counts[state] += len(message_ids)

    # -- receiving ----------------------------------------------------------------------

    def delivered(
        self,
        stream: str,
        session: int,
        message_id: str,
        auto: bool,
        redelivered: bool,
        late: bool = False,
    ) -> Delivery:
        """``late``: it arrived after its client let everything go (behind a DISCONNECT),
        so that let it go too, at a moment nobody recorded."""
        with self._lock:
            order = self._next()
            delivery = Delivery(order, stream, session, message_id, auto, redelivered)
            delivery.drain = self.drain
            delivery.exempt = late
            if auto or late:
                delivery.released_at = order
            else:
                self._held[session].append(delivery)
            self.deliveries.append(delivery)
            self.counts["redeliveries" if redelivered else "first deliveries"] += 1
            return delivery

    def ack_written(self, deliveries: list[Delivery], nack: bool = False) -> None:
        """Before the ACK or NACK is written: the deliveries it covers are no longer held."""
        with self._lock:
            order = self._next()
            for delivery in deliveries:
                self._release(delivery, order)
                if nack:
                    delivery.nacked = True
                else:
                    delivery.ack_written = True
            self.counts["NACKs" if nack else "ACKs written"] += len(deliveries)

    def acknowledged(self, deliveries: list[Delivery]) -> None:
        """The RECEIPT of their ACK (or of the COMMIT that held it) arrived."""
        with self._lock:
            order = self._next()
            for delivery in deliveries:
                delivery.acked_at = order
            self.counts["ACKs receipted"] += len(deliveries)

    def subscribed(self, session: int, stream: str, auto: bool) -> None:
        if auto:
            with self._lock:
                self.auto_streams[session] = stream

    def session_ended(self, session: int, name: str, how: str, known: bool) -> None:
        """Before the client closes (``known``), or after it found the connection gone:
        then the server let go of what it held at a moment nobody recorded."""
        with self._lock:
            order = self._next()
            for delivery in self._held.pop(session, []):
                if delivery.released_at is None:
                    self._release(delivery, order)
                    delivery.exempt = not known
            self.sessions[f"{name}/{how}"] += 1
            stream = self.auto_streams.pop(session, None)
            if stream is not None and how != "graceful":
                self.hangups[stream].append(order)

    def restarted(self) -> None:
        """Before the server is stopped: everything held is let go."""
        with self._lock:
            order = self._next()
            self.restarts.append(order)
            for held in self._held.values():
                for delivery in held:
                    self._release(delivery, order)

    def start_drain(self, phase: int) -> None:
        with self._lock:
            self.drain = phase

    def count(self, figure: str) -> None:
        with self._lock:
            self.counts[figure] += 1

    def error(self, text: str) -> None:
        with self._lock:
            self.errors.append(text)

    def _release(self, delivery: Delivery, order: int) -> None:
        if delivery.released_at is None:
            delivery.released_at = order

    # -- the rules ----------------------------------------------------------------------

    def owed_streams(self, message: Message) -> tuple[str, ...]:
        if message.destination.startswith("/topic/"):
            return self.durables
        return (message.destination,)

    def story(self, message_id: str, by_id: dict[str, list[Delivery]]) -> str:
        """One message's history, for failure reports."""
        message = self.messages.get(message_id)
        parts = []
        if message is not None:
            kind = "persistent" if message.persistent else "non-persistent"
            parts.append(f"{kind} to {message.destination} #{message.written_at} {message.state}")
        for d in by_id.get(message_id, []):
            text = f"{d.stream} {self.clients.get(d.session)}/s{d.session} #{d.order}"
            text += " auto" if d.auto else ""
            text += " redelivered" if d.redelivered else ""
            text += ("", " (drain)", " (after drain)", " (after the restart)")[d.drain]
            if d.acked_at is not None:
                text += f", acked #{d.acked_at}"
            elif d.ack_written:
                text += f", ACK written #{d.released_at}"
            elif d.nacked:
                text += f", NACKed #{d.released_at}"
            elif not d.auto:
                text += f", let go #{d.released_at}" if d.released_at else ", held"
            parts.append(text)
        return f"{message_id} [{'; '.join(parts) or 'never written'}]"

    def violations(self) -> dict[str, list[str]]:
        """Every broken rule (see ``RULES``) with the stories of the messages that broke it."""
        broken: dict[str, set[str]] = {rule: set() for rule in RULES}
        by_id: dict[str, list[Delivery]] = defaultdict(list)
        for delivery in self.deliveries:
            by_id[delivery.message_id].append(delivery)
        for message_id, seen in by_id.items():
            message = self.messages.get(message_id)
            if message is None:
                broken["unknown"].add(message_id)
                continue
            if message.state == "cancelled":
                broken["cancelled-delivered"].add(message_id)
            by_stream: dict[str, list[Delivery]] = defaultdict(list)
            for delivery in seen:
                by_stream[delivery.stream].append(delivery)
                if delivery.drain == 2:
                    broken["after-drain"].add(message_id)
            for deliveries in by_stream.values():
                if self._returned(deliveries):
                    broken["acked-returned"].add(message_id)
                if _held_twice(deliveries):
                    broken["held-twice"].add(message_id)
        self.unread = 0
        for message_id, message in self.messages.items():
            if message.persistent and message.state == "confirmed":
                for stream in self.owed_streams(message):
                    seen = [d for d in by_id.get(message_id, []) if d.stream == stream]
                    if self._consumed(seen):
                        continue
                    if self._unread(message, seen, stream):
                        self.unread += 1
                    else:
                        broken["lost"].add(message_id)
        result = {
            rule: [self.story(m, by_id) for m in sorted(ids, key=_id_order)]
            for rule, ids in broken.items()
            if ids
        }
        if self.errors:
            result["client-error"] = list(self.errors)
        return result

    def _consumed(self, seen: list[Delivery]) -> bool:
        return any((d.auto or d.ack_written) and d.drain < 3 for d in seen)

    def _unread(self, message: Message, seen: list[Delivery], stream: str) -> bool:
        """See *unread* in the module's words."""
        if any(d.drain == 3 for d in seen):
            return False
        available = max([message.written_at, *(d.released_at or 0 for d in seen)])
        return any(order > available for order in self.hangups.get(stream, ()))

    def _returned(self, deliveries: list[Delivery]) -> bool:
        """A delivery after a receipted ACK; or after an auto-mode one, unless a restart
        came between (what the server wrote just before a kill may come back)."""
        for earlier in deliveries:
            for later in deliveries:
                if later.order <= earlier.order:
                    continue
                if earlier.acked_at is not None and later.order > earlier.acked_at:
                    return True
                if earlier.auto and not any(earlier.order < r < later.order for r in self.restarts):
                    return True
        return False


def _held_twice(deliveries: list[Delivery]) -> bool:
    for earlier in deliveries:
        if earlier.auto or earlier.exempt:
            continue
        for later in deliveries:
            if later.order <= earlier.order or later.exempt:
                continue
            if earlier.released_at is None or earlier.released_at > later.order:
                return True
    return False


def _id_order(message_id: str) -> tuple[str, int]:
    """``p3-120`` sorts as (p3, 120)."""
    worker, _, number = message_id.rpartition("-")
    return (worker, int(number)) if number.isdigit() else (message_id, 0)


def report(broken: dict[str, list[str]], limit: int = 5) -> list[str]:
    lines = []
    for rule, items in broken.items():
        lines.append(f"  {rule} ({RULES[rule]}): {len(items)}")
        lines += [f"      {item}" for item in items[:limit]]
        if len(items) > limit:
            lines.append(f"      ... and {len(items) - limit} more")
    return lines
