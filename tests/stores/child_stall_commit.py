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

from wiremq.stores.persqueue import PersQueueStore
from wiremq.stores.records import StoredMessage
from wiremq.stores.storage import open_database


def stall(self: FileStorage, *args: object) -> None:
    print("VOTED", flush=True)
    time.sleep(60)


def main(uri: str) -> None:
    store = PersQueueStore(open_database(uri))
    store.append([StoredMessage("kept", "/queue/a", (), b"k")])
    print("COMMITTED", flush=True)
    FileStorage._finish = stall  # type: ignore[method-assign]
    store.append([StoredMessage(f"lost-{i}", "/queue/a", (), b"l") for i in range(3)])


if __name__ == "__main__":
    main(sys.argv[1])
