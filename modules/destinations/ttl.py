"""A message's expiry: its own (the publisher's ``expires``), capped by its destination's
``maxttl`` counted from now; the smaller wins (0 = never)."""

from __future__ import annotations

from wiremq.modules.errors import Refused


def capped_expiry(expires: int, now_ms: int, max_ttl: int) -> int:
    """``expires`` (ms since the epoch, 0 = never) capped by ``max_ttl`` ms from now."""
    if max_ttl:
        cap = now_ms + max_ttl
        if not expires or cap < expires:
            return cap
    return expires


def effective_expiry(header: str | None, now_ms: int, max_ttl: int) -> int:
    """The expiry to apply, from the ``expires`` header and the destination's max TTL."""
    expires = 0
    if header is not None and header != "0":
        if not (header.isascii() and header.isdigit()):
            raise Refused(
                "invalid expires header",
                f"expires {header[:64]!r} is not milliseconds since the epoch",
            )
        expires = int(header)
    return capped_expiry(expires, now_ms, max_ttl)
