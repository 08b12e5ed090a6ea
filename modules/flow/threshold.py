"""One threshold type for every watermark, memory level and usage event.

A threshold has a high (set) and a low (clear) bound, so that a value hovering
around one bound does not flap: it sets when the value rises to the high bound
and clears only once it has fallen to the low one. ``OFF`` (-1) for either
bound switches the threshold off, as the manual's ``-1`` does for its
watermarks; an off threshold never trips.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from math import inf

OFF = -1


class Transition(Enum):
    """What an update did to a threshold."""

    SET = "set"
    CLEAR = "clear"


class Threshold:
    """A set/clear pair of bounds with the state they imply."""

    __slots__ = ("_high", "_low", "_set_at", "_clear_at", "_set")

    def __init__(self, high: float, low: float) -> None:
        self._set = False
        self._bounds(high, low)

    def _bounds(self, high: float, low: float) -> None:
        if (high != OFF and high < 0) or (low != OFF and low < 0):
            raise ValueError(f"threshold bounds must be >= 0 or {OFF} (off): {high}, {low}")
        on = high != OFF and low != OFF
        if on and low > high:
            raise ValueError(f"threshold low bound {low} is above its high bound {high}")
        self._high = high
        self._low = low
        # Off is stored as bounds no value reaches, so update() needs no extra test.
        self._set_at = high if on else inf
        self._clear_at = low if on else -inf

    @property
    def high(self) -> float:
        return self._high

    @property
    def low(self) -> float:
        return self._low

    @property
    def enabled(self) -> bool:
        """False when switched off (either bound is OFF)."""
        return self._set_at != inf

    @property
    def is_set(self) -> bool:
        return self._set

    def update(self, value: float) -> Transition | None:
        """Move to ``value``; return the transition it caused, if any.

        When low == high, a value equal to both keeps the threshold set rather
        than clearing it on the next update, so it cannot flap at that value.
        """
        if self._set:
            if value <= self._clear_at and value < self._set_at:
                self._set = False
                return Transition.CLEAR
        elif value >= self._set_at:
            self._set = True
            return Transition.SET
        return None

    def configure(self, high: float, low: float, value: float) -> Transition | None:
        """Change the bounds at run time and re-evaluate at ``value``.

        Switching a set threshold off clears it.
        """
        self._bounds(high, low)
        if self._set and not self.enabled:
            self._set = False
            return Transition.CLEAR
        return self.update(value)

    def __repr__(self) -> str:
        return f"Threshold(high={self._high}, low={self._low}, set={self._set})"


def percent_threshold(capacity: float, set_percent: float, clear_percent: float) -> Threshold:
    """A usage-event threshold at percentages of ``capacity`` (OFF capacity: off)."""
    if capacity == OFF:
        return Threshold(OFF, OFF)
    if not 0 <= clear_percent <= set_percent:
        raise ValueError(
            f"need 0 <= clear_percent <= set_percent, got {clear_percent}, {set_percent}"
        )
    return Threshold(capacity * set_percent / 100, capacity * clear_percent / 100)


class Gauge:
    """Message and byte counts of a store, with a watermark on each.

    The manual's msghighwatermark/msglowwatermark and
    bytehighwatermark/bytelowwatermark: the gauge is tripped while either
    watermark is set, and untrips only once every set watermark has cleared.
    ``on_change(tripped)`` is called on those transitions only, which is where
    the server pauses or resumes the producers concerned. ``messages`` and
    ``bytes`` are the current counts (read them, change them through
    ``add``/``remove``).
    """

    __slots__ = ("messages", "bytes", "msg_threshold", "byte_threshold", "on_change", "_tripped")

    def __init__(
        self,
        msg_high: float = OFF,
        msg_low: float = OFF,
        byte_high: float = OFF,
        byte_low: float = OFF,
        on_change: Callable[[bool], object] | None = None,
    ) -> None:
        self.messages = 0
        self.bytes = 0
        self.msg_threshold = Threshold(msg_high, msg_low)
        self.byte_threshold = Threshold(byte_high, byte_low)
        self.on_change = on_change
        self._tripped = False

    @property
    def tripped(self) -> bool:
        return self._tripped

    def add(self, messages: int, nbytes: int) -> None:
        """Count messages coming in."""
        self.messages += messages
        self.bytes += nbytes
        # Both thresholds must see the new counts: no short-circuit here.
        by_messages = self.msg_threshold.update(self.messages)
        by_bytes = self.byte_threshold.update(self.bytes)
        if by_messages is not None or by_bytes is not None:
            self._refresh()

    def fits(self, messages: int, nbytes: int) -> bool:
        """Whether counting these in would leave the gauge untripped (every watermark
        below its high bound)."""
        return (
            not self._tripped
            and self.messages + messages < self.msg_threshold._set_at
            and self.bytes + nbytes < self.byte_threshold._set_at
        )

    def remove(self, messages: int, nbytes: int) -> None:
        """Count messages going out."""
        self.messages -= messages
        self.bytes -= nbytes
        by_messages = self.msg_threshold.update(self.messages)
        by_bytes = self.byte_threshold.update(self.bytes)
        if by_messages is not None or by_bytes is not None:
            self._refresh()

    def configure(self, msg_high: float, msg_low: float, byte_high: float, byte_low: float) -> None:
        """Change the watermarks at run time; the gauge re-evaluates at once."""
        self.msg_threshold.configure(msg_high, msg_low, self.messages)
        self.byte_threshold.configure(byte_high, byte_low, self.bytes)
        self._refresh()

    def _refresh(self) -> None:
        tripped = self.msg_threshold.is_set or self.byte_threshold.is_set
        if tripped != self._tripped:
            self._tripped = tripped
            if self.on_change is not None:
                self.on_change(tripped)
