"""kill -9 during commits, many times: what a commit confirmed is there, what a removal
confirmed never comes back, order and counts hold (MISSION B7).

A child (``child_writer.py``) writes to a FileStorage as fast as it can and logs
each operation before and after its commit; it is SIGKILLed at a random moment,
the store is reopened here (recovering a torn last transaction) and checked
against the log, and the next child carries on with the same files.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from wiremq.stores.persqueue import PersQueueStore
from wiremq.stores.storage import open_database
from wiremq.stores.topicstore import TopicStore

ROUNDS = 40
CHILD = Path(__file__).with_name("child_writer.py")


@dataclass
class Ledger:
    """What the children said, over all rounds: intended and confirmed, per kind."""

    lines: dict[str, set[str]] = field(default_factory=lambda: {t: set() for t in "aArRStTkK"})
    next_number: int = 0

    def read(self, output: str) -> None:
        complete = output[: output.rfind("\n") + 1]  # a line cut by the kill is dropped
        for line in complete.splitlines():
            tag, *items = line.split()
            if tag in self.lines:
                self.lines[tag].update(items)
        numbers = [int(n) for n in self.lines["a"] | self.lines["t"]]
        self.next_number = max(numbers, default=-1) + 1


def kill_at_random(uri: str, ledger: Ledger, rng: random.Random, errors: Path) -> None:
    """Run one child and SIGKILL it: in every other round right after it announced its
    n-th commit (so the kill lands inside a commit), else at a random time."""
    with errors.open("w") as stderr:
        child = subprocess.Popen(
            [sys.executable, str(CHILD), uri, str(ledger.next_number), str(rng.randrange(2**32))],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    assert child.stdout is not None
    ready = child.stdout.readline()
    assert ready == "READY\n", f"child did not start: {errors.read_text()}"
    output: list[str] = []
    announced = rng.choice([None, rng.randrange(1, 100)])

    def drain() -> None:  # also keeps the pipe empty, so the child never waits on it
        for line in child.stdout:  # type: ignore[union-attr]
            output.append(line)
            if announced is not None and len(output) >= announced and line[0] in "artk":
                child.send_signal(signal.SIGKILL)

    reader = threading.Thread(target=drain)
    reader.start()
    time.sleep(rng.uniform(0.02, 0.4))
    child.send_signal(signal.SIGKILL)
    assert child.wait(timeout=30) == -signal.SIGKILL, errors.read_text()
    reader.join(timeout=30)
    ledger.read("".join(output))


def check_queues(queue: PersQueueStore, ledger: Ledger) -> None:
    said = ledger.lines
    expiring = {n for n in said["a"] if int(n) % 7 == 0}
    present: list[str] = []
    for name in queue.destinations():
        batch = queue.read(name, now_ms=0, limit=10**6, max_bytes=10**12)
        numbers = [int(m.message_id) for _, m in batch.messages]
        assert numbers == sorted(numbers), f"order broken in {name}"
        assert queue.count(name) == len(numbers)
        assert queue.byte_count(name) == sum(m.size for _, m in batch.messages)
        present += [m.message_id for _, m in batch.messages]
    assert len(present) == len(set(present)) == queue.total_count()
    assert set(present) <= said["a"], "a message nobody sent"
    assert not set(present) & (said["R"] | said["S"]), "a confirmed removal came back"
    missing = said["A"] - said["r"] - expiring - set(present)
    assert not missing, f"confirmed messages lost: {sorted(missing)}"


def check_topic(topics: TopicStore, ledger: Ledger) -> None:
    said = ledger.lines
    info = topics.subscription("c", "s")
    assert info is not None
    confirmed_acks = [int(s) for s in said["K"]]
    assert info.acked_seq >= max(confirmed_acks, default=0), "a confirmed ack was lost"
    assert info.acked_seq <= max((int(s) for s in said["k"]), default=0)
    replay = topics.replay("c", "s", now_ms=0, max_messages=10**6, max_bytes=10**12)
    present = {m.message_id: seq for seq, m in replay.messages}
    assert topics.count("/topic/t") == len(present), "passed messages were not collected"
    owed = {n for n, seq in (item.split(":") for item in said["T"]) if int(seq) > info.acked_seq}
    assert owed <= set(present), f"confirmed topic messages lost: {sorted(owed - set(present))}"
    assert set(present) <= said["t"]


def test_nothing_confirmed_is_lost_and_nothing_removed_returns_after_kill_9(
    tmp_path: Path,
) -> None:
    uri = (tmp_path / "Data.fs").as_uri()
    ledger = Ledger()
    rng = random.Random(20240607)
    for _ in range(ROUNDS):
        kill_at_random(uri, ledger, rng, tmp_path / "child.err")
        db = open_database(uri)
        try:
            check_queues(PersQueueStore(db), ledger)
            check_topic(TopicStore(db), ledger)
        finally:
            db.close()
    assert len(ledger.lines["A"]) > 100 and ledger.lines["R"] and ledger.lines["K"]
    assert list(tmp_path.glob("Data.fs.tr*")), "no kill landed inside a commit: recovery untested"
