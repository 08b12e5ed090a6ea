"""Errors a store raises: one readable message each, for a log line or a console.

The server turns these into a clear stop message; they never carry a ZODB
traceback to a user.
"""

from __future__ import annotations

import errno


class StoreError(Exception):
    """Base of every store failure the server is expected to handle."""


class StoreOpenError(StoreError):
    """The storage named by a URI cannot be opened (bad URI, unreachable, damaged)."""


class StoreBusyError(StoreError):
    """Two threads used one store at once; a store has exactly one user at a time."""


def is_disk_full(error: BaseException) -> bool:
    """Whether ``error``, or an error that caused it, is a full filesystem (or quota)."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
