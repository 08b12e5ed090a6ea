"""A ZEO server that goes away: a commit waits ``connect_timeout`` for it to come back,
then fails with a StoreError, and the counts stay true."""

from __future__ import annotations

from pathlib import Path

import pytest

from wiremq.stores.errors import StoreError
from wiremq.stores.persqueue import PersQueueStore
from wiremq.stores.storage import open_database

from .store_fixtures import message
from .store_servers import zeo_server


def test_a_commit_without_its_zeo_server_fails_cleanly(tmp_path: Path) -> None:
    with zeo_server(tmp_path) as uri:
        db = open_database(uri, connect_timeout=1)
        queue = PersQueueStore(db)
        queue.append([message("kept")])
    try:
        with pytest.raises(StoreError, match="ClientDisconnected"):
            queue.append([message("refused")])
        assert queue.count("/queue/a") == 1
    finally:
        db.close()
