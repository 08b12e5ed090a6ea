"""Typed settings objects: the registry's values as frozen dataclasses, one per concern.

Code outside ``config/`` reads every tunable through one of these, never by
name: each field is named after a registry parameter and has no default, so
a value can only come from the registry (its default, config.xml or the
command line). ``read(settings, group, prefix)`` fills the fields from the
parameters ``group.<prefix><field>``, so one class serves every group with
the same parameters (``P2PStore`` and ``PubSubStore``, say).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Self

from wiremq.config.settings import Settings


class SettingsGroup:
    """Base of the typed settings objects (see the module docstring)."""

    @classmethod
    def read(cls, settings: Settings, group: str, prefix: str = "") -> Self:
        """The values in force of ``group``'s parameters named ``prefix`` + field name."""
        return cls(**{f.name: settings.get(group, prefix + f.name) for f in fields(cls)})  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class ServerSettings(SettingsGroup):
    datadir: str
    loglevel: str
    logformat: str
    packinterval: float
    recentevents: int
    replypoll: float
    reservedfiledescriptors: int


@dataclass(frozen=True, slots=True)
class ListenerSettings(SettingsGroup):
    """StompListener: the socket, heart-beats and the bounds of one frame."""

    host: str
    port: int
    heartbeatsend: int
    heartbeatreceive: int
    heartbeatgrace: float
    maxbodysize: int
    maxheaders: int
    maxheaderlength: int
    closegrace: float
    tlsport: int


@dataclass(frozen=True, slots=True)
class SecuritySettings(SettingsGroup):
    """Security: logins, their throttling and the permission caches."""

    allowanonymous: bool
    loginfailuredelay: float
    loginfailuremaxdelay: float
    loginfailurememory: float
    logincachesize: int
    accesscachesize: int
    usersfilecheckinterval: float


@dataclass(frozen=True, slots=True)
class TlsSettings(SettingsGroup):
    """TLS: the certificate of every TLS listener and how clients' certificates are taken."""

    certfile: str
    keyfile: str
    cafile: str
    clientcertificates: str
    minimumversion: str


@dataclass(frozen=True, slots=True)
class WebSocketSettings(SettingsGroup):
    """WebSocketListener: STOMP over WebSocket."""

    host: str
    port: int
    tlsport: int
    allowedorigins: str


@dataclass(frozen=True, slots=True)
class ClientBounds(SettingsGroup):
    """StompListener: what one client, or all of them, may hold of the server."""

    maxconnections: int
    maxconnectionsperaddress: int
    maxpendingconnections: int
    connecttimeout: float
    maxconnectsize: int
    maxunfinishedbytes: int
    discardbytes: int
    discardtime: float
    maxsubscriptions: int
    maxtransactions: int


@dataclass(frozen=True, slots=True)
class BufferSettings(SettingsGroup):
    """P2PPrioQueue / PubSubPrioQueue: the thread/buffer module."""

    maxnummessages: int
    maxnumbytes: int


@dataclass(frozen=True, slots=True)
class StoreBufferSettings(SettingsGroup):
    """P2PStore / PubSubStore: the storage module's small processing buffer."""

    maxdelay: int
    maxdelayedmessagesnumber: int
    maxdelayedmessagessize: int


@dataclass(frozen=True, slots=True)
class StoreSettings(SettingsGroup):
    """PersQueueFileStore / TopicFileStore: where a store lives and how it is cleaned."""

    storageuri: str
    indexcachesize: int
    connecttimeout: float
    readretryinterval: float
    cleanupinterval: float
    cleanupgaptime: float
    cleanuptransactionsize: int
    cleanuptransactiontime: float


@dataclass(frozen=True, slots=True)
class WalSettings(SettingsGroup):
    """WriteAheadLog: its files and how the databases catch up with it."""

    segmentsize: int
    catchupsize: int
    catchupinterval: float
    catchuptime: float
    syncpoll: float
    syncpollholdoff: float
    syncpollpressure: float


@dataclass(frozen=True, slots=True)
class HaSettings(SettingsGroup):
    """HA: this node of an active/standby pair, its name and its lease's times."""

    enabled: bool
    node: str
    leasetime: float
    renewinterval: float
    tryinterval: float
    margin: float


@dataclass(frozen=True, slots=True)
class DiskSpaceSettings(SettingsGroup):
    """DiskSpace: the free-disk watermark of each filesystem holding a store or the log."""

    minfreebytes: int
    resumefreebytes: int
    maxusedpercent: int
    resumeusedpercent: int
    usagesetpercent: int
    usageclearpercent: int
    reservebytes: int
    checkinterval: float


@dataclass(frozen=True, slots=True)
class QueueStoreSettings(SettingsGroup):
    """PersQueueFileStore: reading queue backlogs back and batching their removals."""

    expiryonread: bool
    readmsgamount: int
    scanmsgamount: int
    fastdeletionsize: int


@dataclass(frozen=True, slots=True)
class ReplaySettings(SettingsGroup):
    """TopicFileStore: durable subscribers' replays and acknowledgements."""

    expiryonreplay: bool
    replaymsgamount: int
    replaybyteamount: int
    replaysleep: int
    fastacknowledgesize: int


@dataclass(frozen=True, slots=True)
class LiveBufferSettings(SettingsGroup):
    """DestinationManager: the queue and topic live buffers and their cleanup."""

    persqueuebytehighwatermark: int
    globalpersqueuebytehighwatermark: int
    qlbcleanupinterval: float
    qlbcleanuptimetolive: float
    tlbcleanupinterval: float


@dataclass(frozen=True, slots=True)
class IdleDestinationSettings(SettingsGroup):
    """DestinationManager: when destinations nobody uses are removed."""

    idletimetolive: float


@dataclass(frozen=True, slots=True)
class SweepSettings(SettingsGroup):
    """DestinationManager: how many destinations a periodic task walks per turn."""

    sweepslice: int


@dataclass(frozen=True, slots=True)
class WatermarkLimits(SettingsGroup):
    """One scope's four watermarks (read with its prefix: "", "global", "topic", ...)."""

    msghighwatermark: int
    msglowwatermark: int
    bytehighwatermark: int
    bytelowwatermark: int

    @property
    def enabled(self) -> bool:
        """Whether any threshold is on (both its bounds set)."""
        return (self.msghighwatermark >= 0 and self.msglowwatermark >= 0) or (
            self.bytehighwatermark >= 0 and self.bytelowwatermark >= 0
        )


@dataclass(frozen=True, slots=True)
class DestinationPolicy(SettingsGroup):
    """The Destination group as it applies to one destination (``for_destination``)."""

    maxttl: int
    expiredmessages: str
    deadmessagequeue: str
    consumerQueueEntriesSize: int
    consumerQueueEntriesBytes: int
    slowsubscriberpolicy: str
    whenfull: str
    maxmsgsize: int
    spoolquota: int
    lowpriorityrejectlimit: int
    shutdown: bool
    declared: bool
    journal: bool
    maxredeliveries: int
    redeliverydelay: int
    redeliverybackoff: float
    maxredeliverydelay: int

    @classmethod
    def for_destination(cls, settings: Settings, name: str) -> DestinationPolicy:
        """The policy of ``name``: the defaults, with its own ``<Destination>`` overrides."""
        return cls(**{f.name: settings.for_destination(name, f.name) for f in fields(cls)})  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class SpoolSettings(SettingsGroup):
    """MessageSpool: the whole spool's limits and usage events."""

    maxspoolusage: int
    maxdeliveredunacked: int
    usagesetpercent: int
    usageclearpercent: int


@dataclass(frozen=True, slots=True)
class EgressSettings(SettingsGroup):
    """ClientEgress: the per-client egress queues and TCP transmit queue."""

    maxdepth: int
    minmsgburst: int
    g1minmsgburst: int
    tcptransmitbytes: int


@dataclass(frozen=True, slots=True)
class SlowSubscriberSettings(SettingsGroup):
    checkinterval: float
    warnshare: float
    disconnectshare: float
    disconnect: bool
    loadfactor: float
    window: float


@dataclass(frozen=True, slots=True)
class ReplayPoolSettings(SettingsGroup):
    """DurableTopicSubscriberThreadPool: replays running at once, messages per step."""

    maxthreads: int
    maxprocessoriterations: int


@dataclass(frozen=True, slots=True)
class WorkPoolSettings(SettingsGroup):
    """QueueThreadPool / TopicThreadPool: destinations delivering large messages at once,
    and large messages each may have on their way."""

    maxthreads: int
    maxprocessoriterations: int


@dataclass(frozen=True, slots=True)
class DurableLimitSettings(SettingsGroup):
    """DurableTopicSubscriptionManager: bytes being replayed at once, all subscribers."""

    globaldursubbytelimit: int


@dataclass(frozen=True, slots=True)
class CleanupIntervalSettings(SettingsGroup):
    """A memory store's cleanup period (VolQueueStoreImpl)."""

    cleanupinterval: float


@dataclass(frozen=True, slots=True)
class JournalSettings(SettingsGroup):
    """Journal: the audit journal's files and its writer."""

    enabled: bool
    maxfilesize: int
    flushinterval: float
    maxbacklog: int


@dataclass(frozen=True, slots=True)
class AdminSettings(SettingsGroup):
    """Admin: the console's listener, logins, charts and requests."""

    host: str
    port: int
    maxconnections: int
    tls: bool
    sessiontimeout: float
    sampleinterval: float
    history: float
    chartdestinations: int
    metricsdestinations: int
    browsebytes: int
    messagebytes: int
    countlimit: int
    maxrequestbytes: int


@dataclass(frozen=True, slots=True)
class TransactionMemorySettings(SettingsGroup):
    """TransactionMemSizeManager: the bytes open transactions may hold, and what then."""

    uncommittedtxmemsizelimit: int
    txmemsizereducestategy: str
    txtypeorder: str


@dataclass(frozen=True, slots=True)
class XASettings(SettingsGroup):
    """XATransactionController."""

    defaulttimeout: float


@dataclass(frozen=True, slots=True)
class MemWatchSettings(SettingsGroup):
    """MemWatch: the server's memory, its levels and the socket reader's check."""

    maxmemory: int
    messagethreshold: int
    whenfull: str
    checkinterval: float
    hysteresis: float
    collectshare: float
