"""Errors a store raises: one readable message each, for a log line or a console.

The server turns these into a clear stop message; they never carry a ZODB
traceback to a user.
"""

from __future__ import annotations


class StoreError(Exception):
    """Base of every store failure the server is expected to handle."""


class StoreOpenError(StoreError):
    """The storage named by a URI cannot be opened (bad URI, unreachable, damaged)."""


class StoreBusyError(StoreError):
    """Two threads used one store at once; a store has exactly one user at a time."""
