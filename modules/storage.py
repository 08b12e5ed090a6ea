"""The storage module: puts each message into the store its delivery mode calls for.

Non-persistent queue messages wait in the VolQueueStore; non-persistent topic
messages are not kept. Persistent messages go through the small processing
buffer (P2PStore / PubSubStore: maxdelay, maxdelayedmessagesnumber,
maxdelayedmessagessize), which group-commits them to the PersQueueStore or the
TopicStore; only after its batch is committed does a message go on to
distribution and its receipt to the client. A persistent topic message goes
to the TopicStore only if its topic has durable subscriptions.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from wiremq.modules.destinations import Queue
from wiremq.modules.groupcommit import GroupCommit
from wiremq.modules.message import Message
from wiremq.modules.pipeline import P2P, ModuleContext, PipelineModule, refuse
from wiremq.stores.records import StoredMessage

log = structlog.get_logger("wiremq.storage")


class StorageModule(PipelineModule):
    name = "storage"

    def __init__(self, context: ModuleContext) -> None:
        super().__init__(context)
        persistence = context.broker.persistence
        self.persistence = persistence
        self.buffer: GroupCommit[Message, Sequence[int | None]] | None = None
        if persistence is None:
            return
        group = "P2PStore" if context.domain == P2P else "PubSubStore"
        settings = context.settings
        if context.domain == P2P:
            store_append = persistence.queues.append
            worker = persistence.queue_worker
        else:
            store_append = persistence.topics.append  # type: ignore[assignment]
            worker = persistence.topic_worker
        runtime = context.runtime

        def commit(batch: list[Message]) -> Sequence[int | None]:
            now_ms = runtime.now_ms()
            records: list[StoredMessage] = [m.to_stored(now_ms) for m in batch]
            return store_append(records)

        self.buffer = GroupCommit(
            runtime,
            worker,
            commit,
            self._stored,
            self._not_stored,
            size=lambda m: m.size,
            max_items=settings.get_int(group, "maxdelayedmessagesnumber"),
            max_bytes=settings.get_int(group, "maxdelayedmessagessize"),
            max_delay=settings.get_int(group, "maxdelay") / 1000,
        )

    def handle(self, message: Message) -> None:
        target = message.target
        assert target is not None
        if message.persistent:
            if self.buffer is None:
                refuse(message, "this server has no persistent store")
                return
            queue = isinstance(target, Queue)
            if queue or self._has_durables(message.destination):
                spool = self.context.broker.spool
                reason = spool.check(message, target)
                if reason is not None:
                    refuse(message, reason)
                    return
                spool.accepted(message)
                self.context.broker.store_accepted(target, message)
                if queue:
                    target.arrived(message)
                self.buffer.add(message)
                return
        elif isinstance(target, Queue):
            target.store_volatile(message)
        self.downstream.handle(message)

    def _has_durables(self, topic: str) -> bool:
        assert self.persistence is not None
        return self.persistence.durable_topics[topic] > 0

    def _stored(self, batch: list[Message], seqs: Sequence[int | None]) -> None:
        self.context.broker.spool.committed(batch)
        downstream = self.downstream.handle
        for message, seq in zip(batch, seqs, strict=True):
            message.store_seq = seq or 0
            downstream(message)
        self.context.broker.store_changed(self.context.domain, {m.destination for m in batch})

    def _not_stored(self, batch: list[Message], error: Exception) -> None:
        log.error("store.append_failed", messages=len(batch), error=str(error))
        self.context.broker.spool.committed(batch)
        for message in batch:
            refuse(message, f"the message could not be stored: {error}")
