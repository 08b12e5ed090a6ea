"""File descriptors: what the listeners may take of the process's limit (RLIMIT_NOFILE).

Every socket a listener accepts is a descriptor, and so is every file the stores,
the write-ahead log and the journal open (a new log segment, a journal file, a
pack). When accepts took the last of them, a commit that needed a new segment
failed (a persistent SEND refused), each accept failed with EMFILE and the
connections waited unanswered, and samplers reading /proc failed. So, at start:

- the descriptors the configuration needs are counted (``DescriptorNeeds``): those
  open now, ``Server.reservedfiledescriptors`` for the stores, log and journal, and
  the sockets the listeners may hold: ``StompListener.maxconnections`` and
  ``maxpendingconnections`` (STOMP and WebSocket), ``Admin.maxconnections``;
- if the soft limit is lower, it is raised towards the hard limit; if that is still
  short, ``maxconnections`` and ``maxpendingconnections`` are lowered in force to what
  fits, with a warning that says what to raise (``fit_descriptors``);
- each group of listeners stops accepting while its sockets are all open
  (``SocketGate``), so the reserve is never taken: a connection then waits in the
  listen backlog until one closes, and every connection accepted is answered
  (CONNECTED, or an ERROR and a close).
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass, replace
from typing import Any

from twisted.internet.interfaces import IProtocolFactory
from twisted.protocols.policies import ProtocolWrapper, WrappingFactory

from wiremq.config.groups import AdminSettings, ClientBounds, ServerSettings
from wiremq.config.settings import Settings

# When the limit is short, the share of the sockets left that goes to connections not yet
# (or no longer) admitted, at least one: a refusal takes a socket for a moment only.
PENDING_SHARE = 10


def open_descriptors() -> int:
    """How many descriptors the process has open now."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(folder)) - 1  # the listing's own descriptor
        except OSError:
            continue
    return 0


def descriptor_limits() -> tuple[int, int]:
    """The process's soft and hard RLIMIT_NOFILE (a huge number where unlimited)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = 1 << 31
    return (unlimited if soft == resource.RLIM_INFINITY else soft), (
        unlimited if hard == resource.RLIM_INFINITY else hard
    )


@dataclass(frozen=True, slots=True)
class DescriptorNeeds:
    """What a configuration needs of the descriptor limit (see the module docstring)."""

    in_use: int  # open now
    reserved: int  # Server.reservedfiledescriptors
    console: int  # Admin.maxconnections (0: no console)
    connections: int  # StompListener.maxconnections
    pending: int  # StompListener.maxpendingconnections

    @classmethod
    def of(cls, settings: Settings, in_use: int) -> DescriptorNeeds:
        bounds = ClientBounds.read(settings, "StompListener")
        admin = AdminSettings.read(settings, "Admin")
        return cls(
            in_use,
            ServerSettings.read(settings, "Server").reservedfiledescriptors,
            admin.maxconnections if admin.port else 0,
            bounds.maxconnections,
            bounds.maxpendingconnections,
        )

    @property
    def total(self) -> int:
        return self.in_use + self.reserved + self.console + self.connections + self.pending

    def within(self, limit: int) -> DescriptorNeeds | None:
        """The sockets lowered to fit ``limit`` (None: not even one connection fits)."""
        room = limit - self.in_use - self.reserved - self.console
        if room < 2:
            return None
        connections = min(self.connections, room - max(1, room // PENDING_SHARE))
        return replace(self, connections=connections, pending=min(self.pending, room - connections))

    def advice(self, limit: int, hard: int) -> str:
        """What is short and what to raise, for an operator."""
        return (
            f"StompListener.maxconnections ({self.connections}) and maxpendingconnections "
            f"({self.pending}), with Admin.maxconnections ({self.console}), the "
            f"{self.reserved} descriptors of Server.reservedfiledescriptors and the "
            f"{self.in_use} open at start, need {self.total} file descriptors; the process "
            f"may open {limit} (hard limit {hard}): raise the limit (ulimit -n {self.total} "
            f"before wiremq serve; LimitNOFILE={self.total} under systemd) or lower "
            "StompListener.maxconnections"
        )


@dataclass(frozen=True, slots=True)
class DescriptorFit:
    """What ``fit_descriptors`` found and did."""

    needs: DescriptorNeeds  # as configured
    limit: int  # the soft limit now
    hard: int
    raised_from: int | None  # the soft limit before it was raised, if it was
    lowered: DescriptorNeeds | None  # the sockets in force, if they had to be lowered


class TooFewDescriptors(Exception):
    """Not even one connection fits in the descriptors the process may open."""


def fit_descriptors(settings: Settings) -> DescriptorFit:
    """Make the configuration fit the descriptor limit (see the module docstring): raise
    the soft limit if needed, else lower ``maxconnections`` and ``maxpendingconnections``
    in ``settings`` (in force, not saved). Call it before the listeners open."""
    needs = DescriptorNeeds.of(settings, open_descriptors())
    soft, hard = descriptor_limits()
    raised_from = None
    if needs.total > soft and soft < hard:
        wanted = min(needs.total, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            raised_from, soft = soft, wanted
        except (OSError, ValueError):
            pass
    lowered = None
    if needs.total > soft:
        lowered = needs.within(soft)
        if lowered is None:
            raise TooFewDescriptors(needs.advice(soft, hard))
        settings.set("StompListener.maxconnections", lowered.connections)
        settings.set("StompListener.maxpendingconnections", lowered.pending)
    return DescriptorFit(needs, soft, hard, raised_from, lowered)


def check_descriptors(settings: Settings) -> str | None:
    """What ``wiremq config check`` says of the descriptor limit of the shell it runs in:
    None if ``serve`` would fit in it (raising its soft limit if need be)."""
    needs = DescriptorNeeds.of(settings, open_descriptors())
    _, hard = descriptor_limits()
    if needs.total <= hard:
        return None
    lowered = needs.within(hard)
    meanwhile = (
        f"; until then serve takes at most {lowered.connections} connections"
        if lowered is not None
        else "; serve cannot start"
    )
    return needs.advice(hard, hard) + meanwhile


class SocketGate:
    """The sockets a group of listeners has open, and the most it may: with all of them
    open the listeners accept no more (connections wait in the listen backlog) until one
    closes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0
        self.peak = 0
        self.closed_gate = 0  # times the listeners stopped accepting
        self._ports: list[Any] = []  # twisted.internet.tcp.Port (a FileDescriptor)

    def watch(self, port: Any) -> Any:
        """A listener of the group (its port is returned). A port accepts up to its
        ``numberAccepts`` connections each time it is readable, before the gate can stop
        it: each time, that is bounded by the sockets the group may still open."""
        self._ports.append(port)
        accept = port.doRead

        def accept_within_the_limit() -> Any:
            port.numberAccepts = max(1, min(port.numberAccepts, self.limit - self.open))
            return accept()

        port.doRead = accept_within_the_limit
        if self.open >= self.limit:
            port.stopReading()
        return port

    def opened(self) -> None:
        self.open += 1
        self.peak = max(self.peak, self.open)
        if self.open == self.limit:
            self.closed_gate += 1
            for port in self._ports:
                if port.connected:
                    port.stopReading()

    def closed(self) -> None:
        self.open -= 1
        if self.open == self.limit - 1:
            for port in self._ports:
                if port.connected:
                    port.startReading()

    def state(self) -> dict[str, int]:
        return {"open": self.open, "limit": self.limit, "peak": self.peak}


class GatedFactory(WrappingFactory):
    """The protocols of another factory, their sockets counted in a ``SocketGate`` (for
    the console, whose HTTP protocol is Twisted's)."""

    def __init__(self, factory: IProtocolFactory, gate: SocketGate) -> None:
        super().__init__(factory)
        self.gate = gate

    def registerProtocol(self, protocol: ProtocolWrapper) -> None:
        super().registerProtocol(protocol)
        self.gate.opened()

    def unregisterProtocol(self, protocol: ProtocolWrapper) -> None:
        super().unregisterProtocol(protocol)
        self.gate.closed()
