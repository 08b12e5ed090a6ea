"""What store reads and cleanups hand back to the server."""

from __future__ import annotations

from dataclasses import dataclass, field

from .records import StoredMessage


@dataclass(frozen=True, slots=True)
class Batch:
    """Messages read in order from one destination's log (a queue read or a replay).

    ``last_seq`` is the position to pass as ``after_seq`` for the next batch: the
    last message examined, expired ones included. ``expired`` lists the expired
    messages met on the way, never delivered; ``expired_removed`` says whether
    they were deleted in the same call (expiryonread / expiryonreplay) or left
    for the cleanup sweep.
    """

    messages: list[tuple[int, StoredMessage]]
    last_seq: int
    at_end: bool
    expired: list[StoredMessage] = field(default_factory=list)
    expired_removed: bool = False


@dataclass(frozen=True, slots=True)
class SweepResult:
    """Messages removed by one bounded cleanup run, for the journal or a dead message queue.

    ``more`` is True when the run stopped at a limit (messages or time) and
    the caller should run again after its gap time.
    """

    removed: list[StoredMessage]
    more: bool
    commits: int
