"""A store has one user at a time: a second thread is told so instead of conflicting."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.defaults import location
from wiremq.stores.errors import StoreBusyError
from wiremq.stores.logstore import open_session
from wiremq.stores.model import LogSet
from wiremq.stores.storage import open_database


def test_a_second_thread_inside_the_store_gets_store_busy(tmp_path: Path) -> None:
    db = open_database(location((tmp_path / "Data.fs").as_uri()))
    session = open_session(db, "persqueue", LogSet)
    inside, release = threading.Event(), threading.Event()

    def first_user() -> None:
        with session.read():  # hold the store as a long read would
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=first_user)
    thread.start()
    try:
        assert inside.wait(10)
        with pytest.raises(StoreBusyError), session.write("second"):
            pass
    finally:
        release.set()
        thread.join(10)
    with session.write("again") as root:  # and the store works again once it is free
        root.log("/queue/a")
    with session.read() as root:
        assert "/queue/a" in root.logs
    session.close()
    db.close()
