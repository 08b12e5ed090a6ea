"""Child process for the kill -9 test: writes to the stores as fast as it can, forever.

Before each commit it prints what it is about to do (lower-case tag) and after
the commit returns, what is now durable (upper-case tag), so the parent knows,
whenever it kills this process, what must be there and what must not:

    a N...   / A N...    queue messages N (queue /queue/qN%3; N%7==0 already expired)
    r N...   / R N...    removal (acknowledgement) of queue messages N
    S N...               expired queue messages swept
    t N...   / T N:SEQ...   topic messages N and their positions
    k SEQ    / K SEQ     durable subscriber c/s acknowledged up to SEQ

Each commit lingers a millisecond between writing its data (tpc_vote) and
marking it committed (``FileStorage._finish``, ZODB's seam for such faults), so
that kills often leave a voted but unfinished transaction for recovery to cut.

usage: child_writer.py URI FIRST_NUMBER SEED
"""

from __future__ import annotations

import random
import sys
import time

from ZODB.FileStorage import FileStorage

from wiremq.stores.persqueue import PersQueueStore
from wiremq.stores.records import StoredMessage
from wiremq.stores.storage import open_database
from wiremq.stores.topicstore import TopicStore

TOPIC = "/topic/t"
QUEUES = 3


def queue_of(n: int) -> str:
    return f"/queue/q{n % QUEUES}"


def queue_message(n: int, rng: random.Random) -> StoredMessage:
    return StoredMessage(
        str(n),
        queue_of(n),
        (("n", str(n)),),
        rng.randbytes(rng.randrange(2000)),
        expires=1 if n % 7 == 0 else 0,
    )


def linger_before_finish() -> None:
    finish = FileStorage._finish

    def slow_finish(self: FileStorage, *args: object) -> None:
        time.sleep(0.001)
        finish(self, *args)

    FileStorage._finish = slow_finish  # type: ignore[method-assign]


def say(tag: str, *items: object) -> None:
    print(tag, *items, flush=True)


def main(uri: str, first: int, seed: int) -> None:
    rng = random.Random(seed)
    linger_before_finish()
    db = open_database(uri)
    queue, topics = PersQueueStore(db), TopicStore(db)
    topics.subscribe("c", "s", TOPIC)
    numbers = iter(range(first, 2**62))
    say("READY")
    while True:
        op = rng.random()
        if op < 0.4:
            batch = [next(numbers) for _ in range(rng.randrange(1, 30))]
            say("a", *batch)
            queue.append([queue_message(n, rng) for n in batch])
            say("A", *batch)
        elif op < 0.65:
            name = f"/queue/q{rng.randrange(QUEUES)}"
            read = queue.read(name, now_ms=0, limit=20)
            chosen = rng.sample(read.messages, min(len(read.messages), rng.randrange(1, 15)))
            ids = [m.message_id for _, m in chosen]
            say("r", *ids)
            queue.remove(name, [s for s, _ in chosen])
            say("R", *ids)
        elif op < 0.8:
            batch = [next(numbers) for _ in range(rng.randrange(1, 10))]
            say("t", *batch)
            seqs = topics.append([StoredMessage(str(n), TOPIC, (), b"t" * 100) for n in batch])
            say("T", *(f"{n}:{seq}" for n, seq in zip(batch, seqs, strict=True)))
        elif op < 0.9:
            replay = topics.replay("c", "s", now_ms=0, max_messages=rng.randrange(1, 10))
            if replay.messages:
                say("k", replay.last_seq)
                topics.acknowledge("c", "s", replay.last_seq)
                say("K", replay.last_seq)
        else:
            swept = queue.sweep_expired(10, transaction_size=5, max_messages=20)
            say("S", *(m.message_id for m in swept.removed))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
