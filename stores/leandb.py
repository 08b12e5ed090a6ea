"""ZODB's database, less the garbage cycle each commit leaves behind.

A commit pickles the objects it stores with ``ObjectWriter``s, whose pickler
calls back into its writer (``persistent_id``): a reference cycle, so each
writer, the last pickle it made (in its buffer) and what went into that pickle
(in the pickler's memo) outlive the commit until the cycle collector runs. In
the server it runs seldom (``server/cli.py: collect_less``) and an explicit
young-generation collection misses writers a collection during the commit
promoted; after the commit of a block holding a large message (100 MiB) that
garbage was twice the message, and more after each such commit. The connection
here breaks the cycle as soon as a writer is done, so reference counting frees
it at once.
"""

from __future__ import annotations

from typing import Any

from ZODB import DB
from ZODB.Connection import Connection


class LeanConnection(Connection):
    def _store_objects(self, writer: Any, transaction: Any) -> None:
        try:
            super()._store_objects(writer, transaction)
        finally:
            writer.__dict__.clear()  # its pickler, buffer and stack: the cycle goes


class LeanDB(DB):
    """``ZODB.DB`` whose connections are ``LeanConnection``s."""

    klass = LeanConnection
