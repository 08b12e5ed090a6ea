"""Pieces the tests build with the registry's defaults (no defaults live in the code)."""

from __future__ import annotations

from wiremq.config.groups import (
    ClientBounds,
    EgressSettings,
    ListenerSettings,
    StoreSettings,
    TransactionMemorySettings,
    WalSettings,
)
from wiremq.config.parameters import REGISTRY
from wiremq.config.settings import Settings
from wiremq.modules.client.egress import Egress, Outbox
from wiremq.modules.flow.egress_queues import QueueLimits, queue_limits
from wiremq.modules.stomp.codec import DecoderLimits, FrameDecoder
from wiremq.stores.storage import Location

SETTINGS = Settings(REGISTRY)
_LISTENER = ListenerSettings.read(SETTINGS, "StompListener")
LIMITS = DecoderLimits(_LISTENER.maxbodysize, _LISTENER.maxheaders, _LISTENER.maxheaderlength)
BOUNDS = ClientBounds.read(SETTINGS, "StompListener")
TRANSACTION_MEMORY = TransactionMemorySettings.read(SETTINGS, "TransactionMemSizeManager")
EGRESS_LIMITS: tuple[QueueLimits, ...] = queue_limits(EgressSettings.read(SETTINGS, "ClientEgress"))


def decoder(version: str | None = "1.2") -> FrameDecoder:
    """A frame decoder with the server's default limits, for ``version`` (None: CONNECT)."""
    found = FrameDecoder(LIMITS)
    found.version = version
    return found


def egress(outbox: Outbox | None = None) -> Egress:
    """A client egress with the default queue limits."""
    return Egress(outbox or Outbox(), EGRESS_LIMITS)


_STORE = StoreSettings.read(SETTINGS, "PersQueueFileStore")
_WAL = WalSettings.read(SETTINGS, "WriteAheadLog")
WAL_OPTIONS = {"segment_bytes": _WAL.segmentsize, "catch_up_bytes": _WAL.catchupsize}


def location(uri: str, connect_timeout: float = _STORE.connecttimeout) -> Location:
    """A store at ``uri`` opened as the server opens it by default."""
    return Location(uri, connect_timeout, _STORE.indexcachesize)
