"""kill -9 aimed at the write-ahead log (MISSION B7): during record writes (torn tails),
during writes and syncs on the C sync thread, between the log and ZODB's catch-up,
during catch-up commits and during the replay at open. What a commit confirmed is
there, what a removal confirmed never comes back, and the one transaction in doubt at
each kill is there entirely or not at all.

A child (``child_wal_writer.py``) commits through ``WalStore`` on two FileStorage
databases and logs each operation before and after its commit; it is SIGKILLed at a
random moment, the store is reopened here and checked against the log, and the next
child carries on with the same files.
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

from structlog.testing import capture_logs

from tests.defaults import WAL_OPTIONS, location
from wiremq.stores.messagestore import WalStore

CHILD = Path(__file__).with_name("child_wal_writer.py")
TOPIC = "/topic/t"
KEY = ("c", "s")
TAGS = "aArReEtTkKxX"


@dataclass
class Ledger:
    """What the children said, over all rounds: intended and confirmed, per kind."""

    lines: dict[str, set[str]] = field(default_factory=lambda: {t: set() for t in TAGS})
    mixed: dict[str, list[tuple[int, str, int]]] = field(default_factory=lambda: {"x": [], "X": []})
    next_number: int = 0
    torn_tails: int = 0  # records torn by a kill, cut at the next open
    replays: int = 0  # opens that found records ZODB lacked
    doubts: int = 0  # kills during a mixed transaction's commit

    def read(self, output: str) -> None:
        complete = output[: output.rfind("\n") + 1]  # a line cut by the kill is dropped
        self.torn_tails += complete.count("wal.torn_tail")
        for line in complete.splitlines():
            tag, *items = line.split()
            if tag == "x":
                n, victim, upto = items
                self.mixed["x"].append((int(n), victim, int(upto)))
                self.lines["a"].add(n)
                self.lines["t"].add(n)
                self.lines["r"].add(victim)
            elif tag == "X":
                n, victim, upto, seq = items
                self.mixed["X"].append((int(n), victim, int(upto)))
                self.lines["A"].add(n)
                self.lines["T"].add(f"{n}:{seq}")
                self.lines["R"].add(victim)
            elif tag in self.lines:
                self.lines[tag].update(items)
        numbers = [int(n) for n in self.lines["a"] | self.lines["t"]]
        self.next_number = max(numbers, default=-1) + 1

    def in_doubt(self) -> tuple[int, str, int] | None:
        """The mixed transaction announced but not confirmed, if the kill hit one."""
        pending = set(self.mixed["x"]) - set(self.mixed["X"])
        assert len(pending) <= 1
        return pending.pop() if pending else None


def run_child(folder: Path, mode: str, ledger: Ledger, rng: random.Random, errors: Path) -> str:
    """Run one child and SIGKILL it; returns its output."""
    with errors.open("w") as stderr:
        child = subprocess.Popen(
            [sys.executable, str(CHILD), str(folder), mode, str(ledger.next_number)]
            + [str(rng.randrange(2**32))],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    assert child.stdout is not None
    output: list[str] = []
    while not output or output[-1] not in ("READY\n", "OPENING\n"):  # after its open's logs
        output.append(child.stdout.readline())
        assert output[-1], f"child did not start: {errors.read_text()}"
    # Kill at a random time, or right after the n-th announced commit (so the kill
    # lands inside it), or after the first mixed transaction announced past the n-th.
    announced = rng.randrange(1, 60)
    aim = rng.choice(["time", "artkxe", "x"]) if mode in ("run", "thread") else "time"

    def drain() -> None:  # also keeps the pipe empty, so the child never waits on it
        for line in child.stdout:  # type: ignore[union-attr]
            output.append(line)
            if aim != "time" and len(output) >= announced and line[0] in aim:
                child.send_signal(signal.SIGKILL)

    reader = threading.Thread(target=drain)
    reader.start()
    time.sleep(rng.uniform(0.0, 0.15) if mode == "replay" else rng.uniform(0.05, 0.4))
    child.send_signal(signal.SIGKILL)
    assert child.wait(timeout=30) == -signal.SIGKILL, errors.read_text()
    reader.join(timeout=30)
    text = "".join(output)
    ledger.read(text)
    return text


def check_queues(store: WalStore, ledger: Ledger) -> None:
    said = ledger.lines
    present: list[str] = []
    for name in store.destinations("/queue/"):
        batch = store.read(name, now_ms=0, after_seq=0, limit=10**6, max_bytes=10**12)
        numbers = [int(m.message_id) for _, m in batch.messages]
        assert numbers == sorted(numbers), f"order broken in {name}"
        assert store.count(name) == (len(numbers), sum(m.size for _, m in batch.messages))
        present += [m.message_id for _, m in batch.messages]
    assert len(present) == len(set(present)) == store.totals("/queue/")[0]
    assert set(present) <= said["a"], "a message nobody sent"
    assert not set(present) & (said["R"] | said["E"]), "a confirmed removal came back"
    missing = said["A"] - said["r"] - said["e"] - set(present)
    assert not missing, f"confirmed messages lost: {sorted(missing)}"


def check_topic(store: WalStore, ledger: Ledger) -> int:
    said = ledger.lines
    (info,) = store.subscriptions()
    assert info.acked_seq >= max((int(s) for s in said["K"]), default=0), "a confirmed ack lost"
    replay = store.read(TOPIC, now_ms=0, after_seq=info.acked_seq, limit=10**6, max_bytes=10**12)
    present = {m.message_id: seq for seq, m in replay.messages}
    assert store.count(TOPIC)[0] == len(present), "passed messages were not collected"
    owed = {n for n, seq in (item.split(":") for item in said["T"]) if int(seq) > info.acked_seq}
    assert owed <= set(present), f"confirmed topic messages lost: {sorted(owed - set(present))}"
    assert set(present) <= said["t"]
    return info.acked_seq


def check_mixed(store: WalStore, ledger: Ledger, acked: int) -> None:
    """The transaction in doubt is all there or not at all."""
    doubt = ledger.in_doubt()
    if doubt is None:
        return
    ledger.doubts += 1
    n, victim, upto = doubt
    queued = {
        m.message_id
        for name in store.destinations("/queue/")
        for _, m in store.read(name, now_ms=0, after_seq=0, limit=10**6, max_bytes=10**12).messages
    }
    topic = store.read(TOPIC, now_ms=0, after_seq=0, limit=10**6, max_bytes=10**12)
    parts = {
        "queue append": str(n) in queued,
        "topic append": str(n) in {m.message_id for _, m in topic.messages},
        "queue removal": victim not in queued,
        "acknowledgement": acked >= upto,
    }
    assert len(set(parts.values())) == 1, f"transaction {doubt} half applied: {parts}"
    ledger.mixed["x"].remove(doubt)  # settled either way
    if parts["queue append"]:  # committed after all: its effects are owed from now on
        ledger.mixed["X"].append(doubt)
        ledger.lines["A"].add(str(n))
        ledger.lines["R"].add(victim)


def reopen_and_check(folder: Path, ledger: Ledger) -> None:
    with capture_logs() as logs:
        store = WalStore(
            folder / "wal",
            location((folder / "persqueue.fs").as_uri()),
            location((folder / "topics.fs").as_uri()),
            **WAL_OPTIONS,
        )
    ledger.torn_tails += sum(e["event"] == "wal.torn_tail" for e in logs)
    ledger.replays += any(e["event"] == "wal.replayed" for e in logs)
    try:
        check_queues(store, ledger)
        check_mixed(store, ledger, check_topic(store, ledger))
    finally:
        store.close()


def test_nothing_confirmed_is_lost_and_nothing_half_done_after_kill_9(tmp_path: Path) -> None:
    ledger = Ledger()
    rng = random.Random(20250611)
    errors = tmp_path / "child.err"
    interrupted_replays = 0
    for round_ in range(22):
        if round_ % 4 == 3:  # a long log, then a kill while the next open replays it
            run_child(tmp_path, "backlog", ledger, rng, errors)
            output = run_child(tmp_path, "replay", ledger, rng, errors)
            interrupted_replays += "OPENED" not in output
        else:  # every other round commits through the C sync thread, as the server does
            run_child(tmp_path, "thread" if round_ % 2 else "run", ledger, rng, errors)
        reopen_and_check(tmp_path, ledger)
    said = ledger.lines
    assert len(said["A"]) > 100 and said["R"] and said["K"] and said["E"] and ledger.mixed["X"]
    assert ledger.torn_tails, "no kill tore a record: the torn tail path is untested"
    assert ledger.replays, "no kill landed between the log and ZODB"
    assert ledger.doubts, "no kill landed in a mixed transaction"
    assert interrupted_replays, "no kill landed in a replay at open"
