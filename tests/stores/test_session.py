"""A store has one user at a time: a second thread is told so instead of conflicting."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from wiremq.stores.errors import StoreBusyError
from wiremq.stores.persqueue import PersQueueStore
from wiremq.stores.storage import open_database

from .store_fixtures import message


def test_a_second_thread_inside_the_store_gets_store_busy(tmp_path: Path) -> None:
    db = open_database((tmp_path / "Data.fs").as_uri())
    store = PersQueueStore(db)
    inside, release = threading.Event(), threading.Event()

    def first_user() -> None:
        with store._session.read():  # hold the store as a long read would
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=first_user)
    thread.start()
    try:
        assert inside.wait(10)
        with pytest.raises(StoreBusyError):
            store.append([message("m")])
        assert store.count("/queue/a") == 0  # counts stay readable from any thread
    finally:
        release.set()
        thread.join(10)
    store.append([message("m")])  # and the store works again once it is free
    assert store.count("/queue/a") == 1
    db.close()
