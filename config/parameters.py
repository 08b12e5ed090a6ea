"""Every parameter the server has, in one table, and the rules between two of them.

Group and parameter names follow the iBus//MessageServer manual where it has
them; defaults are the manual's where it gives one, otherwise a documented
choice of ours.
"""

from __future__ import annotations

from wiremq.config.registry import Condition, Order, Parameter, Registry

KIB = 1024
MIB = 1024 * 1024

RELATIONS: list[Order] = []  # rules between two parameters (see ``Order``)

PARAMETERS = [
    # -- the server process ------------------------------------------------------------
    Parameter("Server", "datadir", str, "data", "Folder for the server's stores and files"),
    Parameter(
        "Server",
        "loglevel",
        str,
        "info",
        "Lowest level of log events written",
        choices=("debug", "info", "warning", "error"),
        live=True,
    ),
    Parameter(
        "Server",
        "logformat",
        str,
        "console",
        "How log events are written: readable lines or one JSON object per line",
        choices=("console", "json"),
    ),
    Parameter(
        "Server",
        "reservedfiledescriptors",
        int,
        64,
        "File descriptors kept for the stores, the write-ahead log and the journal (new "
        "log segments, journal files, packs): the listeners never take them, so that a "
        "connection storm cannot make a persistent SEND fail",
        unit="descriptors",
        minimum=8,
        maximum=1_000_000,
    ),
    Parameter(
        "Server",
        "replypoll",
        float,
        0.0002,
        "Longest time the event loop, with nothing else to do, polls for the next request "
        "instead of sleeping after a socket read whose handling wrote to a client (a "
        "MESSAGE, a RECEIPT): the client it answered is likely to send again at once, and "
        "waking a sleeping loop is the dearest step of a round trip on a virtual machine. "
        "Held off on a busy machine as the polling around the log's syncs is "
        "(WriteAheadLog.syncpollholdoff, syncpollpressure); 0: it sleeps",
        unit="s",
        minimum=0.0,
        maximum=0.01,
        live=True,
    ),
    Parameter(
        "Server",
        "recentevents",
        int,
        1000,
        "Recent events the server keeps in memory for the console's event list",
        unit="events",
        minimum=10,
        maximum=1_000_000,
    ),
    # -- the STOMP listener and its connections ------------------------------------------
    Parameter("StompListener", "host", str, "127.0.0.1", "Address the STOMP listener binds"),
    Parameter(
        "StompListener",
        "port",
        int,
        61613,
        "TCP port of the STOMP listener (0 picks a free port; -1: none, for TLS only)",
        minimum=0,
        maximum=65535,
        off=-1,
    ),
    Parameter(
        "StompListener",
        "tlsport",
        int,
        -1,
        "TCP port of the STOMP listener over TLS (0 picks a free port; -1: none); the "
        "certificate is the TLS group's",
        minimum=0,
        maximum=65535,
        off=-1,
    ),
    Parameter(
        "StompListener",
        "heartbeatsend",
        int,
        1000,
        "Shortest interval at which the server sends heart-beats: a client asking for them "
        "less often gets them at its own interval, one asking more often at this one (0: "
        "never)",
        unit="ms",
        minimum=0,
        maximum=3_600_000,
    ),
    Parameter(
        "StompListener",
        "heartbeatreceive",
        int,
        1000,
        "Shortest interval at which the server expects heart-beats from a client: one "
        "offering them less often is expected at its own interval (0: never checks)",
        unit="ms",
        minimum=0,
        maximum=3_600_000,
    ),
    Parameter(
        "StompListener",
        "heartbeatgrace",
        float,
        2.0,
        "A client silent for this many of its heart-beat intervals is disconnected",
        minimum=1.0,
        maximum=10.0,
    ),
    Parameter(
        "StompListener",
        "maxbodysize",
        int,
        10 * MIB,
        "Largest frame body accepted; a larger frame gets an ERROR",
        unit="bytes",
        minimum=0,
        maximum=1024 * MIB,
    ),
    Parameter(
        "StompListener",
        "maxheaders",
        int,
        1000,
        "Most headers one frame may carry",
        minimum=1,
        maximum=100_000,
    ),
    Parameter(
        "StompListener",
        "maxheaderlength",
        int,
        10 * KIB,
        "Longest header line (and command line) accepted",
        unit="bytes",
        minimum=64,
        maximum=MIB,
    ),
    Parameter(
        "StompListener",
        "closegrace",
        float,
        2.0,
        "How long a closing connection may take to write what is queued for it (an ERROR, "
        "say) before it is cut",
        unit="s",
        minimum=0.1,
        maximum=600.0,
    ),
]

# -- bounds on what one client controls (StompListener) ---------------------------------
PARAMETERS += [
    Parameter(
        "StompListener",
        "maxconnections",
        int,
        10000,
        "Connections open at once; a CONNECT past it gets an ERROR and the connection closes",
        unit="connections",
        minimum=1,
        maximum=1_000_000,
    ),
    Parameter(
        "StompListener",
        "maxconnectionsperaddress",
        int,
        1000,
        "Connections open at once from one client address; a CONNECT past it gets an "
        "ERROR and the connection closes",
        unit="connections",
        minimum=1,
        maximum=1_000_000,
    ),
    Parameter(
        "StompListener",
        "maxpendingconnections",
        int,
        1000,
        "Sockets the STOMP and WebSocket listeners keep open at once beyond maxconnections "
        "(not yet CONNECTed, or being refused); with them all open the listeners accept no "
        "more until one closes, so that the stores keep their file descriptors",
        unit="connections",
        minimum=1,
        maximum=1_000_000,
    ),
    Parameter(
        "StompListener",
        "connecttimeout",
        float,
        10.0,
        "A connection that has not sent CONNECT this long after it opened gets an ERROR "
        "and is closed",
        unit="s",
        minimum=0.1,
        maximum=3600.0,
    ),
    Parameter(
        "StompListener",
        "maxconnectsize",
        int,
        16 * KIB,
        "Bytes held for an unfinished CONNECT frame; past it the client gets an ERROR and "
        "the connection closes",
        unit="bytes",
        minimum=256,
        maximum=MIB,
    ),
    Parameter(
        "StompListener",
        "maxunfinishedbytes",
        int,
        64 * MIB,
        "Bytes of unfinished frames held over all connections; past it the connections "
        "holding the most are not read (but the one holding the most, so it can finish "
        "its frame) until the total is under it again",
        unit="bytes",
        minimum=MIB,
        maximum=64 * 1024 * MIB,
    ),
    Parameter(
        "StompListener",
        "discardbytes",
        int,
        256 * MIB,
        "Bytes still read (and thrown away) of a frame refused for its size before the "
        "connection closes, so that a client that is writing it finishes and reads the "
        "ERROR; a frame with more left is cut off (0: none)",
        unit="bytes",
        minimum=0,
        maximum=64 * 1024 * MIB,
    ),
    Parameter(
        "StompListener",
        "discardtime",
        float,
        10.0,
        "Longest time the rest of a frame refused for its size is read (and thrown away) "
        "before the connection closes",
        unit="s",
        minimum=0.1,
        maximum=600.0,
    ),
    Parameter(
        "StompListener",
        "maxsubscriptions",
        int,
        10000,
        "Subscriptions one connection may hold; a SUBSCRIBE past it gets an ERROR",
        unit="subscriptions",
        minimum=1,
        maximum=1_000_000,
    ),
    Parameter(
        "StompListener",
        "maxtransactions",
        int,
        1000,
        "Transactions one connection may have open; a BEGIN past it gets an ERROR",
        unit="transactions",
        minimum=1,
        maximum=1_000_000,
    ),
]

for _group in ("P2PPrioQueue", "PubSubPrioQueue"):
    PARAMETERS += [
        Parameter(
            _group,
            "maxnummessages",
            int,
            5000,
            "Messages held in the thread/buffer module at which it stops its domain's producers "
            "(started again at half)",
            minimum=1,
            maximum=10_000_000,
        ),
        Parameter(
            _group,
            "maxnumbytes",
            int,
            262144,
            "Bytes held in the thread/buffer module at which it stops its domain's producers "
            "(started again at half)",
            unit="bytes",
            minimum=1,
            maximum=1024 * MIB,
        ),
    ]

# -- the storage module's small processing buffer (group commit) ----------------------
for _group in ("P2PStore", "PubSubStore"):
    PARAMETERS += [
        Parameter(
            _group,
            "maxdelay",
            int,
            5,
            "Longest a persistent message waits in the small processing buffer before its "
            "batch is committed (0: no batching, one commit per message)",
            unit="ms",
            minimum=0,
            maximum=60_000,
        ),
        Parameter(
            _group,
            "maxdelayedmessagesnumber",
            int,
            50,
            "A batch is committed once it holds this many messages (the manual advises "
            "10-50 for throughput; a batch only grows while its messages wait anyway)",
            minimum=1,
            maximum=100_000,
        ),
        Parameter(
            _group,
            "maxdelayedmessagessize",
            int,
            131072,
            "A batch is committed once it holds this many bytes",
            unit="bytes",
            minimum=1,
            maximum=1024 * MIB,
        ),
    ]

# -- the persistent stores ----------------------------------------------------------------
for _group, _file, _what in (
    ("PersQueueFileStore", "persqueue.fs", "persistent queue messages"),
    ("TopicFileStore", "topics.fs", "persistent topic messages and durable subscriptions"),
):
    PARAMETERS += [
        Parameter(
            _group,
            "storageuri",
            str,
            "",
            f"Where {_what} are kept: file:///path/Data.fs, zeo://host:port or "
            f"postgresql://user:password@host:port/db (empty: {_file} in the data folder)",
        ),
        Parameter(
            _group,
            "indexcachesize",
            int,
            1000,
            "Objects the store's database connection keeps in memory (a message block "
            "holds up to 64 messages or 32 KiB)",
            minimum=100,
            maximum=10_000_000,
        ),
        Parameter(
            _group,
            "connecttimeout",
            float,
            10.0,
            "How long to wait for a ZEO or PostgreSQL server",
            unit="s",
            minimum=0.1,
            maximum=600.0,
        ),
        Parameter(
            _group,
            "readretryinterval",
            float,
            1.0,
            "Time before a read of the store for consumers (a queue's backlog, a durable "
            "subscriber's replay, a browser) that failed is tried again; they wait meanwhile",
            unit="s",
            minimum=0.01,
            maximum=600.0,
            live=True,
        ),
        Parameter(
            _group,
            "cleanupinterval",
            float,
            60.0,
            "Time between two cleanup runs removing expired messages",
            unit="s",
            minimum=0.05,
            maximum=86400.0,
            live=True,
        ),
        Parameter(
            _group,
            "cleanupgaptime",
            float,
            0.1,
            "Pause between two cleanup transactions while a run has more to remove",
            unit="s",
            minimum=0.0,
            maximum=60.0,
            live=True,
        ),
        Parameter(
            _group,
            "cleanuptransactionsize",
            int,
            500,
            "Most messages one cleanup transaction removes",
            minimum=1,
            maximum=100_000,
            live=True,
        ),
        Parameter(
            _group,
            "cleanuptransactiontime",
            float,
            1.0,
            "Most time one cleanup step spends before yielding to traffic",
            unit="s",
            minimum=0.01,
            maximum=600.0,
            live=True,
        ),
    ]
# -- free disk space where the stores and the log are ---------------------------------------
PARAMETERS += [
    Parameter(
        "DiskSpace",
        "minfreebytes",
        int,
        128 * MIB,
        "Persistent producers are stopped (not read) while a filesystem holding a store or "
        "the write-ahead log has less free space than this",
        unit="bytes",
        minimum=0,
        maximum=1 << 50,
        off=-1,
        live=True,
    ),
    Parameter(
        "DiskSpace",
        "resumefreebytes",
        int,
        192 * MIB,
        "Stopped persistent producers are read again once that filesystem has this much "
        "free space again",
        unit="bytes",
        minimum=0,
        maximum=1 << 50,
        off=-1,
        live=True,
    ),
    Parameter(
        "DiskSpace",
        "maxusedpercent",
        int,
        -1,
        "Persistent producers are also stopped while such a filesystem is this full",
        unit="%",
        minimum=1,
        maximum=100,
        off=-1,
        live=True,
    ),
    Parameter(
        "DiskSpace",
        "resumeusedpercent",
        int,
        -1,
        "They are read again once it is no fuller than this",
        unit="%",
        minimum=0,
        maximum=100,
        off=-1,
        live=True,
    ),
    Parameter(
        "DiskSpace",
        "usagesetpercent",
        int,
        80,
        "Disk usage (of the space in use where producers are stopped) at which a usage "
        "event is raised",
        unit="%",
        minimum=1,
        maximum=100,
        live=True,
    ),
    Parameter(
        "DiskSpace",
        "usageclearpercent",
        int,
        60,
        "Disk usage at which the usage event is cleared",
        unit="%",
        minimum=0,
        maximum=100,
        live=True,
    ),
    Parameter(
        "DiskSpace",
        "reservebytes",
        int,
        16 * MIB,
        "Space kept in a file on each such filesystem and given back when it is full, so "
        "that acknowledgements, the databases' catch-up with the log and a start can "
        "still write (0: none)",
        unit="bytes",
        minimum=0,
        maximum=1 << 40,
        live=True,
    ),
    Parameter(
        "DiskSpace",
        "checkinterval",
        float,
        1.0,
        "Time between two looks at the free space of those filesystems",
        unit="s",
        minimum=0.01,
        maximum=60.0,
        live=True,
    ),
]
# -- the write-ahead log in front of the stores' databases ---------------------------------
PARAMETERS += [
    Parameter(
        "WriteAheadLog",
        "segmentsize",
        int,
        16 * MIB,
        "Size of one file of the write-ahead log (in the data folder's wal/); a file goes "
        "once the databases have applied everything in it (HA: the most of the log kept "
        "in memory for the databases' catch-up)",
        unit="bytes",
        minimum=64 * KIB,
        maximum=1024 * MIB,
    ),
    Parameter(
        "WriteAheadLog",
        "catchupsize",
        int,
        256 * KIB,
        "Log applied to the databases in one commit each while they catch up",
        unit="bytes",
        minimum=4 * KIB,
        maximum=256 * MIB,
    ),
    Parameter(
        "WriteAheadLog",
        "catchupinterval",
        float,
        0.2,
        "Time between two catch-ups of the databases with the log (while they have "
        "something to catch up)",
        unit="s",
        minimum=0.01,
        maximum=60.0,
        live=True,
    ),
    Parameter(
        "WriteAheadLog",
        "catchuptime",
        float,
        0.25,
        "Most time one catch-up spends before the store worker serves reads again",
        unit="s",
        minimum=0.01,
        maximum=60.0,
        live=True,
    ),
    Parameter(
        "WriteAheadLog",
        "syncpoll",
        float,
        0.0003,
        "Longest time the event loop and the log's sync thread, with nothing else to do, "
        "poll for work instead of sleeping: the loop from the start of a sync (if the "
        "last one took no longer), both from its end, for the producers' next requests "
        "(0: they always sleep; no effect in HA mode, where the log is in the database)",
        unit="s",
        minimum=0.0,
        maximum=0.01,
        live=True,
    ),
    Parameter(
        "WriteAheadLog",
        "syncpollholdoff",
        float,
        0.5,
        "How long a thread stops polling around the log's syncs once the scheduler has cut "
        "one of its polls short for another task while the machine is busy "
        "(syncpollpressure): on a busy machine polling delays the producers instead of "
        "waking them sooner",
        unit="s",
        minimum=0.0,
        maximum=600.0,
        live=True,
    ),
    Parameter(
        "WriteAheadLog",
        "syncpollpressure",
        float,
        30.0,
        "CPU pressure (the share of the last second or so in which some task waited for "
        "a CPU, from Linux's /proc/pressure/cpu) from which a poll the scheduler cut short holds "
        "polling off (syncpollholdoff); below it the cut is taken for a passing wake-up "
        "and the event loop, and the sync thread waiting for a record being made, go on "
        "polling (the thread's polls after a write stop at any cut; 0, or where the "
        "kernel does not report it: every cut holds polling off)",
        unit="%",
        minimum=0.0,
        maximum=100.0,
        live=True,
    ),
]

PARAMETERS += [
    Parameter(
        "Server",
        "packinterval",
        float,
        600.0,
        "Time between two packs of the stores' databases, which give back the space of "
        "removed messages (0: never)",
        unit="s",
        minimum=0.0,
        maximum=30 * 86400.0,
    ),
    Parameter(
        "PersQueueFileStore",
        "expiryonread",
        bool,
        False,
        "Delete expired messages from the store as soon as a read meets them",
        live=True,
    ),
    Parameter(
        "PersQueueFileStore",
        "readmsgamount",
        int,
        500,
        "Messages read back from the store in one step when a queue's backlog is not in memory",
        minimum=1,
        maximum=100_000,
        live=True,
    ),
    Parameter(
        "PersQueueFileStore",
        "scanmsgamount",
        int,
        10_000,
        "Stored messages examined in one step when a queue searches its backlog in the store "
        "out of order: for a selective consumer that has nothing in memory it selects, or for "
        "messages of a higher priority than any in memory",
        minimum=1,
        maximum=1_000_000,
        live=True,
    ),
    Parameter(
        "PersQueueFileStore",
        "fastdeletionsize",
        int,
        50,
        "Acknowledged queue messages removed in one commit at most",
        minimum=1,
        maximum=100_000,
    ),
    Parameter(
        "TopicFileStore",
        "expiryonreplay",
        bool,
        False,
        "Delete expired messages from the store as soon as a replay meets them",
        live=True,
    ),
    Parameter(
        "TopicFileStore",
        "fastacknowledgesize",
        int,
        50,
        "Durable-subscriber acknowledgements stored in one commit at most",
        minimum=1,
        maximum=100_000,
    ),
    Parameter(
        "TopicFileStore",
        "replaymsgamount",
        int,
        100,
        "Messages read from the store in one replay step of a durable subscriber",
        minimum=1,
        maximum=100_000,
        live=True,
    ),
    Parameter(
        "TopicFileStore",
        "replaybyteamount",
        int,
        262144,
        "Bytes read from the store in one replay step (a larger single message is still read)",
        unit="bytes",
        minimum=1,
        maximum=1024 * MIB,
        live=True,
    ),
    Parameter(
        "TopicFileStore",
        "replaysleep",
        int,
        10,
        "Pause between two replay steps, so that several replays share the store",
        unit="ms",
        minimum=0,
        maximum=60_000,
        live=True,
    ),
    Parameter(
        "DurableTopicSubscriberThreadPool",
        "maxthreads",
        int,
        4,
        "Durable subscribers replaying from the store at the same time; the others wait",
        minimum=1,
        maximum=1000,
    ),
    Parameter(
        "DurableTopicSubscriberThreadPool",
        "maxprocessoriterations",
        int,
        100,
        "Messages one replay hands to its subscriber in one step; then the others' turn",
        minimum=1,
        maximum=100_000,
    ),
    Parameter(
        "DurableTopicSubscriptionManager",
        "globaldursubbytelimit",
        int,
        2097152,
        "Bytes of replayed messages in memory for all replays together",
        unit="bytes",
        minimum=1,
        maximum=1024 * MIB,
    ),
    # -- queue live buffers: persistent queue messages kept in memory ---------------------
    Parameter(
        "DestinationManager",
        "persqueuebytehighwatermark",
        int,
        1024000,
        "Bytes of persistent messages one queue keeps in memory; the rest are read back "
        "from the store when consumers need them",
        unit="bytes",
        minimum=0,
        maximum=64 * 1024 * MIB,
    ),
    Parameter(
        "DestinationManager",
        "globalpersqueuebytehighwatermark",
        int,
        16384000,
        "Bytes of persistent messages all queues together keep in memory",
        unit="bytes",
        minimum=0,
        maximum=64 * 1024 * MIB,
    ),
    Parameter(
        "DestinationManager",
        "qlbcleanupinterval",
        float,
        30.0,
        "Time between two passes that drop expired and old messages from queue live buffers",
        unit="s",
        minimum=0.05,
        maximum=86400.0,
        live=True,
    ),
    Parameter(
        "DestinationManager",
        "qlbcleanuptimetolive",
        float,
        60.0,
        "A queue whose oldest cached message is older than this gives its cache back; its "
        "messages are read from the store again when a consumer comes",
        unit="s",
        minimum=0.1,
        maximum=86400.0,
        live=True,
    ),
    Parameter(
        "DestinationManager",
        "tlbcleanupinterval",
        float,
        10.0,
        "Time between two passes that drop expired messages from the topic live buffers",
        unit="s",
        minimum=0.05,
        maximum=86400.0,
        live=True,
    ),
    Parameter(
        "VolQueueStoreImpl",
        "cleanupinterval",
        float,
        10.0,
        "Time between two passes that remove expired non-persistent queue messages",
        unit="s",
        minimum=0.05,
        maximum=86400.0,
        live=True,
    ),
    # -- per-destination policy (defaults; <Destination name="..."> overrides) ----------------
    Parameter(
        "Destination",
        "maxttl",
        int,
        0,
        "Longest time to live of a message; a publisher's expires header may only shorten "
        "it (0: no limit)",
        unit="ms",
        minimum=0,
        maximum=10 * 365 * 86_400_000,
        live=True,
    ),
    Parameter(
        "Destination",
        "expiredmessages",
        str,
        "discard",
        "What happens to an expired message: discarded, or moved to the dead message queue",
        choices=("discard", "deadmessagequeue"),
        live=True,
    ),
    Parameter(
        "Destination",
        "deadmessagequeue",
        str,
        "/queue/DMQ",
        "The queue dead messages are moved to (with headers original-destination, "
        "dead-reason and dead-delivery-count): expired ones if expiredmessages says so, those "
        "delivered too often, and those NACKed with requeue:false",
        live=True,
    ),
    # -- redelivery ------------------------------------------------------------------------
    Parameter(
        "Destination",
        "maxredeliveries",
        int,
        6,
        "Times a queue message is delivered again after a delivery came back unacknowledged "
        "(a NACK, or its consumer went away); once more and it moves to the dead message "
        "queue. Topic subscribers count NACKs only",
        unit="redeliveries",
        minimum=0,
        maximum=1_000_000,
        off=-1,
        live=True,
    ),
    Parameter(
        "Destination",
        "redeliverydelay",
        int,
        0,
        "How long a message that came back unacknowledged waits before it is delivered again "
        "(0: at once)",
        unit="ms",
        minimum=0,
        maximum=86_400_000,
        live=True,
    ),
    Parameter(
        "Destination",
        "redeliverybackoff",
        float,
        1.0,
        "Each further redelivery of a message waits this many times longer than the one "
        "before (1: always redeliverydelay)",
        minimum=1.0,
        maximum=100.0,
        live=True,
    ),
    Parameter(
        "Destination",
        "maxredeliverydelay",
        int,
        -1,
        "The longest a redelivery waits, however far the backoff grew",
        unit="ms",
        minimum=0,
        maximum=86_400_000,
        off=-1,
        live=True,
    ),
]

# -- high availability: an active/standby pair on a shared PostgreSQL (docs/ha.md) ---------
PARAMETERS += [
    Parameter(
        "HA",
        "enabled",
        bool,
        False,
        "Run as one node of an active/standby pair (or more) sharing its stores in "
        "PostgreSQL: the node holding the lease serves, the others wait with their STOMP "
        "and WebSocket ports closed and take over when it is gone",
    ),
    Parameter(
        "HA",
        "node",
        str,
        "",
        "This node's name in the lease, the failover history and the health answers "
        "(empty: the host name)",
    ),
    Parameter(
        "HA",
        "leasetime",
        float,
        4.0,
        "How long the lease lasts after the active's last renewal, by the database's "
        "clock: a standby takes over once it ran out (an active unreachable or paused)",
        unit="s",
        minimum=1.0,
        maximum=600.0,
    ),
    Parameter(
        "HA",
        "renewinterval",
        float,
        0.5,
        "Time between two renewals of the lease by the active",
        unit="s",
        minimum=0.05,
        maximum=300.0,
    ),
    Parameter(
        "HA",
        "tryinterval",
        float,
        0.5,
        "Time between two tries of a standby to take the lease; an active that died "
        "(its database session ended) is replaced at the next try",
        unit="s",
        minimum=0.05,
        maximum=60.0,
    ),
    Parameter(
        "HA",
        "margin",
        float,
        1.0,
        "An active that could not renew its lease stops serving (and becomes a standby) "
        "this long before the lease would run out by its own clock",
        unit="s",
        minimum=0.1,
        maximum=300.0,
    ),
]


def _postgresql(uri: object) -> bool:
    return str(uri).startswith(("postgresql://", "postgres://"))


def _not_postgresql(queues: object, topics: object) -> str:
    wrong = [
        f"{group}.storageuri ({_scheme(uri)})"
        for group, uri in (("PersQueueFileStore", queues), ("TopicFileStore", topics))
        if not _postgresql(uri)
    ]
    verb = "is not a postgresql://user:password@host:port/db URI"
    if len(wrong) > 1:
        verb = "are not postgresql://user:password@host:port/db URIs"
    return (
        "HA.enabled needs both stores in PostgreSQL, where every node sees them, but "
        + " and ".join(wrong)
        + f" {verb}"
    )


def _scheme(uri: object) -> str:
    """What a storage URI is, without repeating it (it may hold a password)."""
    text = str(uri)
    if not text:
        return "empty: a file in the data folder"
    scheme, found, _ = text.partition("://")
    return f"a {scheme}:// URI" if found else "a file path"


RELATIONS += [
    Condition(
        ("HA.enabled", "PersQueueFileStore.storageuri", "TopicFileStore.storageuri"),
        lambda enabled, queues, topics: (
            not enabled or (_postgresql(queues) and _postgresql(topics))
        ),
        lambda enabled, queues, topics: _not_postgresql(queues, topics),
    ),
    Condition(
        ("HA.renewinterval", "HA.margin", "HA.leasetime"),
        lambda renew, margin, lease: renew + margin < lease,
        lambda renew, margin, lease: (
            f"the active renews its lease every {renew:g} s and stops {margin:g} s before it "
            f"would run out, so the lease must last longer than {renew + margin:g} s "
            f"(HA.leasetime is {lease:g} s)"
        ),
    ),
]

# -- flow control: watermarks that stop producers (chapter 2 of the manual) ---------------


def _add_watermarks(
    group: str,
    prefix: str,
    what: str,
    scope: str,
    byte_high: int = -1,
    byte_low: int = -1,
    aliases: str = "",
) -> None:
    """Register the four watermarks (messages and bytes, high and low) of one scope, -1 off,
    and the rule that keeps each low with, and not above, its high."""
    for unit, label in (("msg", "messages"), ("byte", "bytes")):
        RELATIONS.append(
            Order(
                f"{group}.{prefix}{unit}lowwatermark",
                f"{group}.{prefix}{unit}highwatermark",
                "a watermark stops producers at its high and starts them again at its low",
                paired=True,
            )
        )
        for level in ("high", "low"):
            name = f"{prefix}{unit}{level}watermark"
            default = (byte_high if level == "high" else byte_low) if unit == "byte" else -1
            verb = "stop" if level == "high" else "start again"
            PARAMETERS.append(
                Parameter(
                    group,
                    name,
                    int,
                    default,
                    f"{label.capitalize()} in {what} at which the producers of {scope} {verb}",
                    unit=label,
                    minimum=0,
                    maximum=1 << 50,
                    off=-1,
                    live=True,
                    aliases=(f"{aliases}{unit}{level}watermark",) if aliases else (),
                )
            )


GB = 1_000_000_000
for _group, _what in (
    ("VolQueueStoreImpl", "the VolQueueStore"),
    ("PersQueueFileStore", "the PersQueueStore"),
    ("TopicFileStore", "the TopicStore"),
):
    _global = (16_000_000, 15_000_000) if _group == "VolQueueStoreImpl" else (4 * GB, 3_900_000_000)
    _add_watermarks(_group, "", f"one destination of {_what}", "that destination")
    _add_watermarks(_group, "global", _what, "its domain", *_global)
PARAMETERS.append(
    Parameter(
        "DestinationManager",
        "idletimetolive",
        float,
        60.0,
        "A destination with no messages, no consumers and no durable subscriptions that "
        "has delivered nothing for this long is removed (checked every that long); it is "
        "created again when next used",
        unit="s",
        minimum=0.1,
        maximum=86400.0,
        live=True,
    )
)
PARAMETERS.append(
    Parameter(
        "DestinationManager",
        "sweepslice",
        int,
        1000,
        "Destinations a periodic task that walks all of them (a cleanup, the console's "
        "sample of rates) looks at in one turn of the event loop; it goes on at the next "
        "turn, after what clients asked meanwhile",
        unit="destinations",
        minimum=1,
        maximum=1_000_000,
        live=True,
    )
)
_add_watermarks("DestinationManager", "topic", "one topic's live buffer", "that topic")
_add_watermarks(
    "DestinationManager",
    "topicglobal",
    "all topic live buffers",
    "every topic",
    1_024_000,
    1_000_000,
    aliases="globaltopic",
)

PARAMETERS += [
    # -- consumers and slow subscribers, per destination ----------------------------------
    Parameter(
        "Destination",
        "consumerQueueEntriesSize",
        int,
        1000,
        "A consumer's window in messages: delivered and not yet acknowledged (client "
        "modes) or not yet written to its socket (auto mode); SUBSCRIBE may set its own "
        "(a change applies to later subscriptions)",
        minimum=1,
        maximum=10_000_000,
        live=True,
    ),
    Parameter(
        "Destination",
        "consumerQueueEntriesBytes",
        int,
        4 * MIB,
        "A consumer's window in bytes (as consumerQueueEntriesSize)",
        unit="bytes",
        minimum=1,
        maximum=64 * 1024 * MIB,
        live=True,
    ),
    Parameter(
        "Destination",
        "slowsubscriberpolicy",
        str,
        "block",
        "What a topic does about a subscriber that cannot keep up: block (messages wait in "
        "the topic live buffer, publishers stop at its watermarks), discard-oldest (its "
        "oldest non-persistent messages are dropped, with a discard indication), or "
        "disconnect (it gets an ERROR and is disconnected); a change applies to later "
        "subscriptions",
        choices=("block", "discard-oldest", "disconnect"),
        live=True,
    ),
    Parameter(
        "Destination",
        "whenfull",
        str,
        "block",
        "A persistent SEND to a destination whose store is over its high watermark: block "
        "the producer, or fail it with an ERROR naming its receipt",
        choices=("block", "fail"),
    ),
    # -- spool checks before a persistent message is accepted ---------------------------
    Parameter(
        "Destination",
        "maxmsgsize",
        int,
        -1,
        "Largest persistent message the destination accepts",
        unit="bytes",
        minimum=0,
        maximum=1024 * MIB,
        off=-1,
        live=True,
    ),
    Parameter(
        "Destination",
        "spoolquota",
        int,
        -1,
        "Bytes of persistent messages the destination may hold in its store",
        unit="bytes",
        minimum=0,
        maximum=1 << 50,
        off=-1,
        live=True,
    ),
    Parameter(
        "Destination",
        "lowpriorityrejectlimit",
        int,
        -1,
        "Once the destination holds this many stored messages, persistent messages of "
        "priority below 4 are refused",
        unit="messages",
        minimum=0,
        maximum=1 << 40,
        off=-1,
        live=True,
    ),
    Parameter(
        "Destination",
        "shutdown",
        bool,
        False,
        "A shut-down destination refuses new messages (each SEND gets an ERROR naming its "
        "receipt); its consumers still get what it holds",
        live=True,
    ),
    Parameter(
        "Destination",
        "declared",
        bool,
        False,
        "A declared destination exists from the server's start and is not removed when idle "
        "(the console's Create declares the destination it makes); an undeclared one is made "
        "on first use and removed after idletimetolive unused",
        live=True,
    ),
    Parameter(
        "MessageSpool",
        "maxspoolusage",
        int,
        8 * GB,
        "Bytes of persistent messages all stores together may hold; past it persistent "
        "SENDs are refused",
        unit="bytes",
        minimum=0,
        maximum=1 << 50,
        off=-1,
    ),
    Parameter(
        "MessageSpool",
        "maxdeliveredunacked",
        int,
        100_000,
        "Messages delivered to client-acknowledging consumers and not yet acknowledged, "
        "for the whole server; past it no consumer gets more until acknowledgements come",
        unit="messages",
        minimum=1,
        maximum=1 << 40,
        off=-1,
    ),
    Parameter(
        "MessageSpool",
        "usagesetpercent",
        int,
        80,
        "Spool usage (of a quota) at which a usage event is raised",
        unit="%",
        minimum=1,
        maximum=100,
    ),
    Parameter(
        "MessageSpool",
        "usageclearpercent",
        int,
        60,
        "Spool usage at which the usage event is cleared",
        unit="%",
        minimum=0,
        maximum=100,
    ),
    # -- per-client egress queues (Solace client profile) ---------------------------------
    Parameter(
        "ClientEgress",
        "maxdepth",
        int,
        20000,
        "Depth of each per-client egress priority queue (C-1, D-3, D-2, D-1, G-1)",
        unit="work units of 2048 bytes",
        minimum=2,
        maximum=262144,
    ),
    Parameter(
        "ClientEgress",
        "minmsgburst",
        int,
        4,
        "Messages always admitted to a C-1 or D queue, whatever its depth",
        unit="messages",
        minimum=0,
        maximum=262144,
    ),
    Parameter(
        "ClientEgress",
        "g1minmsgburst",
        int,
        255,
        "Messages always admitted to the G-1 (persistent) queue, whatever its depth",
        unit="messages",
        minimum=0,
        maximum=262144,
    ),
    Parameter(
        "ClientEgress",
        "tcptransmitbytes",
        int,
        65536,
        "Bound of a client's TCP transmit queue: whole messages are moved to it while it "
        "holds less than this",
        unit="bytes",
        minimum=1024,
        maximum=64 * MIB,
    ),
    # -- slow subscribers ----------------------------------------------------------------------
    Parameter(
        "SlowSubscriber",
        "checkinterval",
        float,
        5.0,
        "Time between two checks of every client's slowness",
        unit="s",
        minimum=0.05,
        maximum=3600.0,
        live=True,
    ),
    Parameter(
        "SlowSubscriber",
        "warnshare",
        float,
        0.5,
        "Share of the last minute a client's socket was blocked with data waiting, past "
        "which a slow-subscriber event is raised",
        minimum=0.0,
        maximum=1.0,
        live=True,
    ),
    Parameter(
        "SlowSubscriber",
        "disconnectshare",
        float,
        0.9,
        "Share past which a slow subscriber is disconnected (when disconnect is on)",
        minimum=0.0,
        maximum=1.0,
        live=True,
    ),
    Parameter(
        "SlowSubscriber",
        "disconnect",
        bool,
        False,
        "Disconnect slow subscribers once the egress buffer load factor reaches loadfactor",
        live=True,
    ),
    Parameter(
        "SlowSubscriber",
        "loadfactor",
        float,
        100.0,
        "Egress buffer load factor (percent of all clients' egress capacity in use) at which "
        "slow subscribers are disconnected",
        unit="%",
        minimum=0.0,
        maximum=100.0,
        live=True,
    ),
    Parameter(
        "SlowSubscriber",
        "window",
        float,
        60.0,
        "The span of recent time over which a client's blocked share is measured",
        unit="s",
        minimum=1.0,
        maximum=3600.0,
    ),
]

# -- the audit journal (docs/journal.md) ----------------------------------------------------
PARAMETERS += [
    Parameter(
        "Journal",
        "enabled",
        bool,
        True,
        "Write the audit journal: a JSON Lines record of every message life event, in the "
        "data folder's journal/",
    ),
    Parameter(
        "Journal",
        "maxfilesize",
        int,
        64 * MIB,
        "Size at which a journal file is closed and the next one begun",
        unit="bytes",
        minimum=64 * KIB,
        maximum=16 * 1024 * MIB,
    ),
    Parameter(
        "Journal",
        "flushinterval",
        float,
        0.01,
        "How often the events recorded are handed to the journal's writer thread (a short "
        "interval keeps the batch in the processor's cache: 0.1 s cost a topic fan-out a "
        "tenth of its throughput more)",
        unit="s",
        minimum=0.001,
        maximum=10.0,
    ),
    Parameter(
        "Journal",
        "maxbacklog",
        int,
        200_000,
        "Journal records handed to the writer and not yet written at which every producer "
        "is stopped (started again at half): a slow disk slows the server, nothing is lost",
        unit="records",
        minimum=100,
        maximum=100_000_000,
    ),
    Parameter(
        "Destination",
        "journal",
        bool,
        True,
        "Whether the audit journal records this destination's messages (when Journal.enabled)",
    ),
]

# -- the admin console and JSON API (HTTP) ----------------------------------------------------
PARAMETERS += [
    Parameter(
        "Admin",
        "host",
        str,
        "127.0.0.1",
        "Address the admin console and JSON API listen on; without a users file in the data "
        "folder they listen on 127.0.0.1 only, whatever this says",
    ),
    Parameter(
        "Admin",
        "port",
        int,
        8161,
        "TCP port of the admin console and JSON API (0: no console)",
        minimum=0,
        maximum=65535,
    ),
    Parameter(
        "Admin",
        "maxconnections",
        int,
        64,
        "Connections the console keeps open at once; with them all open it accepts no more "
        "until one closes",
        unit="connections",
        minimum=1,
        maximum=100_000,
    ),
    Parameter(
        "Admin",
        "tls",
        bool,
        False,
        "Serve the console and JSON API over HTTPS only, with the TLS group's certificate "
        "(and its client certificate rule)",
    ),
    Parameter(
        "Admin",
        "sessiontimeout",
        float,
        1800.0,
        "A console login unused for this long must log in again",
        unit="s",
        minimum=10.0,
        maximum=30 * 86400.0,
        live=True,
    ),
    Parameter(
        "Admin",
        "sampleinterval",
        float,
        10.0,
        "Time between two samples of the console's charts (message rates, depths, memory)",
        unit="s",
        minimum=0.1,
        maximum=3600.0,
    ),
    Parameter(
        "Admin",
        "history",
        float,
        3600.0,
        "How far back the console's charts go",
        unit="s",
        minimum=10.0,
        maximum=7 * 86400.0,
    ),
    Parameter(
        "Admin",
        "chartdestinations",
        int,
        100,
        "Destinations whose depth and rates are kept for the charts (those with the most "
        "messages when each sample is taken)",
        unit="destinations",
        minimum=0,
        maximum=100_000,
    ),
    Parameter(
        "Admin",
        "metricsdestinations",
        int,
        100,
        "Destinations /metrics gives series of their own (those with the most messages at "
        "the scrape); the others count in the server's totals only",
        unit="destinations",
        minimum=0,
        maximum=100_000,
        live=True,
    ),
    Parameter(
        "Admin",
        "browsebytes",
        int,
        256,
        "Bytes of each message body shown when browsing a destination",
        unit="bytes",
        minimum=0,
        maximum=MIB,
        live=True,
    ),
    Parameter(
        "Admin",
        "messagebytes",
        int,
        MIB,
        "Bytes of a message body shown when one message is opened (its size is shown whole)",
        unit="bytes",
        minimum=0,
        maximum=64 * MIB,
        live=True,
    ),
    Parameter(
        "Admin",
        "countlimit",
        int,
        100_000,
        "Stored messages the console reads at most to count a durable subscription's backlog "
        "(past it the count shows as at least that many)",
        unit="messages",
        minimum=1000,
        maximum=100_000_000,
        live=True,
    ),
    Parameter(
        "Admin",
        "maxrequestbytes",
        int,
        64 * KIB,
        "Largest request body the JSON API takes; a larger one gets 413",
        unit="bytes",
        minimum=1024,
        maximum=64 * MIB,
        live=True,
    ),
]

# -- trust: logins, permissions, TLS and STOMP over WebSocket (docs/security.md) ---------
PARAMETERS += [
    Parameter(
        "Security",
        "allowanonymous",
        bool,
        False,
        "Once a users file exists, accept connections without a login, with the permissions "
        "of the groups anonymous and everyone (without a users file every connection is "
        "anonymous and may do everything)",
    ),
    Parameter(
        "Security",
        "loginfailuredelay",
        float,
        1.0,
        "How long a failed login waits for its ERROR; doubled for each further failure from "
        "the same address, whose next login is not checked before it is answered",
        unit="s",
        minimum=0.0,
        maximum=600.0,
        live=True,
    ),
    Parameter(
        "Security",
        "loginfailuremaxdelay",
        float,
        30.0,
        "Longest delay of a failed login, however many failures the address has",
        unit="s",
        minimum=0.0,
        maximum=3600.0,
        live=True,
    ),
    Parameter(
        "Security",
        "loginfailurememory",
        float,
        600.0,
        "Failed logins from an address are forgotten this long after the last of them",
        unit="s",
        minimum=1.0,
        maximum=7 * 86400.0,
        live=True,
    ),
    Parameter(
        "Security",
        "logincachesize",
        int,
        1000,
        "Successful logins remembered (a keyed hash of name and password, in memory only), so "
        "that a client logging in again is not hashed with scrypt again (0: none)",
        unit="logins",
        minimum=0,
        maximum=1_000_000,
    ),
    Parameter(
        "Security",
        "accesscachesize",
        int,
        1000,
        "Destinations whose permissions one connection remembers; past it they are looked up again",
        unit="destinations",
        minimum=1,
        maximum=1_000_000,
    ),
    Parameter(
        "Security",
        "usersfilecheckinterval",
        float,
        0.5,
        "How often the server looks whether the users file changed; connected clients "
        "follow the change: a subscription that lost read ends with an ERROR naming it, a "
        "removed user's connections are closed",
        unit="s",
        minimum=0.1,
        maximum=3600.0,
    ),
    Parameter(
        "TLS",
        "certfile",
        str,
        "",
        "PEM file holding the server's certificate, then any intermediate certificates "
        "(needed by every TLS listener)",
    ),
    Parameter("TLS", "keyfile", str, "", "PEM file holding the private key of the certificate"),
    Parameter(
        "TLS",
        "cafile",
        str,
        "",
        "PEM file of the certificate authorities whose client certificates are accepted",
    ),
    Parameter(
        "TLS",
        "clientcertificates",
        str,
        "none",
        "Whether TLS clients present a certificate signed by TLS.cafile: none (not asked), "
        "optional (checked if sent) or required; a client's certificate stands in for its "
        "login (the common name names the user)",
        choices=("none", "optional", "required"),
    ),
    Parameter(
        "TLS",
        "minimumversion",
        str,
        "1.2",
        "Oldest TLS version accepted",
        choices=("1.2", "1.3"),
    ),
    Parameter(
        "WebSocketListener",
        "host",
        str,
        "127.0.0.1",
        "Address the STOMP over WebSocket listeners bind",
    ),
    Parameter(
        "WebSocketListener",
        "port",
        int,
        -1,
        "TCP port of STOMP over WebSocket, ws:// (0 picks a free port; -1: none)",
        minimum=0,
        maximum=65535,
        off=-1,
    ),
    Parameter(
        "WebSocketListener",
        "tlsport",
        int,
        -1,
        "TCP port of STOMP over secure WebSocket, wss:// (0 picks a free port; -1: none)",
        minimum=0,
        maximum=65535,
        off=-1,
    ),
    Parameter(
        "WebSocketListener",
        "allowedorigins",
        str,
        "",
        "Web page origins (scheme://host[:port], separated by commas) allowed to connect; "
        "empty: any. Browsers send the page's origin; other clients send none and may connect",
    ),
]

# -- advanced memory management (chapter 3 of the manual) ------------------------------------
# TransactionMemSizeManager's reduce strategies and order qualifiers (modules/memory/txmemory.py).
STRATEGIES = ("MAXBYTES", "MAXMESSAGES", "ALL", "NONE", "OLDESTTX", "YOUNGESTTX")
ORDERS = (
    "MIXEDFIRSTSTANDARD",
    "MIXEDFIRSTXA",
    "FIRSTXA",
    "FIRSTSTANDARD",
    "ONLYXA",
    "ONLYSTANDARD",
)

PARAMETERS += [
    Parameter(
        "TransactionMemSizeManager",
        "uncommittedtxmemsizelimit",
        int,
        2_000_000,
        "Bytes of messages held in open transactions (standard and XA) in all; past it "
        "the reduce strategy discards transactions",
        unit="bytes",
        minimum=1,
        maximum=1 << 40,
    ),
    Parameter(
        "TransactionMemSizeManager",
        "txmemsizereducestategy",
        str,
        "MAXBYTES",
        "Which transactions are discarded when the limit is reached: the largest in bytes, "
        "the one with most messages, all, none (the producer is stopped instead), the "
        "oldest or the youngest first",
        choices=STRATEGIES,
        aliases=("txmemsizereducestrategy",),
    ),
    Parameter(
        "TransactionMemSizeManager",
        "txtypeorder",
        str,
        "MIXEDFIRSTSTANDARD",
        "How the strategy takes standard and XA transactions: alternately (standard or XA "
        "first), every one of a kind before the other, or only one kind",
        choices=ORDERS,
    ),
    Parameter(
        "QueueThreadPool",
        "maxthreads",
        int,
        4,
        "Queues delivering large messages (above MemWatch.messagethreshold) at the "
        "same time; the others wait until a delivery is written",
        minimum=1,
        maximum=1000,
    ),
    Parameter(
        "QueueThreadPool",
        "maxprocessoriterations",
        int,
        2,
        "Large messages one of those queues has on their way to consumers at once (handed "
        "to a client's egress and not yet written)",
        minimum=1,
        maximum=100_000,
    ),
    Parameter(
        "TopicThreadPool",
        "maxthreads",
        int,
        4,
        "Topics delivering large messages (above MemWatch.messagethreshold) at the "
        "same time; the others wait until a delivery is written",
        minimum=1,
        maximum=1000,
    ),
    Parameter(
        "TopicThreadPool",
        "maxprocessoriterations",
        int,
        2,
        "Large messages one of those topics has on their way to consumers at once (handed "
        "to a client's egress and not yet written)",
        minimum=1,
        maximum=100_000,
    ),
    Parameter(
        "XATransactionController",
        "defaulttimeout",
        float,
        60.0,
        "Timeout of an XA branch whose BEGIN gives none (xa-timeout); a branch not "
        "prepared within it is rolled back",
        unit="s",
        minimum=0.1,
        maximum=30 * 86400.0,
    ),
    Parameter(
        "MemWatch",
        "maxmemory",
        int,
        512 * MIB,
        "The server's memory: MemWatch's levels are fractions of it, measured as the "
        "process's resident memory (which includes the interpreter, about 45 MB idle)",
        unit="bytes",
        minimum=16 * MIB,
        maximum=1 << 44,
    ),
    Parameter(
        "MemWatch",
        "messagethreshold",
        int,
        65535,
        "Frames with a larger body are read only after a memory check; smaller ones are "
        "read without one (raising it speeds up small messages)",
        unit="bytes",
        minimum=0,
        maximum=1 << 40,
    ),
    Parameter(
        "MemWatch",
        "whenfull",
        str,
        "wait",
        "What the socket reader does with a large frame while memory is at the top "
        "level: stop reading that client until memory is free, or disconnect it with "
        "an ERROR",
        choices=("wait", "disconnect"),
    ),
    Parameter(
        "MemWatch",
        "checkinterval",
        float,
        0.5,
        "Time between two measurements of the server's memory",
        unit="s",
        minimum=0.01,
        maximum=3600.0,
    ),
    Parameter(
        "MemWatch",
        "collectshare",
        float,
        0.1,
        "The most of the server's time the collect action's extra garbage collections "
        "may take: after one that took d seconds the next waits at least d / collectshare "
        "(a heap of millions of live objects takes seconds to walk and frees nothing)",
        minimum=0.01,
        maximum=1.0,
    ),
    Parameter(
        "MemWatch",
        "hysteresis",
        float,
        0.05,
        "A level is left only once memory is this fraction of maxmemory below where it "
        "begins (a level in config.xml may say its own with clear=)",
        minimum=0.0,
        maximum=0.5,
    ),
]

RELATIONS += [
    Order(
        "Security.loginfailuredelay",
        "Security.loginfailuremaxdelay",
        "a failed login's first delay is not above its longest",
    ),
    Order(
        "MessageSpool.usageclearpercent",
        "MessageSpool.usagesetpercent",
        "the spool usage event is cleared at or below where it is raised",
    ),
    Order(
        "DiskSpace.minfreebytes",
        "DiskSpace.resumefreebytes",
        "producers stopped for lack of disk space are read again at or above where they stop",
        paired=True,
    ),
    Order(
        "DiskSpace.resumeusedpercent",
        "DiskSpace.maxusedpercent",
        "producers stopped for a full disk are read again at or below where they stop",
        paired=True,
    ),
    Order(
        "DiskSpace.usageclearpercent",
        "DiskSpace.usagesetpercent",
        "the disk usage event is cleared at or below where it is raised",
    ),
    Order(
        "SlowSubscriber.warnshare",
        "SlowSubscriber.disconnectshare",
        "a slow subscriber is warned about before it is disconnected",
    ),
]

REGISTRY = Registry(PARAMETERS, RELATIONS)
