"""The configuration wizard's memory allocation (chapter 5 of the iBus manual).

From a few facts about where the server will run (memory, numbers of topics
and queues, the largest messages, the message rate, connections, threads) it
sets the parameters that decide how memory is shared out, each with the
reason for its value. The rules, as the manual gives them:

- The calculations use about half of the memory given (``-mx``): the budget.
- The manual's default allocation (chapter 3, "Default Memory Allocation") is
  the allocation of a 128 MB server, the server's default memory; every
  memory area scales with the budget from it, so the manual's own example
  (256 MB, half of it 128 MB) gives the manual's table.
- Areas that serve one domain (the thread/buffer modules, the live buffers,
  the VolQueueStore) are shared between topics and queues by their numbers;
  neither gets less than a quarter of an area shared by both, or three
  quarters of its own area when the other domain has none.
- A low watermark sits just under its high one: the high rounded down to
  two significant digits, a step lower if it is already round.
- Index caches grow with the message rate: the index of 20 seconds of
  messages, never fewer than the manual's 1000 entries.
- Thread pools: about 20 threads go to the runtime itself and one to each
  connection; a pool's size is inversely proportional to its largest message
  (each thread may hold one, twice: read and copied for the socket writer,
  within a sixteenth of the budget), never below the manual's 4 and never
  more than its share of the threads left.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields

from wiremq.config.registry import Registry, Value

RUNTIME_THREADS = 20  # "approximately 20 threads for java activities" (chapter 5)
REFERENCE_BUDGET_MB = 128  # the server memory the manual's default allocation is for
MIN_POOL_THREADS = 4  # the manual's default pool size
INDEX_SECONDS = 20  # index cache entries: this many seconds of messages
MIN_INDEX_ENTRIES = 1000  # the manual's default index cache size
SHARE_FLOOR = 0.25  # the least share of a shared area one domain gets
ONLY_DOMAIN_SHARE = 0.75  # the share of a domain when the other has no destinations


@dataclass(frozen=True, slots=True)
class WizardInputs:
    """The Memory Management screen's fields (chapter 5)."""

    heap_mb: int  # "Server heap size in MB" (the Java process -mx value)
    topics: int
    queues: int
    topic_message_bytes: int  # largest message published on any topic
    queue_message_bytes: int  # largest message sent to any queue
    message_rate: int  # average messages per second
    connections: int  # client connections, producers and consumers
    threads: int  # the most threads the process may have

    def problems(self) -> list[str]:
        """What is wrong with the inputs, worded for the operator (empty: none)."""
        found = [
            f"{f.name} must be a whole number of at least 0"
            for f in fields(self)
            if not _whole(getattr(self, f.name))
        ]
        if found:
            return found
        for name in ("heap_mb", "topic_message_bytes", "queue_message_bytes", "threads"):
            if getattr(self, name) < 1:
                found.append(f"{name} must be at least 1")
        if self.threads <= self.connections + RUNTIME_THREADS:
            found.append(
                f"threads ({self.threads}) must be more than the connections plus "
                f"{RUNTIME_THREADS} ({self.connections + RUNTIME_THREADS}): each connection "
                f"needs a thread and the runtime about {RUNTIME_THREADS}"
            )
        return found


# The manual's example (the Memory Management screen, chapter 5), whose result is the
# manual's table of output parameters.
MANUAL_EXAMPLE = WizardInputs(
    heap_mb=256,
    topics=10,
    queues=10,
    topic_message_bytes=20_000_000,
    queue_message_bytes=20_000_000,
    message_rate=50,
    connections=20,
    threads=500,
)


@dataclass(frozen=True, slots=True)
class Allocation:
    """One output parameter: its value and why."""

    key: str  # Group.name as the registry (or the manual, if the registry lacks it) names it
    value: int
    reason: str


def allocate(inputs: WizardInputs) -> list[Allocation]:
    """The wizard's output parameters for ``inputs`` (which must have no ``problems``)."""
    problems = inputs.problems()
    if problems:
        raise ValueError("; ".join(problems))
    return list(_allocate(inputs))


def _allocate(i: WizardInputs) -> Iterator[Allocation]:
    budget = i.heap_mb / 2  # MB
    scale = budget / REFERENCE_BUDGET_MB
    of_budget = f"{budget:g} MB is the budget (half of {i.heap_mb} MB)"
    queue_share = _share(i.queues, i.topics)
    topic_share = _share(i.topics, i.queues)
    shares = (
        f"topics get {topic_share:.0%} and queues {queue_share:.0%} of areas both use "
        f"({i.topics} topics, {i.queues} queues)"
    )

    yield Allocation(
        "MemWatch.messagethreshold",
        round(65536 * scale) - 1,
        f"messages under 64 KiB per 128 MB of budget are read without a memory check; {of_budget}",
    )
    yield Allocation(
        "TransactionMemSizeManager.uncommittedtxmemsizelimit",
        round(2_000_000 * scale),
        f"open transactions may hold 2 MB per 128 MB of budget; {of_budget}",
    )
    for group in ("P2PStore", "PubSubStore"):
        yield Allocation(
            f"{group}.maxdelayedmessagessize",
            round(131_072 * scale),
            f"the small processing buffer holds 128 KiB per 128 MB of budget; {of_budget}",
        )
    index = max(MIN_INDEX_ENTRIES, INDEX_SECONDS * i.message_rate)
    for group in ("PersQueueFileStore", "TopicFileStore"):
        yield Allocation(
            f"{group}.indexcachesize",
            index,
            f"{INDEX_SECONDS} s of messages at {i.message_rate} msg/s, at least "
            f"{MIN_INDEX_ENTRIES} entries",
        )
    for group, share in (("P2PPrioQueue", queue_share), ("PubSubPrioQueue", topic_share)):
        yield Allocation(
            f"{group}.maxnumbytes",
            round(2 * 262_144 * scale * share),
            f"the thread/buffer modules share 512 KiB per 128 MB of budget; {shares}",
        )
    volatile = round(2 * 16_000_000 * scale * queue_share)
    yield from _watermark(
        "VolQueueStoreImpl.globalbyte",
        volatile,
        f"non-persistent queue messages may take 16 MB per 128 MB of budget, as much again "
        f"in all if only queues are used; queues get {queue_share:.0%}",
    )
    yield Allocation(
        "DurableTopicSubscriptionManager.globaldursubbytelimit",
        round(2_097_152 * scale),
        f"durable subscribers' replays read 2 MiB at once per 128 MB of budget; {of_budget}",
    )
    yield from _watermark(
        "DestinationManager.globaltopicbyte",
        round(2 * 1_024_000 * scale * topic_share),
        f"the live buffers share 2 MB per 128 MB of budget; {shares}",
    )
    yield from _watermark(
        "DestinationManager.globalpersqueuebyte",
        round(2 * 1_024_000 * scale * queue_share),
        f"the live buffers share 2 MB per 128 MB of budget; {shares}",
    )
    spare = i.threads - RUNTIME_THREADS - i.connections
    threads_left = (
        f"{spare} threads are left ({i.threads} less {RUNTIME_THREADS} for the runtime and "
        f"{i.connections} for the connections)"
    )
    pool_area = budget * 1_000_000 / 16
    for key, largest, share in (
        ("QueueThreadPool.maxthreads", i.queue_message_bytes, queue_share),
        ("TopicThreadPool.maxthreads", i.topic_message_bytes, topic_share),
        ("DurableTopicSubscriberThreadPool.maxthreads", i.topic_message_bytes, topic_share),
    ):
        by_memory = int(pool_area // (2 * largest))
        by_threads = max(1, int(spare * share / 2))
        value = max(MIN_POOL_THREADS, min(by_memory, by_threads))
        why = (
            f"{pool_area / 1e6:g} MB (a sixteenth of the budget) holds {by_memory} threads "
            f"each with two messages of {largest} bytes; {threads_left}, half of its share "
            f"{by_threads}"
        )
        if value > min(by_memory, by_threads):
            why += f"; never fewer than {MIN_POOL_THREADS}"
        yield Allocation(key, value, why)


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _share(mine: int, other: int) -> float:
    """A domain's share of an area both domains use, by their numbers of destinations."""
    if not mine and not other:
        return 0.5
    if not other:
        return ONLY_DOMAIN_SHARE
    return min(1 - SHARE_FLOOR, max(SHARE_FLOOR, mine / (mine + other)))


def _watermark(prefix: str, high: int, reason: str) -> Iterator[Allocation]:
    """A high watermark and the low one just under it (see the module docstring)."""
    yield Allocation(f"{prefix}highwatermark", high, reason)
    low = just_under(high)
    yield Allocation(
        f"{prefix}lowwatermark",
        low,
        f"just under the high watermark ({high}): producers "
        "start again once it is down to two significant digits below it",
    )


def just_under(high: int) -> int:
    """``high`` rounded down to two significant digits, a step lower if already round."""
    if high < 10:
        return max(0, high - 1)
    step = 10 ** (len(str(high)) - 2)
    return (high - 1) // step * step


def written_values(
    allocations: list[Allocation], registry: Registry
) -> tuple[dict[str, Value], list[Allocation]]:
    """The allocations this server has parameters for (by their registry keys, values
    within the parameters' bounds), and those it has none for."""
    values: dict[str, Value] = {}
    missing = []
    for allocation in allocations:
        group, _, name = allocation.key.partition(".")
        param = registry.get(group, name)
        if param is None:
            missing.append(allocation)
            continue
        value = allocation.value
        if param.minimum is not None:
            value = max(value, int(param.minimum))
        if param.maximum is not None:
            value = min(value, int(param.maximum))
        values[param.key] = value
    return values, missing
