"""The free-disk watermark on made-up figures: who is stopped, when the reserve goes, events."""

from __future__ import annotations

from pathlib import Path

import pytest
import structlog

from wiremq.config.parameters import REGISTRY
from wiremq.config.settings import Settings
from wiremq.modules.domains import P2P, PUBSUB
from wiremq.modules.flow.disk import RESERVE_FILE, DiskSpace, Watched

KIB = 1024
TOTAL = 1000 * KIB


class Producer:
    def __init__(self) -> None:
        self.stops: set[str] = set()

    def stop_reading(self, reason: object) -> None:
        self.stops.add(str(reason))

    def start_reading(self, reason: object) -> None:
        self.stops.discard(str(reason))


class Disk:
    """Figures a test sets, measured as ``statvfs`` would be; the reserve file is real."""

    def __init__(self) -> None:
        self.free = TOTAL

    def measure(self, folder: Path) -> tuple[int, int]:
        return TOTAL, self.free


def disk_space(
    tmp_path: Path, disk: Disk, copies: list[int] | None = None, **values: int
) -> DiskSpace:
    settings = Settings(
        REGISTRY,
        {
            "DiskSpace.minfreebytes": 200 * KIB,
            "DiskSpace.resumefreebytes": 300 * KIB,
            "DiskSpace.reservebytes": 0,
            **{f"DiskSpace.{k}": v for k, v in values.items()},
        },
    )
    to_copy = (lambda: sum(copies)) if copies is not None else (lambda: 0)
    watched = [
        Watched("wal", tmp_path / "wal", frozenset({P2P, PUBSUB}), to_copy),
        Watched("PersQueueFileStore", tmp_path, frozenset({P2P})),
    ]
    return DiskSpace(settings, watched, disk.measure)


def test_persistent_producers_stop_at_their_next_message_and_go_on_at_the_resume_mark(tmp_path):
    disk = Disk()
    space = disk_space(tmp_path, disk)
    producer = Producer()
    space.check()
    assert not space.any_full and space.filesystems[0].stores == ["wal", "PersQueueFileStore"]

    disk.free = 199 * KIB
    space.check()
    assert space.full == {P2P: True, PUBSUB: True} and space.any_full
    assert not producer.stops  # not read is decided at its next persistent SEND
    space.hold(P2P, producer)
    space.hold(PUBSUB, producer)
    assert producer.stops == {"free disk space (p2p)", "free disk space (pubsub)"}

    disk.free = 299 * KIB  # above where it stopped, below where it resumes
    space.check()
    assert space.any_full and producer.stops
    disk.free = 300 * KIB
    space.check()
    assert not space.any_full and not producer.stops
    assert space.state()[0]["trips"] == 1


def test_the_used_percent_stops_them_too(tmp_path):
    disk = Disk()
    space = disk_space(
        tmp_path,
        disk,
        minfreebytes=-1,
        resumefreebytes=-1,
        maxusedpercent=90,
        resumeusedpercent=85,
    )
    disk.free = 110 * KIB
    space.check()
    assert not space.any_full
    disk.free = 100 * KIB
    space.check()
    assert space.any_full
    disk.free = 150 * KIB
    space.check()
    assert not space.any_full


def test_what_the_log_will_copy_counts_as_used(tmp_path):
    disk = Disk()
    copies = [0]
    space = disk_space(tmp_path, disk, copies)
    disk.free = 250 * KIB
    space.check()
    assert not space.any_full
    copies[0] = 60 * KIB  # the databases will copy the log's records before it goes
    space.check()
    assert space.any_full


def test_the_reserve_is_given_back_on_a_full_disk_and_taken_again_once_space_returns(tmp_path):
    disk = Disk()
    space = disk_space(tmp_path, disk, reservebytes=64 * KIB)
    reserve = tmp_path / "wal" / RESERVE_FILE
    space.check()
    assert reserve.stat().st_blocks * 512 >= 64 * KIB
    disk.free -= 64 * KIB  # what the reserve took
    space.check()
    assert space.state()[0]["reserve_held"] is True

    disk.free = 63 * KIB  # something else filled the disk
    space.check()
    assert not reserve.exists() and space.any_full
    disk.free += 64 * KIB  # what giving it back freed: still counted as used
    space.check()
    assert space.any_full and not reserve.exists()

    disk.free = 500 * KIB
    space.check()
    assert not space.any_full and reserve.exists()


def test_a_reserve_a_disk_cannot_hold_is_not_taken(tmp_path):
    disk = Disk()
    disk.free = 100 * KIB
    space = disk_space(tmp_path, disk, reservebytes=64 * KIB, minfreebytes=-1, resumefreebytes=-1)
    space.check()  # 2 x 64 KiB are not free
    assert not (tmp_path / "wal" / RESERVE_FILE).exists()


def test_usage_events_at_80_and_60_percent_of_where_producers_stop(tmp_path):
    disk = Disk()
    space = disk_space(tmp_path, disk)  # they stop at 800 KiB used
    with structlog.testing.capture_logs() as events:
        disk.free = TOTAL - 639 * KIB
        space.check()
        disk.free = TOTAL - 640 * KIB
        space.check()
        disk.free = TOTAL - 481 * KIB
        space.check()
        disk.free = TOTAL - 480 * KIB
        space.check()
    names = [e["event"] for e in events if e["event"].startswith("disk.usage")]
    assert names == ["disk.usage_high", "disk.usage_normal"]


def test_a_producer_gone_is_not_started_again_and_room_for_a_pack(tmp_path):
    disk = Disk()
    space = disk_space(tmp_path, disk)
    producer = Producer()
    disk.free = 100 * KIB
    space.check()
    space.hold(P2P, producer)
    space.forget(producer)
    assert space.state()[0]["held_producers"] == 0
    assert not space.room_for(101 * KIB) and space.room_for(100 * KIB)


@pytest.mark.parametrize("domain", [P2P, PUBSUB])
def test_with_no_filesystem_nothing_is_ever_full(tmp_path, domain):
    space = DiskSpace(Settings(REGISTRY))
    space.check()
    assert not space.full[domain] and space.state() == []


def test_a_reserve_no_longer_wanted_is_given_back(tmp_path):
    disk = Disk()
    values = {"reservebytes": 64 * KIB, "minfreebytes": -1, "resumefreebytes": -1}
    settings = Settings(REGISTRY, {f"DiskSpace.{k}": v for k, v in values.items()})
    watched = [Watched("wal", tmp_path, frozenset({P2P, PUBSUB}))]
    space = DiskSpace(settings, watched, disk.measure)
    space.check()
    assert (tmp_path / RESERVE_FILE).exists()
    settings.set("DiskSpace.reservebytes", 0)  # a live change
    space.check()
    assert not (tmp_path / RESERVE_FILE).exists()
