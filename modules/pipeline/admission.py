"""The admission module: what every message must be before the server takes it.

The first step of each pipeline. It checks that the sender may write to the
destination (and create it, if it does not exist yet: ``modules/security/permissions.py``),
resolves the destination (creating it on first use; a name that is not a queue
or a topic is refused), counts the sender among the destination's producers
(so that its watermarks can stop it), checks the class of service and the
transaction, and sets the expiry: the ``expires`` header capped by the
destination's ``maxttl``.
"""

from __future__ import annotations

from wiremq.modules.destinations.destination import Destination
from wiremq.modules.destinations.ttl import effective_expiry
from wiremq.modules.errors import Refused
from wiremq.modules.message import (
    BY_CLASS_OF_SERVICE,
    CLASS_OF_SERVICE,
    Message,
    Target,
    plain_admitted,
)
from wiremq.modules.pipeline.chain import Batch, GivenBack, PipelineModule
from wiremq.modules.security.permissions import CREATE, WRITE
from wiremq.modules.sender import Sender

SHUT_DOWN = Refused(
    "destination shut down", "the destination accepts no new messages until it is resumed"
)
BAD_CLASS_OF_SERVICE = Refused(
    "invalid class-of-service header", "class-of-service must be 1, 2 or 3"
)


class AdmissionModule(PipelineModule):
    name = "admission"

    def handle(self, batch: Batch) -> None:
        admitted: list[Message] = []
        # The last destination resolved, its name and for whom: a run of messages of one
        # sender to one destination is resolved, and its permissions checked, once.
        resolved: Destination | None = None
        name = ""
        run_sender: Sender | None = None
        # The destination and sender of the run admitted last: the sender is among its
        # producers (``_produces``), and its ``maxttl`` is read, once a run.
        admitted_to: Target | None = None
        admitted_from: Sender | None = None
        max_ttl = 0
        index, count = 0, len(batch)
        while index < count:
            if admitted_to is not None and not max_ttl:  # the run's plain rest, in C
                same = resolved is admitted_to and run_sender is admitted_from
                index = plain_admitted(
                    batch, index, admitted_to, admitted_from, name if same else None, admitted
                )
                if index == count:
                    break
            message = batch[index]
            index += 1
            try:
                target, sender = message.target, message.sender
                if target is None:
                    destination = message.destination
                    if resolved is None or destination != name or sender is not run_sender:
                        resolved = None  # until resolved: a refused name is asked again
                        resolved = self._resolve(destination, sender)
                        name, run_sender = destination, sender
                    target = message.target = resolved
                if target is not admitted_to or sender is not admitted_from:
                    admitted_to = None  # until admitted: a refused run is asked again
                    self._produces(sender, target)
                    admitted_to, admitted_from = target, sender
                    max_ttl = target.policy.maxttl
                headers = message.headers
                if CLASS_OF_SERVICE in headers or message.transaction is not None:
                    self._check(message, target)
                header = headers.get("expires")
                if header is not None or max_ttl:
                    self._expire(message, header, max_ttl)
            except Refused as refusal:
                self.context.refuse(message, refusal)
                continue
            admitted.append(message)
        if type(batch) is not GivenBack:
            self.context.journal.received(batch)
        if admitted:
            self.downstream.handle(admitted)

    def _resolve(self, name: str, sender: Sender | None) -> Destination:
        """The destination ``name`` names, if the sender may write to it (and create it,
        if it does not exist yet)."""
        destinations = self.context.destinations
        access = sender.access if sender is not None else None  # None: anyone may
        if access is None:
            return destinations.resolve(name)
        access.check(WRITE, name)
        if destinations.get(name) is None:
            access.check(CREATE, name)
        return destinations.resolve(name)

    def _produces(self, sender: Sender | None, target: Target) -> None:
        """Count ``sender`` among ``target``'s producers (its watermarks may stop it)."""
        if sender is not None and sender.producer not in target.producers:
            if target.policy.shutdown:
                raise SHUT_DOWN
            target.add_producer(sender.producer)

    def _check(self, message: Message, target: Target) -> None:
        """Check a message's class of service, and its transaction (if it has one)."""
        headers = message.headers
        if CLASS_OF_SERVICE in headers and headers[CLASS_OF_SERVICE] not in BY_CLASS_OF_SERVICE:
            raise BAD_CLASS_OF_SERVICE
        if message.transaction is not None:
            sender = message.sender
            owner = sender.transactions if sender is not None else None
            self.context.transactions.check(owner, message.transaction, target.domain)

    def _expire(self, message: Message, header: str | None, max_ttl: int) -> None:
        """Set a message's expiry from its ``expires`` header, capped by ``max_ttl``."""
        expires = effective_expiry(header, self.context.runtime.now_ms(), max_ttl)
        if expires and header != str(expires):
            message.headers["expires"] = str(expires)
        message.expires = expires
