"""The facade's counts: every commit shows at once, from any thread, before ZODB has it."""

from __future__ import annotations

import threading
import time

from wiremq.stores.records import StoredMessage

from .facade_durable_tests import subscribe
from .store_fixtures import WalStores, commit, message, send

T = "/topic/news"


def sizes(*messages: StoredMessage) -> int:
    return sum(m.size for m in messages)


class FacadeCountTests:
    def test_counts_follow_appends_and_removals_at_once(self, wal: WalStores) -> None:
        store = wal.open()
        a = [message(f"a{i}", body=b"x" * (10 * i)) for i in range(4)]
        b = [message("b0", destination="/queue/b", body=b"yy")]
        seqs = send(store, *a, *b)
        assert store.count("/queue/a") == (4, sizes(*a))
        assert store.totals("/queue/") == (5, sizes(*a, *b))
        commit(store, removals=(("/queue/a", seqs[0]), ("/queue/a", seqs[1]), ("/queue/b", 1)))
        assert store.count("/queue/a") == (2, sizes(*a[2:]))
        assert store.totals("/queue/") == (2, sizes(*a[2:]))
        assert store.destinations("/queue/") == ["/queue/a"]  # only those holding messages
        assert store.count("/queue/unknown") == (0, 0)

    def test_topic_counts_follow_collection_and_unsubscription(self, wal: WalStores) -> None:
        store = wal.open()
        subscribe(store, ("c1", "s1"))
        subscribe(store, ("c2", "s2"), topic="/topic/b")
        sent = [message(f"m{i}", T, body=b"z" * i) for i in range(3)]
        other = message("o", "/topic/b")
        send(store, *sent, other)
        assert store.totals("/topic/") == (4, sizes(*sent, other))
        commit(store, acknowledgements=((("c1", "s1"), 1),))
        assert store.count(T) == (2, sizes(*sent[1:]))
        commit(store, unsubscribes=(("c2", "s2"),))
        assert store.totals("/topic/") == (2, sizes(*sent[1:]))
        assert store.totals("") == store.totals("/topic/")
        assert store.totals("/topic/n") == (2, sizes(*sent[1:]))

    def test_counts_are_the_same_after_a_restart_and_after_a_crash(self, wal: WalStores) -> None:
        store = wal.open()
        seqs = send(store, *(message(f"m{i}", destination=f"/queue/{i % 3}") for i in range(10)))
        commit(store, removals=(("/queue/1", seqs[1]),))  # type: ignore[arg-type]
        before = {d: store.count(d) for d in store.destinations("")}
        totals = store.totals("/queue/")
        for reopen in (wal.restart, wal.crash):
            store = reopen()
            assert {d: store.count(d) for d in store.destinations("")} == before
            assert store.totals("/queue/") == totals

    def test_counts_are_read_while_another_thread_commits(self, wal: WalStores) -> None:
        store = wal.open()
        seen: list[tuple[int, int]] = []
        done = threading.Event()

        def watch() -> None:
            while not done.is_set():
                seen.append(store.totals("/queue/"))
                time.sleep(0)  # let the committing thread have the interpreter

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            for i in range(50):
                send(store, message(f"m{i}"))
        finally:
            done.set()
            watcher.join(10)
        assert seen and all(n * message("m0").size == size for n, size in seen)
        assert [n for n, _ in seen] == sorted(n for n, _ in seen)
        assert store.totals("/queue/")[0] == 50
