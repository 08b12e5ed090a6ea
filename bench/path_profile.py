"""The cost of each step of the message path, per message, in one process.

A real ``Core`` (the default pipelines, no store: the messages are not
persistent) on a minimal runtime, a producer connection and consumer
connections whose sockets are simulated: the producer's SEND frames go in as
the socket reader hands them over (300 a read), the consumers' MESSAGE frames
come out as the socket writer takes them (``Egress.write_out``). No sockets
and no Twisted, so what it measures is the Python of the path alone.

It prints the CPU per message of the whole path (best of several runs), then
splits it over the steps by a profile (cProfile's cumulative times, scaled to
the unprofiled total, since the profiler itself slows small functions most).

    .venv/bin/python bench/path_profile.py                      # queue, 1 consumer, ack auto
    .venv/bin/python bench/path_profile.py --topic --consumers 4
    .venv/bin/python bench/path_profile.py --ack client-individual
    .venv/bin/python bench/path_profile.py --users   # clients log in; permissions checked
    .venv/bin/python bench/path_profile.py --journal            # with the audit journal
    .venv/bin/python bench/path_profile.py --persistent         # a lone persistent producer
    .venv/bin/python bench/path_profile.py --lone --reads 20000  # one SEND a read
    .venv/bin/python bench/path_profile.py --header region:EU --header price:150 \
        --selector "region = 'EU' AND price > 100"    # a selective queue (issue 27's row)

With ``--journal`` the server's audit journal is on, written to the bench's
temporary data folder; its worker runs inline after each read, so its encoding
and writing count in the path's CPU as they count in the server's.

With ``--lone`` each read holds one SEND (``--reads`` counts messages): the
round trip's path, a message read alone through to its MESSAGE written, where
what is paid per read (the session's event list, the connection's submit, the
readiness checks, the egress flush) is paid per message.

With ``--persistent`` the path is the persistent one of a lone producer that
waits for the receipt of each SEND (no consumer: the queue fills): the real
store (the write-ahead log and its databases in the temporary data folder), the
group commit, and the server's log writer, whose C sync thread writes and syncs
each record while this thread waits for its report on a pipe, as the event loop
does (never polling: ``WriteAheadLog.syncpoll`` 0). One message a read, so
``--reads`` counts messages. The CPU is this thread's user time alone (the
sync's system calls and the wait are not the path's Python). For an instruction
count free of timing noise, run it twice under callgrind with different
``--reads`` and ``--runs 1`` and divide the difference of the two totals by the
difference of the messages (start-up and the profile cancel out)::

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        .venv/bin/python bench/path_profile.py --persistent --runs 1 --reads 1000
"""

from __future__ import annotations

import argparse
import atexit
import cProfile
import pstats
import resource
import select
import shutil
import tempfile
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from wiremq.config.groups import EgressSettings
from wiremq.config.parameters import REGISTRY
from wiremq.config.settings import Settings
from wiremq.config.xmlconfig import default_pipelines
from wiremq.modules.client.connection import ClientConnection
from wiremq.modules.client.egress import Egress, Outbox
from wiremq.modules.core import Core
from wiremq.modules.flow.egress_queues import queue_limits
from wiremq.modules.security.users import UsersFile
from wiremq.server.cli import collect_less
from wiremq.server.logging import configure_logging
from wiremq.server.runtime import SyncThreadLogWriter
from wiremq.server.stores import open_store

READ = 300  # frames per socket read (a 64 KiB read of 128-byte messages holds about 300)
BUDGET = 65536  # what the socket writer takes per drain (ClientEgress.tcptransmitbytes)

# The steps: each the cumulative time of a function, less that of the steps it calls.
# (Making a message is not one: a class's C constructor is no call to the profiler.)
WIRE_TAIL = "<method 'wire_tail' of 'Message' objects>"  # in C: modules/_message.c
STEPS = [
    ("decode and check frames (session)", ("session.py", "receive_data"), []),
    ("admission module", ("admission.py", "handle"), [("transaction.py", "handle")]),
    ("transaction module", ("transaction.py", "handle"), [("prioqueue.py", "handle")]),
    # what it holds it hands on in drain (the step leaves that out: the path never fills it)
    ("thread/buffer module", ("prioqueue.py", "handle"), [("storage.py", "handle")]),
    ("storage module", ("storage.py", "handle"), [("distributing.py", "handle")]),
    (
        "distributing module",
        ("distributing.py", "handle"),
        [("chain.py", "handle"), ("~", WIRE_TAIL), ("egress.py", "push_message")],
    ),
    ("  encoding MESSAGE tails", ("~", WIRE_TAIL), []),
    ("  egress queues (enqueue)", ("egress.py", "push_message"), []),
    ("completion and receipts (terminal)", ("chain.py", "handle"), []),
    ("socket writer (egress -> bytes)", ("egress.py", "write_out"), []),
    ("ACK handling (core session)", ("subscriptions.py", "acknowledge"), []),
    (
        "journal: records written (C)",
        ("~", "<method 'add' of 'wiremq.modules.journal._encode.Recorder' objects>"),
        [],
    ),
    ("journal: files written", ("files.py", "write"), []),
    (
        "store: group commit (storage module)",
        ("groupcommit.py", "_start"),
        [("store.py", "commit")],
    ),
    ("store: decide and encode (begin)", ("messagestore.py", "begin"), []),
    ("store: durable (finish)", ("store.py", "_finish"), [("groupcommit.py", "_finish")]),
    ("store: committed -> on", ("storage.py", "_stored"), [("chain.py", "handle")]),
]


class Runtime:
    """Timers never fire; call_soon runs after each read, as the server's does.

    With an outbox (a store is open), the server's log writer
    (``runtime.SyncThreadLogWriter``: its C sync thread writes and syncs each record)
    on no reactor: ``synced`` waits on its pipe and reports its writes, as the event
    loop does; the event loop never polls (``sync_poll`` 0)."""

    sync_poll = 0.0
    sync_poll_holdoff = 0.0

    def __init__(self, outbox: Outbox | None = None) -> None:
        self.soon: deque[Callable[[], None]] = deque()
        self.reactor = self
        if outbox is not None:
            self.outbox = outbox
            self.log: SyncThreadLogWriter | None = SyncThreadLogWriter(self)  # type: ignore[arg-type]
        else:
            self.log = None

    def addReader(self, reader: object) -> None:  # noqa: N802 - the reactor's name
        pass

    def removeReader(self, reader: object) -> None:  # noqa: N802
        pass

    def call_soon(self, function: Callable[[], None]) -> None:
        self.soon.append(function)

    def call_later(self, delay: float, function: Callable[[], None]) -> Runtime:
        return self

    def after_writes(self, function: Callable[[], None]) -> None:
        assert self.outbox is not None
        self.outbox.wake(function)

    def log_writer(self) -> SyncThreadLogWriter:
        assert self.log is not None, "no store in this bench"
        return self.log

    def synced(self) -> None:
        """Wait for the log's writes in hand (and those their reports start), reporting
        each as the event loop does (its receipts then go out)."""
        log = self.log
        assert log is not None
        drained: list[None] = []
        log.drained().addCallback(drained.append)
        while not drained:
            select.select([log], [], [])
            log.doRead()
            self.run()

    def cancel(self) -> None:
        pass

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()

    def worker(self, name: str) -> Runtime:
        if name not in ("login", "journal") and self.log is None:
            raise RuntimeError("no store in this bench")
        return self  # logins are checked at once, store work (a new segment) too

    def submit(
        self, call: Callable[[], object], done: Callable[[object], None], failed: object
    ) -> None:
        done(call())

    def run(self) -> None:
        while self.soon:
            self.soon.popleft()()


class Reader:
    def pause(self) -> None:
        pass

    def resume(self) -> None:
        pass


class Writer:
    """Takes what the socket writer would; a client-acknowledging consumer ACKs each."""

    def __init__(self, egress: Egress, ack: bool) -> None:
        egress.writer = self
        self.ack = ack
        self.connection: ClientConnection | None = None

    def can_answer(self, egress: Egress) -> bool:
        """No socket for the sync thread to send a receipt to: receipts come out here."""
        return False

    def drain(self, egress: Egress) -> None:
        parts = egress.write_out(BUDGET)
        if self.ack and self.connection is not None:
            acks = [
                b"ACK\nid:"
                + head[head.index(b"ack:") + 4 : head.index(b"\n", head.index(b"ack:"))]
                + b"\n\n\0"
                for head in parts[::2]
                if head.startswith(b"MESSAGE")
            ]
            if acks:
                self.connection.data_received(b"".join(acks), time.monotonic())
        if egress.queues.pending:
            egress.outbox.ready.append(egress)


class Simulation:
    """A real ``Core`` (default pipelines, no store) on the minimal runtime, and clients
    whose sockets are simulated: what they send goes in as a socket read, what the server
    writes to them is taken by their writer.

    ``users``: a users file, the clients log in as a user who may read, write and create
    (not an admin: every permission is looked up); else none, and nothing is checked.
    ``journal``: the audit journal on, in the data folder; ``persistent``: the store too."""

    def __init__(
        self, users: bool = False, journal: bool = False, persistent: bool = False
    ) -> None:
        data = tempfile.mkdtemp(prefix="wiremq-path-profile-")
        atexit.register(shutil.rmtree, data, True)  # the log alone is 64 MiB of segments
        self.login = b""
        if users:
            UsersFile(data).set("bench", "bench-pw", "viewer")
            UsersFile(data).grant("bench", None, ">", ["read", "write", "create"])
            self.login = b"login:bench\npasscode:bench-pw\n"
        self.settings = Settings(
            REGISTRY,
            {
                "StompListener.heartbeatsend": 0,
                "StompListener.heartbeatreceive": 0,
                "Server.datadir": data,
            },
        )
        self.outbox = Outbox()
        self.runtime = Runtime(self.outbox if persistent else None)
        folder = Path(data) / "journal" if journal else None
        self.store = open_store(self.settings) if persistent else None
        self.core = Core(self.settings, self.runtime, self.store, default_pipelines(), folder)  # type: ignore[arg-type]
        self.core.restore()
        self.limits = queue_limits(EgressSettings.read(self.settings, "ClientEgress"))

    def client(self, name: str, writer: Callable[[Egress], object]) -> ClientConnection:
        """A connected client whose egress is drained by ``writer(egress)``."""
        egress = Egress(self.outbox, self.limits)
        drains = writer(egress)
        connection = self.core.connect(egress, name, Reader(), time.monotonic())
        if isinstance(drains, Writer):
            drains.connection = connection
        self.read(connection, b"CONNECT\naccept-version:1.2\n" + self.login + b"\n\0")
        assert connection.session.version is not None and not connection.egress.close_requested
        return connection

    def read(self, connection: ClientConnection, data: bytes) -> None:
        """One socket read of ``data``, then what it asked to run soon, then the writes."""
        connection.data_received(data, time.monotonic())
        self.runtime.run()
        self.outbox.flush()
        self.core.journal.flush()

    def synced(self) -> None:
        """Wait for the log's writes in hand, reporting each (its receipts then go out)."""
        self.runtime.synced()
        self.outbox.flush()
        self.core.journal.flush()


def build(
    destination: str,
    consumers: int,
    ack: str,
    users: bool = False,
    journal: bool = False,
    selector: str | None = None,
    headers: tuple[str, ...] = (),
    frames: int = READ,
) -> Callable[[int], None]:
    """``run(reads)``: that many socket reads of ``frames`` SENDs (with ``headers``, each
    ``name:value``) to ``destination``, whose consumers subscribe with ``selector``."""
    simulation = Simulation(users, journal)
    line = "" if selector is None else f"selector:{selector}\n"
    for n in range(consumers):
        subscribe = f"SUBSCRIBE\nid:0\ndestination:{destination}\nack:{ack}\n{line}\n\0".encode()
        consumer = simulation.client(f"consumer-{n}", lambda e: Writer(e, ack != "auto"))
        simulation.read(consumer, subscribe)
    producer = simulation.client("producer", lambda e: Writer(e, False))
    extra = "".join(f"{header}\n" for header in headers)
    frame = f"SEND\ndestination:{destination}\n{extra}content-length:128\n\n".encode()
    frame += b"x" * 128
    chunk = (frame + b"\0") * frames

    def run(reads: int) -> None:
        for _ in range(reads):
            simulation.read(producer, chunk)

    return run


def build_persistent(destination: str, journal: bool = False) -> Callable[[int], None]:
    """A lone producer of persistent messages that waits for each one's receipt."""
    simulation = Simulation(journal=journal, persistent=True)
    producer = simulation.client("producer", lambda e: Writer(e, False))
    receipts = 0

    def run(messages: int) -> None:
        nonlocal receipts
        for _ in range(messages):
            receipts += 1
            frame = (
                (
                    f"SEND\ndestination:{destination}\npersistent:true\nreceipt:{receipts}\n"
                    "content-length:128\n\n"
                ).encode()
                + b"x" * 128
                + b"\0"
            )
            simulation.read(producer, frame)
            simulation.synced()
        assert simulation.store is not None
        stored = simulation.store.count(destination)[0]
        assert stored == receipts, f"{stored} messages stored, {receipts} sent"

    return run


def user_time() -> float:
    """This thread's user CPU time, in seconds."""
    return resource.getrusage(resource.RUSAGE_THREAD).ru_utime


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--topic", action="store_true", help="a topic instead of a queue")
    parser.add_argument("--consumers", type=int, default=1)
    parser.add_argument("--ack", default="auto", choices=("auto", "client-individual"))
    parser.add_argument("--reads", type=int, default=300)
    parser.add_argument(
        "--lone", action="store_true", help="one SEND a read (the round trip's path)"
    )
    parser.add_argument("--users", action="store_true", help="a users file; clients log in")
    parser.add_argument("--journal", action="store_true", help="with the audit journal on")
    parser.add_argument(
        "--persistent",
        action="store_true",
        help="a lone persistent producer waiting for each receipt, into the real store",
    )
    parser.add_argument("--selector", help="the consumers subscribe with this selector")
    parser.add_argument(
        "--header", action="append", default=[], help="NAME:VALUE on every SEND (repeatable)"
    )
    parser.add_argument("--runs", type=int, default=5, help="measured runs (the best counts)")
    parser.add_argument("--no-profile", action="store_true", help="the total alone")
    args = parser.parse_args()
    configure_logging("warning")
    destination = "/topic/t" if args.topic else "/queue/q"
    if args.persistent:
        run = build_persistent(destination, args.journal)
        messages, clock = args.reads, user_time
    else:
        frames = 1 if args.lone else READ
        run = build(
            destination,
            args.consumers,
            args.ack,
            args.users,
            args.journal,
            args.selector,
            tuple(args.header),
            frames,
        )
        messages, clock = args.reads * frames, time.process_time
    run(20)  # warm-up
    collect_less()  # as the server does
    best = float("inf")
    for _ in range(args.runs):
        started = clock()
        run(args.reads)
        best = min(best, clock() - started)
    total = best / messages * 1e6
    kind = "topic" if args.topic else "queue"
    who = ", clients logged in" if args.users else ""
    journal = ", journal on" if args.journal else ""
    if args.selector is not None:
        journal += f", selector {args.selector!r}"
    if args.persistent:
        print(f"{kind}, persistent, a lone producer waiting for each receipt{journal}:")
        print(
            f"  whole path: {total:.2f} us user CPU per message "
            f"(best of {args.runs} runs of {messages:,})"
        )
    else:
        lone = ", one SEND a read" if args.lone else ""
        print(
            f"{kind}, {args.consumers} consumer(s), ack {args.ack}, 128-byte bodies"
            f"{lone}{who}{journal}:"
        )
        print(
            f"  whole path: {total:.2f} us CPU per message "
            f"(best of {args.runs} runs of {messages:,})"
        )
    if args.no_profile:
        return
    # Persistent: this thread's time, not the waits for the sync thread.
    profile = cProfile.Profile(time.thread_time) if args.persistent else cProfile.Profile()
    profile.runcall(run, args.reads)
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    whole = sum(tottime for _, _, tottime, _, _ in stats.values())

    def cumulative(file: str, function: str) -> float:
        return float(
            sum(
                entry[3]
                for (path, _, name), entry in stats.items()
                if path.endswith(file) and name == function
            )
        )

    for label, step, callees in STEPS:
        own = cumulative(*step) - sum(cumulative(*callee) for callee in callees)
        if own > 0:
            print(f"  {label:40} {own / whole * total:6.2f} us  ({own / whole:5.1%})")


if __name__ == "__main__":
    main()
