"""Configurations whose parameters pass one by one but break a rule between two of them.

Each case is the lines of a config.xml (from line 3, as ``config_file`` writes
them), the line and parameter the error must name, and words of its message.
Both the config reader's tests and the ``wiremq serve`` tests use them.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple


class BrokenRelation(NamedTuple):
    lines: tuple[str, ...]
    line: int
    parameter: str
    fragments: tuple[str, ...]


CASES = {
    "high-watermark-without-low": BrokenRelation(
        ('<VolQueueStoreImpl globalmsghighwatermark="100"/>',),
        3,
        "VolQueueStoreImpl.globalmsghighwatermark",
        ("100 is set but VolQueueStoreImpl.globalmsglowwatermark is off (-1)", "set both"),
    ),
    "low-watermark-without-high": BrokenRelation(
        ("", '<TopicFileStore msglowwatermark="10"/>'),
        4,
        "TopicFileStore.msglowwatermark",
        ("10 is set but TopicFileStore.msghighwatermark is off (-1)",),
    ),
    "global-low-above-high": BrokenRelation(
        ('<VolQueueStoreImpl globalbytelowwatermark="20000000"/>',),
        3,
        "VolQueueStoreImpl.globalbytelowwatermark",
        ("20000000 is above VolQueueStoreImpl.globalbytehighwatermark (16000000)",),
    ),
    "queue-low-above-high": BrokenRelation(
        ('<VolQueueStoreImpl msghighwatermark="100" msglowwatermark="200"/>',),
        3,
        "VolQueueStoreImpl.msglowwatermark",
        ("200 is above VolQueueStoreImpl.msghighwatermark (100)",),
    ),
    "stored-queue-low-above-high": BrokenRelation(
        ('<PersQueueFileStore bytehighwatermark="1000" bytelowwatermark="2000"/>',),
        3,
        "PersQueueFileStore.bytelowwatermark",
        ("2000 is above PersQueueFileStore.bytehighwatermark (1000)",),
    ),
    "topic-low-above-high": BrokenRelation(
        ('<DestinationManager topicmsghighwatermark="5" topicmsglowwatermark="6"/>',),
        3,
        "DestinationManager.topicmsglowwatermark",
        ("6 is above DestinationManager.topicmsghighwatermark (5)",),
    ),
    "usage-clear-above-set": BrokenRelation(
        ('<MessageSpool usagesetpercent="50"', '  usageclearpercent="70"/>'),
        3,
        "MessageSpool.usageclearpercent",
        ("70 is above MessageSpool.usagesetpercent (50)",),
    ),
    "warn-above-disconnect": BrokenRelation(
        ('<SlowSubscriber warnshare="0.9" disconnectshare="0.5"/>',),
        3,
        "SlowSubscriber.disconnectshare",
        ("0.5 is below SlowSubscriber.warnshare (0.9)",),
    ),
    "blames-the-later-of-two-lines": BrokenRelation(
        ('<SlowSubscriber warnshare="0.7"/>', "", '<SlowSubscriber disconnectshare="0.6"/>'),
        5,
        "SlowSubscriber.disconnectshare",
        ("0.6 is below SlowSubscriber.warnshare (0.7)",),
    ),
    "ha-on-the-data-folder": BrokenRelation(
        ('<HA enabled="true"/>',),
        3,
        "HA.enabled",
        (
            "HA.enabled needs both stores in PostgreSQL",
            "PersQueueFileStore.storageuri (empty: a file in the data folder) and "
            "TopicFileStore.storageuri (empty: a file in the data folder)",
        ),
    ),
    "ha-with-one-store-elsewhere": BrokenRelation(
        (
            '<HA enabled="true"/>',
            '<PersQueueFileStore storageuri="postgresql://wiremq:s3cret@db:5432/mq"/>',
            '<TopicFileStore storageuri="zeo://db:8100"/>',
        ),
        5,
        "TopicFileStore.storageuri",
        ("TopicFileStore.storageuri (a zeo:// URI) is not a postgresql://",),
    ),
    "ha-lease-shorter-than-renewal-and-margin": BrokenRelation(
        ('<HA renewinterval="1" margin="1"', '    leasetime="2"/>'),
        3,
        "HA.leasetime",
        ("the lease must last longer than 2 s (HA.leasetime is 2 s)",),
    ),
}


def config_file(folder: Path, lines: tuple[str, ...]) -> Path:
    """A config.xml whose given lines start at line 3."""
    path = folder / "config.xml"
    text = '<?xml version="1.0"?>\n<wiremq>\n' + "\n".join(lines) + "\n</wiremq>\n"
    path.write_text(text, encoding="utf-8")
    return path
