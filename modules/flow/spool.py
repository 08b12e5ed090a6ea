"""Spool checks: what a persistent message must pass before the server takes it (seed 001).

A guaranteed message is acknowledged only once spooled, so one that cannot be
spooled is refused at once with the reason, never silently dropped: the
destination is shut down, the message is larger than the destination's
maxmsgsize, the destination's spoolquota or the whole spool (maxspoolusage)
would be exceeded, the destination is past its low-priority reject limit and
the message's priority is below 4, or the destination is full and its
``whenfull`` policy is ``fail``. Spool usage raises an event when it crosses
usagesetpercent of a quota and another when it falls back to usageclearpercent.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import structlog

from wiremq.modules.destinations import QUEUE_PREFIX
from wiremq.modules.flow.threshold import Threshold, Transition, percent_threshold
from wiremq.modules.message import Message
from wiremq.modules.pipeline import P2P, PUBSUB

if TYPE_CHECKING:
    from wiremq.modules.broker import Broker
    from wiremq.modules.destinations import Destination

log = structlog.get_logger("wiremq.spool")

LOW_PRIORITY = 4  # JMS priorities 0..3 are low


class Pending:
    """Persistent messages accepted and not yet committed (in the group-commit buffer),
    counted per destination so that quotas and store watermarks include them.

    The per-domain and overall totals are kept as messages come and go, because
    they are read on every persistent SEND and every commit.
    """

    def __init__(self) -> None:
        self._counts: dict[str, list[int]] = {}  # destination -> [messages, bytes]
        self._domains: dict[str, list[int]] = {P2P: [0, 0], PUBSUB: [0, 0]}
        self._total_bytes = 0

    def add(self, message: Message) -> None:
        self._count(message, 1)

    def remove(self, message: Message) -> None:
        self._count(message, -1)
        if not self._counts[message.destination][0]:
            del self._counts[message.destination]

    def _count(self, message: Message, messages: int) -> None:
        """Count ``messages`` (1 or -1) of ``message``'s size in its destination,
        its domain and the overall total."""
        nbytes = messages * message.stored_size
        name = message.destination
        # Broker.destination() admits only /queue/ and /topic/ names.
        domain = P2P if name.startswith(QUEUE_PREFIX) else PUBSUB
        for entry in (self._counts.setdefault(name, [0, 0]), self._domains[domain]):
            entry[0] += messages
            entry[1] += nbytes
        self._total_bytes += nbytes

    def of(self, destination: str) -> tuple[int, int]:
        entry = self._counts.get(destination)
        return (entry[0], entry[1]) if entry else (0, 0)

    def of_domain(self, domain: str) -> tuple[int, int]:
        messages, nbytes = self._domains[domain]
        return messages, nbytes

    def total_bytes(self) -> int:
        return self._total_bytes


class Spool:
    """The checks, their refusal statistics, and the usage events."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.refused: Counter[str] = Counter()
        self.pending = Pending()
        self.spool_limit = broker.settings.get_int("MessageSpool", "maxspoolusage")
        self._usage: dict[str, tuple[Threshold, int]] = {}  # scope -> (threshold, its quota)

    def check(self, message: Message, target: Destination) -> str | None:
        """The reason ``message`` cannot be spooled, or None if it can."""
        reason = self._reason(message, target)
        if reason is not None:
            self.refused[reason.split(":")[0]] += 1
            log.info(
                "spool.refused",
                destination=target.name,
                message_id=message.message_id,
                receipt=message.receipt,
                reason=reason,
            )
        return reason

    def _reason(self, message: Message, target: Destination) -> str | None:
        persistence = self.broker.persistence
        assert persistence is not None
        store = persistence.queues if target.domain == P2P else persistence.topics
        if target.shut_down:
            return "destination shut down: it accepts no persistent messages"
        size = message.stored_size
        if 0 <= target.max_msg_size < size:
            return (
                f"message too large: {size} bytes, the destination takes at most "
                f"{target.max_msg_size}"
            )
        quota = target.spool_quota
        waiting = self.pending.of(target.name)[1]
        if quota >= 0 and store.byte_count(target.name) + waiting + size > quota:
            return f"destination spool quota exceeded: its quota is {quota} bytes"
        spool_limit = self.spool_limit
        if spool_limit >= 0:
            used = persistence.queues.total_bytes() + persistence.topics.total_bytes()
            used += self.pending.total_bytes()
            if used + size > spool_limit:
                return f"message spool full: {used} of {spool_limit} bytes in use"
        reject_limit = target.low_priority_limit
        if (
            reject_limit >= 0
            and message.priority < LOW_PRIORITY
            and store.count(target.name) >= reject_limit
        ):
            return (
                f"low-priority reject limit: the destination holds {reject_limit} or more "
                f"messages and takes no more of priority below {LOW_PRIORITY}"
            )
        if target.fail_when_full and self._full(target):
            return "destination full: over its store's high watermark (whenfull is fail)"
        return None

    def accepted(self, message: Message) -> None:
        """A message passed the checks and waits for its commit."""
        self.pending.add(message)

    def committed(self, messages: list[Message]) -> None:
        """Messages left the group-commit buffer (stored or failed)."""
        for message in messages:
            self.pending.remove(message)

    def _full(self, target: Destination) -> bool:
        own = target.store_watermark
        return (own is not None and own.tripped) or self.broker.store_watermarks[
            target.domain
        ].tripped

    def usage_changed(self, target: Destination) -> None:
        """Raise or clear ``target``'s usage events after its store counts changed."""
        persistence = self.broker.persistence
        assert persistence is not None
        store = persistence.queues if target.domain == P2P else persistence.topics
        self._update(target.name, target.spool_quota, store.byte_count(target.name))

    def spool_usage_changed(self) -> None:
        """Raise or clear the whole spool's usage events; once per commit, as its
        usage is the same whichever destinations the commit changed."""
        persistence = self.broker.persistence
        assert persistence is not None
        used = persistence.queues.total_bytes() + persistence.topics.total_bytes()
        self._update("message spool", self.spool_limit, used)

    def _update(self, scope: str, quota: int, used: int) -> None:
        if quota <= 0:
            return
        known = self._usage.get(scope)
        if known is None or known[1] != quota:
            settings = self.broker.settings
            threshold = percent_threshold(
                quota,
                settings.get_int("MessageSpool", "usagesetpercent"),
                settings.get_int("MessageSpool", "usageclearpercent"),
            )
            known = self._usage[scope] = (threshold, quota)
        transition = known[0].update(used)
        if transition is Transition.SET:
            log.warning("spool.usage_high", scope=scope, used=used, quota=quota)
        elif transition is Transition.CLEAR:
            log.info("spool.usage_normal", scope=scope, used=used, quota=quota)

    def state(self) -> dict[str, object]:
        return {
            "refused": dict(self.refused),
            "usage_high": [scope for scope, (t, _) in self._usage.items() if t.is_set],
        }
