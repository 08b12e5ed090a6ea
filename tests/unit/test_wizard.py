"""The configuration wizard reproduces the manual's allocation table from its example inputs,
and follows the manual's rules for other inputs."""

from __future__ import annotations

import pytest

from wiremq.config.parameters import REGISTRY
from wiremq.config.wizard import (
    MANUAL_EXAMPLE,
    WizardInputs,
    allocate,
    just_under,
    written_values,
)

# The manual's table of output parameters (chapter 5, "Output configuration parameters"),
# row by row: its group and entry names, and the value it gives for the example inputs of
# the Memory Management screen (256 MB, 10 topics, 10 queues, 20,000,000-byte messages,
# 50 msg/s, 20 connections, 500 threads). Where the manual's name of a group differs
# from the one its chapter 3 configures (and the registry uses), the row says so.
MANUAL_TABLE = [
    ("PubSubStore", "maxdelayedmessagessize", 131072, "PubSubStore.maxdelayedmessagessize"),
    ("PersQueueFileStore", "indexcachesize", 1000, "PersQueueFileStore.indexcachesize"),
    ("TopicFileStore", "indexcachesize", 1000, "TopicFileStore.indexcachesize"),
    ("PubSubPrioQueue", "maxnumbytes", 262144, "PubSubPrioQueue.maxnumbytes"),
    ("P2PPrioQueue", "maxnumbytes", 262144, "P2PPrioQueue.maxnumbytes"),
    ("MemWatch", "messagethreshold", 65535, "MemWatch.messagethreshold"),
    # chapter 3 configures it as TransactionMemSizeManager.uncommittedtxmemsizelimit
    (
        "ConnectionManager",
        "uncommittedtxmemsizelimit",
        2000000,
        "TransactionMemSizeManager.uncommittedtxmemsizelimit",
    ),
    # the VolQueueStore's module is VolQueueStoreImpl (chapters 2 and 3)
    (
        "VolQueueStore",
        "globalbytehighwatermark",
        16000000,
        "VolQueueStoreImpl.globalbytehighwatermark",
    ),
    (
        "VolQueueStore",
        "globalbytelowwatermark",
        15000000,
        "VolQueueStoreImpl.globalbytelowwatermark",
    ),
    # The table prints 2097512, a transposition of 2097152: chapter 3 gives
    # globaldursubbytelimit = 2097152 ("should not exceed 2MBytes") for the same server.
    (
        "DurableTopicSubscriptionManager",
        "globaldursubbytelimit",
        2097152,
        "DurableTopicSubscriptionManager.globaldursubbytelimit",
    ),
    (
        "DestinationManager",
        "globaltopicbytehighwatermark",
        1024000,
        "DestinationManager.globaltopicbytehighwatermark",
    ),
    (
        "DestinationManager",
        "globaltopicbytelowwatermark",
        1000000,
        "DestinationManager.globaltopicbytelowwatermark",
    ),
    (
        "DestinationManager",
        "globalpersqueuebytehighwatermark",
        1024000,
        "DestinationManager.globalpersqueuebytehighwatermark",
    ),
    (
        "DestinationManager",
        "globalpersqueuebytelowwatermark",
        1000000,
        "DestinationManager.globalpersqueuebytelowwatermark",
    ),
    ("QueueThreadPool", "maxthreads", 4, "QueueThreadPool.maxthreads"),
    ("TopicThreadPool", "maxthreads", 4, "TopicThreadPool.maxthreads"),
]


@pytest.mark.parametrize(
    ("group", "name", "value", "key"), MANUAL_TABLE, ids=[f"{g}.{n}" for g, n, _, _ in MANUAL_TABLE]
)
def test_the_manuals_example_gives_each_row_of_its_table(group, name, value, key):
    allocations = {a.key: a for a in allocate(MANUAL_EXAMPLE)}
    assert allocations[key].value == value
    assert allocations[key].reason


def test_every_allocation_is_a_row_of_the_table_or_a_parameter_the_manual_sets_too():
    keys = [a.key for a in allocate(MANUAL_EXAMPLE)]
    assert len(keys) == len(set(keys))
    extra = set(keys) - {key for *_, key in MANUAL_TABLE}
    # chapter 3's default allocation sets these with the table's values too
    assert extra == {
        "P2PStore.maxdelayedmessagessize",
        "DurableTopicSubscriberThreadPool.maxthreads",
    }


def test_what_is_written_goes_through_the_registry():
    values, missing = written_values(allocate(MANUAL_EXAMPLE), REGISTRY)
    assert values["DestinationManager.topicglobalbytehighwatermark"] == 1024000  # an alias
    assert values["VolQueueStoreImpl.globalbytelowwatermark"] == 15000000
    names = {a.key for a in missing}
    assert all(REGISTRY.get(*k.split(".")) is None for k in names)
    assert all(REGISTRY.get(*k.split(".")) is not None for k in values)


def _with(**changes: int) -> dict[str, int]:
    fields = {name: getattr(MANUAL_EXAMPLE, name) for name in MANUAL_EXAMPLE.__slots__}
    return {a.key: a.value for a in allocate(WizardInputs(**{**fields, **changes}))}


def test_memory_areas_scale_with_the_memory_given():
    double = _with(heap_mb=512)
    assert double["VolQueueStoreImpl.globalbytehighwatermark"] == 32_000_000
    assert double["P2PStore.maxdelayedmessagessize"] == 262144
    assert double["MemWatch.messagethreshold"] == 131071


def test_areas_both_domains_use_follow_the_numbers_of_topics_and_queues():
    topics = _with(topics=30, queues=10)
    assert topics["PubSubPrioQueue.maxnumbytes"] == 3 * topics["P2PPrioQueue.maxnumbytes"]
    only_queues = _with(topics=0, queues=10)
    assert only_queues["P2PPrioQueue.maxnumbytes"] == 393216  # three quarters of 512 KiB
    assert only_queues["PubSubPrioQueue.maxnumbytes"] == 131072  # a quarter still


def test_thread_pools_are_inversely_proportional_to_the_largest_message():
    small = _with(queue_message_bytes=100_000, topic_message_bytes=1_000_000)
    assert small["QueueThreadPool.maxthreads"] == 40  # 8 MB / (2 * 100 kB)
    assert small["TopicThreadPool.maxthreads"] == 4
    tiny = _with(queue_message_bytes=1_000, connections=400, threads=440)
    assert tiny["QueueThreadPool.maxthreads"] == 5, "capped by the threads left: (440-420)/4"


def test_index_caches_grow_with_the_message_rate():
    assert _with(message_rate=2000)["PersQueueFileStore.indexcachesize"] == 40000
    assert _with(message_rate=1)["TopicFileStore.indexcachesize"] == 1000


@pytest.mark.parametrize(
    ("high", "low"),
    [(16_000_000, 15_000_000), (1_024_000, 1_000_000), (2_048_000, 2_000_000), (100, 90), (5, 4)],
)
def test_a_low_watermark_sits_just_under_its_high(high, low):
    assert just_under(high) == low


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"threads": 40}, "must be more than the connections plus 20"),
        ({"heap_mb": 0}, "heap_mb must be at least 1"),
        ({"topics": -1}, "topics must be a whole number"),
        ({"queue_message_bytes": True}, "queue_message_bytes must be a whole number"),
    ],
)
def test_impossible_inputs_are_refused_with_the_reason(changes, problem):
    fields = {name: getattr(MANUAL_EXAMPLE, name) for name in MANUAL_EXAMPLE.__slots__}
    inputs = WizardInputs(**{**fields, **changes})
    assert any(problem in text for text in inputs.problems())
    with pytest.raises(ValueError, match=problem.split()[0]):
        allocate(inputs)
