"""The pipeline module interface and the chain that links modules together.

Each domain (point-to-point, publish-subscribe) has one chain of modules, as
listed in config.xml: socket reader -> [transaction, thread/buffer, storage,
distributing] -> socket writer. A module receives a message in ``handle`` and
must, now or later, either pass it to ``self.downstream.handle`` or call
``context.discard``. Every chain ends in a terminal stage that tells the
message's origin connection the server is done with it (which releases its
receipt), so a module never deals with receipts itself.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

import structlog

from wiremq.modules.message import Message
from wiremq.modules.runtime import Runtime

if TYPE_CHECKING:
    from wiremq.config.settings import Settings
    from wiremq.modules.broker import Broker

P2P = "p2p"
PUBSUB = "pubsub"
DOMAINS = (P2P, PUBSUB)

log = structlog.get_logger("wiremq.pipeline")


class Stage(Protocol):
    """Anything a message can be handed to."""

    def handle(self, message: Message) -> None: ...


def release(message: Message) -> None:
    """Tell the message's origin connection that the pipeline is done with it."""
    origin = message.origin
    if origin is not None:
        message.origin = None
        origin.message_completed(message)


def refuse(message: Message, reason: str) -> None:
    """Tell the message's origin connection that the server could not take the message."""
    origin = message.origin
    if origin is not None:
        message.origin = None
        origin.message_refused(message, reason)


class Terminal:
    """The end of every chain."""

    def handle(self, message: Message) -> None:
        release(message)


@dataclass
class ModuleContext:
    """What a module may use: the broker (and its runtime: timers, workers), the
    settings, and the domain of its chain. Modules never import the event loop."""

    broker: Broker
    settings: Settings
    domain: str

    @property
    def runtime(self) -> Runtime:
        return self.broker.runtime

    def discard(self, message: Message, reason: str) -> None:
        """Drop a message on purpose; it is logged and its origin released."""
        log.info("message.discarded", message_id=message.message_id, reason=reason)
        release(message)


class PipelineModule(ABC):
    """One processing step of a pipeline; see the module docstring for the contract."""

    #: the name config.xml uses for a built-in module
    name: ClassVar[str] = ""

    def __init__(self, context: ModuleContext) -> None:
        self.context = context
        self.downstream: Stage = Terminal()

    def bind(self, downstream: Stage) -> None:
        """Link this module to the next stage of its chain."""
        self.downstream = downstream

    @abstractmethod
    def handle(self, message: Message) -> None:
        """Process one message travelling down the chain."""


class Chain:
    """The modules of one domain, linked in order."""

    def __init__(self, domain: str, modules: list[PipelineModule]) -> None:
        self.domain = domain
        self.modules = modules
        stage: Stage = Terminal()
        for module in reversed(modules):
            module.bind(stage)
            stage = module
        self.head: Stage = stage

    def module(self, cls: type[PipelineModule]) -> PipelineModule | None:
        """The chain's module of this class, if it has one."""
        return next((m for m in self.modules if isinstance(m, cls)), None)
