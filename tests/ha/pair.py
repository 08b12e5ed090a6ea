"""Real ``wiremq serve`` processes as the nodes of an HA pair on one PostgreSQL database.

Each node has its own data folder (its journal, its users file), its own STOMP and
admin ports, and the same config.xml naming the shared database. A node's
stderr is appended to its log as it comes, across restarts and the re-executions
of a node stepping down (the process stays the same). Shared by the HA tests and
``bench/failover.py``.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tests.integration.clients import free_port

WIREMQ = [sys.executable, "-m", "wiremq.server.cli"]
LOOPBACK = "127.0.0.1"


def ha_config(folder: Path, uri: str, settings: dict[str, object] | None = None) -> Path:
    """A config.xml with HA on and both stores in the database at ``uri``, plus
    ``settings`` (``Group.name`` -> value)."""
    groups: dict[str, dict[str, object]] = {
        "HA": {"enabled": "true"},
        "PersQueueFileStore": {"storageuri": uri},
        "TopicFileStore": {"storageuri": uri},
    }
    for key, value in (settings or {}).items():
        group, _, name = key.partition(".")
        groups.setdefault(group, {})[name] = value
    lines = ['<?xml version="1.0" encoding="utf-8"?>', "<wiremq>"]
    for group, values in groups.items():
        attributes = " ".join(f'{name}="{value}"' for name, value in values.items())
        lines.append(f"  <{group} {attributes}/>")
    lines.append("</wiremq>")
    path = folder / "config.xml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


class Node:
    """One node: a ``wiremq serve`` process that can be started again on the same ports."""

    def __init__(self, name: str, folder: Path, config: Path, *extra: str) -> None:
        self.name = name
        self.data = folder / name
        self.data.mkdir(parents=True, exist_ok=True)
        self.config = config
        self.stomp_port = free_port()
        self.admin_port = free_port()
        self.extra = list(extra)
        self.log = folder / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._copier: threading.Thread | None = None

    def start(self, timeout: float = 60.0) -> None:
        """Start the process and wait until its console answers (a standby's does)."""
        self.launch()
        wait(lambda: self.health() is not None, timeout, f"{self.name}'s console", self)

    def launch(self) -> None:
        """Start the process."""
        command = [
            *WIREMQ,
            "serve",
            "--config",
            str(self.config),
            "--data",
            str(self.data),
            "--port",
            str(self.stomp_port),
            "--admin-port",
            str(self.admin_port),
            "--set",
            f"HA.node={self.name}",
            *self.extra,
        ]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._copier = threading.Thread(target=self._copy, args=(self.process,), daemon=True)
        self._copier.start()

    def _copy(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stderr is not None
        with self.log.open("ab") as out:
            for line in process.stderr:
                out.write(line)
                out.flush()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def health(self) -> tuple[int, dict[str, Any]] | None:
        """``GET /api/health``: its status and answer, or None if nothing answers."""
        if not self.running:
            return None
        url = f"http://{LOOPBACK}:{self.admin_port}/api/health"
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())
        except (OSError, ValueError):
            return None

    def role(self) -> str | None:
        found = self.health()
        return None if found is None else str(found[1].get("role"))

    def get(self, path: str) -> Any:
        url = f"http://{LOOPBACK}:{self.admin_port}{path}"
        with urllib.request.urlopen(url, timeout=5) as answer:
            return json.loads(answer.read()) if path.startswith("/api/") else answer.read()

    def stomp_open(self) -> bool:
        """Whether its STOMP port takes connections."""
        try:
            socket.create_connection((LOOPBACK, self.stomp_port), timeout=0.5).close()
        except OSError:
            return False
        return True

    def signal(self, number: int) -> None:
        assert self.process is not None
        self.process.send_signal(number)

    def kill(self) -> None:
        """SIGKILL and wait for it."""
        if self.running:
            self.signal(signal.SIGKILL)
        self._reap()

    def terminate(self, timeout: float = 60.0) -> int | None:
        """SIGTERM (a clean stop) and wait for it; its exit status."""
        if self.running:
            self.signal(signal.SIGTERM)
        return self._reap(timeout)

    def _reap(self, timeout: float = 60.0) -> int | None:
        if self.process is None:
            return None
        try:
            status = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            status = self.process.wait(timeout=30)
        if self._copier is not None:
            self._copier.join(timeout=30)
        return status

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def wait(condition: Callable[[], object], timeout: float, what: str, *nodes: Node) -> object:
    """Ask ``condition`` every 50 ms until it is true; on timeout fail with the nodes'
    log tails."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {n.name}:\n{n.log_text()[-3000:]}" for n in nodes)
            raise AssertionError(f"{what}: not within {timeout} s\n{tails}")
        time.sleep(0.05)
    return value


class Pair:
    """Nodes of one HA group; the first started becomes the active."""

    def __init__(self, folder: Path, uri: str, names: Iterable[str] = ("a", "b"), **settings: Any):
        self.config = ha_config(folder, uri, {k.replace("__", "."): v for k, v in settings.items()})
        self.nodes = [Node(name, folder, self.config) for name in names]

    def start(self, timeout: float = 60.0) -> None:
        """Start the first node and wait until it is the active, then the others as
        standbys."""
        first, *others = self.nodes
        first.start()
        self.wait_active(first, timeout)
        for node in others:
            node.start()
            wait(lambda node=node: node.role() == "standby", timeout, "a standby", node)

    def wait_active(self, node: Node | None = None, timeout: float = 60.0) -> Node:
        """The node that answers as the active (``node``, if given)."""
        candidates = [node] if node is not None else self.nodes

        def found() -> Node | None:
            for candidate in candidates:
                if candidate.role() == "active":
                    return candidate
            return None

        active = wait(found, timeout, "an active node", *self.nodes)
        assert isinstance(active, Node)
        return active

    @property
    def hosts(self) -> list[tuple[str, int]]:
        """Every node's STOMP address: a client's failover list."""
        return [(LOOPBACK, n.stomp_port) for n in self.nodes]

    def close(self) -> None:
        for node in self.nodes:
            node.kill()
