"""A ZEO server that goes away: commits go on into the write-ahead log, the catch-up fails
with a StoreError and waits, and everything reaches the database once the server is back."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from wiremq.stores.errors import StoreError

from .store_fixtures import WalStores, message, send, stored_ids
from .store_servers import zeo_server


def test_commits_outlive_their_zeo_server_and_catch_up_once_it_is_back(tmp_path: Path) -> None:
    folder = tmp_path / "zeo"
    folder.mkdir()
    with zeo_server(folder) as uri:
        stores = WalStores(uri, tmp_path, "loss", connect_timeout=1)
        store = stores.open()
        send(store, message("before"))
        store.catch_up(5.0)
    send(store, message("during"))  # durable in the log: its receipt may go
    assert store.count("/queue/a")[0] == 2
    with pytest.raises(StoreError, match="ClientDisconnected"):
        store.catch_up(5.0)
    with zeo_server(folder, port=int(uri.rsplit(":", 1)[1])):
        deadline = time.monotonic() + 30
        while True:  # as the server's catch-up does: try again until the client reconnects
            try:
                store.catch_up(5.0)
                break
            except StoreError:
                assert time.monotonic() < deadline, "the ZEO client never reconnected"
                time.sleep(0.2)
        assert stored_ids(store) == ["before", "during"]
        stores.close()
