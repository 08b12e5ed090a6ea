"""What the clients saw across crashes, and the rules it must obey.

Every client thread writes here as it goes; ``violations`` then checks the
rules below over the whole run. A message is named by its body,
``producer-K:SEQ``: producer K numbers its SENDs 0, 1, 2, ... across all rounds.

Words used by the rules:

- *written*: the producer put the SEND on its socket (recorded just before the
  write, so a message can never be delivered before it is known).
- *confirmed*: the RECEIPT of that SEND, or of a later SEND of the same producer
  on the same connection, reached the producer (a receipt comes only after the
  commit, and a producer's SENDs are committed in order).
- *delivered*: a MESSAGE frame for it reached the consumer. Deliveries are
  numbered in the order they happened over the whole run (one consumer at a
  time, rounds one after the other).
- *ACK written*: the consumer's ACK for that delivery went onto its socket.
- *acknowledged*: the RECEIPT of that ACK reached the consumer.
"""

from __future__ import annotations

import re
import threading
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

BODY = re.compile(r"producer-(\d+):(\d+)")

Key = tuple[int, int]  # (producer, seq)


def body_of(key: Key) -> str:
    return f"producer-{key[0]}:{key[1]}"


def key_of(body: str) -> Key | None:
    match = BODY.fullmatch(body)
    return (int(match[1]), int(match[2])) if match else None


@dataclass
class Delivery:
    order: int  # position in the run's sequence of events
    round: int  # one consumer connection per round
    body: str
    redelivered: bool  # the MESSAGE carried redelivered:true
    ack_written: bool = False
    acked_at: int | None = None  # event order of the ACK's receipt


@dataclass
class Ledger:
    """Shared by the producer and consumer threads; every method takes the lock."""

    written: dict[Key, int] = field(default_factory=dict)  # -> round
    confirmed: dict[Key, int] = field(default_factory=dict)  # -> round
    deliveries: list[Delivery] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # ERROR frames, server tracebacks
    _events: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _next(self) -> int:
        self._events += 1
        return self._events

    def wrote(self, key: Key, round_: int) -> None:
        with self._lock:
            self.written[key] = round_

    def confirm(self, keys: list[Key], round_: int) -> None:
        with self._lock:
            for key in keys:
                self.confirmed.setdefault(key, round_)

    def delivered(self, body: str, round_: int, redelivered: bool) -> Delivery:
        with self._lock:
            delivery = Delivery(self._next(), round_, body, redelivered)
            self.deliveries.append(delivery)
            return delivery

    def ack_written(self, deliveries: list[Delivery]) -> None:
        with self._lock:
            for delivery in deliveries:
                delivery.ack_written = True

    def acknowledged(self, delivery: Delivery) -> None:
        with self._lock:
            delivery.acked_at = self._next()

    def error(self, text: str) -> None:
        with self._lock:
            self.errors.append(text)

    # -- reading the record -------------------------------------------------

    def deliveries_of(self) -> dict[str, list[Delivery]]:
        by_body: dict[str, list[Delivery]] = defaultdict(list)
        for delivery in self.deliveries:
            by_body[delivery.body].append(delivery)
        return by_body

    def owed(self) -> set[str]:
        """Confirmed messages that must still be in the store: never delivered, or whose
        last delivery got no ACK onto the wire."""
        by_body = self.deliveries_of()
        owed = set()
        for key in self.confirmed:
            seen = by_body.get(body_of(key))
            if not seen or not seen[-1].ack_written:
                owed.add(body_of(key))
        return owed

    def history(self, body: str, by_body: dict[str, list[Delivery]] | None = None) -> str:
        """One message's story, for failure messages (``by_body``: ``deliveries_of()``)."""
        if by_body is None:
            by_body = self.deliveries_of()
        key = key_of(body)
        parts = []
        if key is not None and key in self.written:
            parts.append(f"sent r{self.written[key]}")
        if key is not None and key in self.confirmed:
            parts.append(f"confirmed r{self.confirmed[key]}")
        for d in by_body.get(body, []):
            text = f"delivered r{d.round} #{d.order}" + (" redelivered" if d.redelivered else "")
            if d.acked_at is not None:
                text += f", acked #{d.acked_at}"
            elif d.ack_written:
                text += ", ACK sent (no receipt)"
            else:
                text += ", no ACK sent"
            parts.append(text)
        return f"{body} [{'; '.join(parts) or 'never sent'}]"


RULES = {
    "phantom": "delivered, but no producer ever sent it",
    "lost": "confirmed, but never delivered",
    "stranded": "confirmed, delivered last without any ACK sent, and never delivered again",
    "acked-returned": "delivered again after its ACK was receipted",
    "duplicate-in-round": "delivered twice to one consumer connection",
    "after-drain": "delivered after the drain had acknowledged everything",
    "order": "a first delivery with a lower seq than an earlier first delivery of its producer",
    "server-error": "an ERROR frame, a failed client, or an error in the server's log",
}


# Rules that nothing later in the run can mend: checked after every round.
SETTLED = ("phantom", "acked-returned", "duplicate-in-round", "order", "server-error")


def violations(ledger: Ledger, quiet_from: int | None = None) -> dict[str, list[str]]:
    """Every broken rule (see ``RULES``) with the messages that broke it; ``after-drain``
    only with ``quiet_from``, the number of deliveries when the queue had to be empty.

    ``order`` is ActiveMQ's order-with-restart check made run-wide: take, per
    producer, the deliveries of messages no consumer had received before (first
    deliveries), in the order they arrived across all rounds; their seqs must
    strictly increase. Deliveries of a message received before are exempt (they
    are redeliveries, whatever their ``redelivered`` header says: after a kill it
    may be either). With one consumer at a time this includes the per-session rule
    ("within a session a producer's seqs never go backwards except for
    redeliveries") and adds that a stored backlog is delivered before the newer
    messages of the same producer after a restart.
    """
    broken: dict[str, list[str]] = {rule: [] for rule in RULES}
    by_body = ledger.deliveries_of()

    def story(body: str) -> str:
        return ledger.history(body, by_body)

    for body, seen in by_body.items():
        key = key_of(body)
        if key is None or key not in ledger.written:
            broken["phantom"].append(story(body))
            continue
        acked = [d.acked_at for d in seen if d.acked_at is not None]
        if acked and any(d.order > min(acked) for d in seen):
            broken["acked-returned"].append(story(body))
        rounds = [d.round for d in seen]
        if len(rounds) != len(set(rounds)):
            broken["duplicate-in-round"].append(story(body))
    for key in sorted(ledger.confirmed):
        seen = by_body.get(body_of(key), [])
        if not seen:
            broken["lost"].append(story(body_of(key)))
        elif not seen[-1].ack_written:
            broken["stranded"].append(story(body_of(key)))
    last_first: dict[int, Delivery] = {}
    received: set[str] = set()
    for delivery in ledger.deliveries:
        key = key_of(delivery.body)
        if delivery.body in received or key is None:
            continue
        received.add(delivery.body)
        before = last_first.get(key[0])
        if before is not None and key[1] <= key_of(before.body)[1]:  # type: ignore[index]
            broken["order"].append(f"{story(delivery.body)} came after {story(before.body)}")
        else:
            last_first[key[0]] = delivery
    broken["server-error"] = list(ledger.errors)
    if quiet_from is not None:
        broken["after-drain"] = [story(d.body) for d in ledger.deliveries[quiet_from:]]
    return {rule: items for rule, items in broken.items() if items}


def report(broken: dict[str, list[str]], limit: int = 10) -> str:
    """Per rule: every message that broke it (as seq ranges per producer), then the full
    story of the first ``limit`` of them."""
    lines = []
    for rule, items in broken.items():
        lines.append(f"{rule} ({RULES[rule]}): {len(items)}")
        if rule != "server-error":
            lines.append(f"  all: {ranges(item.split(' ', 1)[0] for item in items)}")
        lines += [f"    {item}" for item in items[:limit]]
        if len(items) > limit:
            lines.append(f"    ... and {len(items) - limit} more, listed in 'all' above")
    return "\n".join(lines)


def ranges(bodies: Iterable[str]) -> str:
    """``producer-0:3..7,9; producer-2:1`` for a set of message bodies."""
    seqs: dict[int, list[int]] = defaultdict(list)
    others = []
    for body in bodies:
        key = key_of(body)
        if key is None:
            others.append(repr(body))
        else:
            seqs[key[0]].append(key[1])
    out = []
    for producer, numbers in sorted(seqs.items()):
        numbers.sort()
        spans: list[str] = []
        start = previous = numbers[0]
        for n in [*numbers[1:], None]:
            if n is not None and n == previous + 1:
                previous = n
                continue
            spans.append(str(start) if start == previous else f"{start}..{previous}")
            if n is not None:
                start = previous = n
        out.append(f"producer-{producer}:{','.join(spans)}")
    return "; ".join(out + others)
