"""Spool checks: what a persistent message must pass before the server takes it (seed 001).

A guaranteed message is acknowledged only once spooled, so one that cannot be
spooled is refused at once with the reason, never silently dropped: the
destination is shut down, the message is larger than the destination's
maxmsgsize, the destination's spoolquota or the whole spool (maxspoolusage)
would be exceeded, the destination is past its low-priority reject limit and
the message's priority is below 4, or the destination (or its store's disk: the
free-disk watermark) is full and its ``whenfull`` policy is ``fail``. Spool
usage raises an event when it crosses usagesetpercent of a quota and another
when it falls back to usageclearpercent.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

import structlog

from wiremq.config.groups import SpoolSettings
from wiremq.config.settings import Settings
from wiremq.modules.domains import P2P, PUBSUB
from wiremq.modules.flow.control import FlowControl
from wiremq.modules.flow.threshold import Threshold, Transition, percent_threshold
from wiremq.modules.message import Message, Target
from wiremq.stores.api import QUEUE_PREFIX, TOPIC_PREFIX, MessageStore

if TYPE_CHECKING:
    from wiremq.modules.destinations.registry import Destinations

PREFIXES = {P2P: QUEUE_PREFIX, PUBSUB: TOPIC_PREFIX}

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
        # Only a /queue/ or /topic/ name gets this far: any other is refused before.
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
    """The checks, their refusal statistics, the store watermarks' counts and the usage
    events."""

    def __init__(
        self,
        settings: Settings,
        flow: FlowControl,
        destinations: Destinations,
        store: MessageStore | None,
    ) -> None:
        self.settings = SpoolSettings.read(settings, "MessageSpool")
        self.flow = flow
        self.destinations = destinations
        self.store = store
        self.refused: Counter[str] = Counter()
        self.pending = Pending()
        self.spool_limit = self.settings.maxspoolusage
        self._usage: dict[str, tuple[Threshold, int]] = {}  # scope -> (threshold, its quota)

    def check(self, message: Message, target: Target) -> str | None:
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

    def _used(self) -> int:
        """Bytes stored in the whole spool."""
        store = self.store
        assert store is not None
        return store.totals(QUEUE_PREFIX)[1] + store.totals(TOPIC_PREFIX)[1]

    def _reason(self, message: Message, target: Target) -> str | None:
        store = self.store
        assert store is not None
        policy = target.policy
        if policy.shutdown:
            return "destination shut down: it accepts no persistent messages"
        size = message.stored_size
        if 0 <= policy.maxmsgsize < size:
            return (
                f"message too large: {size} bytes, the destination takes at most "
                f"{policy.maxmsgsize}"
            )
        quota = policy.spoolquota
        stored_messages, stored_bytes = store.count(target.name)
        waiting = self.pending.of(target.name)[1]
        if quota >= 0 and stored_bytes + waiting + size > quota:
            return f"destination spool quota exceeded: its quota is {quota} bytes"
        spool_limit = self.spool_limit
        if spool_limit >= 0:
            used = self._used() + self.pending.total_bytes()
            if used + size > spool_limit:
                return f"message spool full: {used} of {spool_limit} bytes in use"
        reject_limit = policy.lowpriorityrejectlimit
        if (
            reject_limit >= 0
            and message.priority < LOW_PRIORITY
            and stored_messages >= reject_limit
        ):
            return (
                f"low-priority reject limit: the destination holds {reject_limit} or more "
                f"messages and takes no more of priority below {LOW_PRIORITY}"
            )
        if target.fail_when_full:
            if self._full(target):
                return "destination full: over its store's high watermark (whenfull is fail)"
            if self.flow.disk.full[target.domain]:
                return "disk full: its store's disk is short of free space (whenfull is fail)"
        return None

    def accepted(self, message: Message) -> None:
        """A message passed the checks and waits for its commit."""
        self.pending.add(message)

    def committed(self, messages: list[Message]) -> None:
        """Messages left the group-commit buffer (stored or failed)."""
        for message in messages:
            self.pending.remove(message)

    def accepted_into_store(self, target: Target, message: Message) -> None:
        """A persistent message is on its way into the store: it counts in its store
        watermarks now, so that producers are stopped while commits lag behind reading;
        its producer is stopped if its store's disk is short of space."""
        size = message.stored_size
        if target.store_watermark is not None:
            target.store_watermark.add(1, size)
        self.flow.stores[target.domain].add(1, size)
        disk = self.flow.disk
        if disk.any_full and message.sender is not None:
            disk.hold(target.domain, message.sender.producer)

    def _full(self, target: Target) -> bool:
        own = target.store_watermark
        return (own is not None and own.tripped) or self.flow.stores[target.domain].tripped

    def store_changed(self, names: Iterable[str]) -> None:
        """After a commit changed ``names``: bring the store watermarks to what the store
        holds plus what waits for its commit, and raise or clear usage events."""
        store = self.store
        if store is None:
            return
        pending = self.pending
        domains = set()
        for name in names:
            destination = self.destinations.get(name)
            if destination is None:
                continue
            domains.add(destination.domain)
            messages, nbytes = store.count(name)
            if destination.store_watermark is not None:
                waiting, waiting_bytes = pending.of(name)
                destination.store_watermark.sync(messages + waiting, nbytes + waiting_bytes)
            self._update(name, destination.policy.spoolquota, nbytes)
        for domain in domains:
            messages, nbytes = store.totals(PREFIXES[domain])
            waiting, waiting_bytes = pending.of_domain(domain)
            self.flow.stores[domain].sync(messages + waiting, nbytes + waiting_bytes)
        if domains:
            self._update("message spool", self.spool_limit, self._used())

    def _update(self, scope: str, quota: int, used: int) -> None:
        if quota <= 0:
            return
        known = self._usage.get(scope)
        if known is None or known[1] != quota:
            threshold = percent_threshold(
                quota, self.settings.usagesetpercent, self.settings.usageclearpercent
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
            "used_bytes": self._used() if self.store is not None else 0,
            "waiting_bytes": self.pending.total_bytes(),
            "limit_bytes": self.spool_limit,
        }
