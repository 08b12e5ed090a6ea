"""One ZODB connection with its own transaction manager, for exactly one store.

A store is used by one thread at a time (the server's storage thread): two
writers on one BTree would only conflict. The transaction manager is the
store's own, not bound to a thread as ZODB's default one is, so whichever
pool thread runs the store may call it; a second thread arriving while the
first is inside gets ``StoreBusyError`` rather than a silent conflict.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

import transaction
from ZODB import DB
from ZODB.Connection import Connection
from ZODB.POSException import POSError

from .errors import StoreBusyError, StoreError

RootT = TypeVar("RootT")


def _describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class Session(Generic[RootT]):
    """Units of work on a store's root object, each one ZODB transaction."""

    def __init__(self, db: DB, root_name: str, new_root: Callable[[], RootT]) -> None:
        self._busy = threading.Lock()
        self._tm = transaction.TransactionManager()
        self._connection: Connection = db.open(transaction_manager=self._tm)
        self._root_name = root_name
        self._new_root = new_root
        with self.write("open"):
            pass

    @contextmanager
    def _unit(self) -> Iterator[None]:
        if not self._busy.acquire(blocking=False):
            raise StoreBusyError(f"store {self._root_name!r} is already in use by another thread")
        try:
            self._tm.begin()
            yield
        except POSError as exc:  # the storage failed (e.g. its server went away)
            self._tm.abort()
            raise StoreError(f"{self._root_name}: {_describe(exc)}") from exc
        except BaseException:
            self._tm.abort()
            raise
        finally:
            # Trim the object cache to its bounds now rather than when the next unit
            # begins: a large message's block would stay in memory until then.
            self._connection.cacheGC()
            self._busy.release()

    @contextmanager
    def write(self, note: str) -> Iterator[RootT]:
        """A unit that commits when the block ends; the note names it in the storage's log."""
        with self._unit():
            self._tm.get().note(f"wiremq {self._root_name}: {note}")
            yield self._root()
            try:
                self._tm.commit()
            except Exception as exc:
                raise StoreError(
                    f"{self._root_name}: {note}: commit failed: {_describe(exc)}"
                ) from exc

    @contextmanager
    def read(self) -> Iterator[RootT]:
        """A unit that changes nothing; aborting it lets the object cache shrink."""
        with self._unit():
            yield self._root()
            self._tm.abort()

    def _root(self) -> RootT:
        roots = self._connection.root()
        if self._root_name not in roots:
            roots[self._root_name] = self._new_root()
        root: RootT = roots[self._root_name]
        return root

    def close(self) -> None:
        self._connection.close()
