"""Child process: commit one batch normally, then stall the next commit after its vote.

FileStorage writes a transaction with status "checkpoint" in tpc_vote and
marks it committed in ``_finish``; this child blocks in ``_finish`` (the seam
ZODB's own tests use) so the parent can SIGKILL it with a voted but never
committed transaction at the end of the file.

usage: child_stall_commit.py URI
"""

from __future__ import annotations

import sys
import time

from ZODB.FileStorage import FileStorage

from wiremq.stores.logstore import open_session
from wiremq.stores.model import LogSet
from wiremq.stores.records import StoredMessage
from wiremq.stores.storage import Location, open_database


def stall(self: FileStorage, *args: object) -> None:
    print("VOTED", flush=True)
    time.sleep(60)


def append(session: object, first: int, messages: list[StoredMessage]) -> None:
    """One ZODB commit appending ``messages`` to /queue/a from position ``first``."""
    with session.write(f"append {len(messages)}") as root:  # type: ignore[attr-defined]
        items = list(enumerate(messages, start=first))
        root.append_at("/queue/a", items, items[-1][0])


def main(uri: str) -> None:
    session = open_session(open_database(Location(uri, 10.0, 1000)), "persqueue", LogSet)
    append(session, 1, [StoredMessage("kept", "/queue/a", (), b"k")])
    print("COMMITTED", flush=True)
    FileStorage._finish = stall  # type: ignore[method-assign]
    append(session, 2, [StoredMessage(f"lost-{i}", "/queue/a", (), b"l") for i in range(3)])


if __name__ == "__main__":
    main(sys.argv[1])
