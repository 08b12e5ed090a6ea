"""Queue browsing: SUBSCRIBE with ``browser:true`` shows what a queue holds, consuming nothing.

The browser gets the messages waiting in the queue when it subscribes, in the
order the queue would deliver them (those in memory, then those left in the
store, read in batches), each once and only if its selector selects it,
then a MESSAGE with ``browser:end`` and no body; nothing more after that.
Its window paces it like any consumer's; a browsed message is not
acknowledged, not counted as delivered and stays in the queue.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import structlog

from wiremq.modules.destinations.subscription import Subscription
from wiremq.modules.flow.egress_queues import EgressQueue
from wiremq.modules.message import Message
from wiremq.modules.stomp.encoder import browser_end
from wiremq.stores.api import Batch

if TYPE_CHECKING:
    from wiremq.modules.destinations.queue import Queue

log = structlog.get_logger("wiremq.browser")


class BrowserSubscription(Subscription):
    """A browser's subscription: what is written to it frees its window and nothing else
    (a browsed message is not acknowledged, even in auto mode)."""

    __slots__ = ()

    def written(self, messages: list[Message]) -> None:
        self.inflight_messages -= len(messages)
        self.inflight_bytes -= sum(m.size for m in messages)
        self._wake()


class QueueBrowser:
    """Sends one queue's waiting messages to a browser (see the module docstring); it is
    the browser subscription's destination."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.name = queue.name
        self.domain = queue.domain
        self.services = queue.services
        self.subscription: Subscription | None = None
        self.pending: deque[Message] = deque()
        self.store_after: int | None = None  # the stored messages still to read, after this
        self.read_under_way = False
        self.finished = False

    def start(self, subscription: Subscription) -> None:
        self.subscription = subscription
        self.pending.extend(self.queue.waiting())
        self.store_after = self.queue.backlog.after if self.services.persistence else None
        self.consumer_ready()

    def consumer_ready(self) -> None:
        """Send what the window allows; read on from the store; end when all is sent."""
        subscription = self.subscription
        if subscription is None or subscription.ended or self.finished:
            return
        accepts = subscription.accepts
        now_ms = self.services.runtime.now_ms()
        pending = self.pending
        while pending:
            message = pending[0]
            if message.expired(now_ms) or not (accepts is None or accepts(message)):
                pending.popleft()
                continue
            if not subscription.ready_for(message):
                subscription.waiting = True
                return
            subscription.deliver(pending.popleft())
        if self.store_after is not None:
            self._read()
            return
        self.finished = True
        subscription.egress.push_message(
            EgressQueue.G1,  # drained last: after every message browsed
            browser_end(subscription.head, self.name),
            b"",
            None,
            None,
        )

    def _read(self) -> None:
        if self.read_under_way:
            return
        persistence = self.services.persistence
        assert persistence is not None and self.store_after is not None
        self.read_under_way = True
        persistence.read_for_consumers(
            self.name,
            self.store_after,
            self.queue.backlog.settings.readmsgamount,
            persistence.queue_live_buffer_limit,
            self._read_done,
        )

    def _read_done(self, batch: Batch) -> None:
        self.read_under_way = False
        found = self.queue.backlog.left_in_store(batch.messages)
        self.pending.extend(Message.from_stored(stored, seq) for seq, stored in found)
        self.store_after = None if batch.at_end else batch.last_seq
        self.consumer_ready()

    def unsubscribe(self, subscription: Subscription, unwritten: list[Message]) -> None:
        """The browser went away: nothing of the queue changes."""
        self.finished = True
