"""A ``wiremq serve`` subprocess that the test kills with SIGKILL, and its log."""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.integration.clients import free_port
from tests.integration.test_cli import WIREMQ, _wait_listening


@dataclass
class ServerProcess:
    """One server process on a free port; its stderr is copied to ``log`` as it comes."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path
    _copier: threading.Thread

    @classmethod
    def start(cls, data: Path, log: Path, admin_port: int = 0) -> ServerProcess:
        """``admin_port``: the console's port (0: no console)."""
        port = free_port()
        process = subprocess.Popen(
            [*WIREMQ, "serve", "--port", str(port), "--data", str(data)]
            + ["--admin-port", str(admin_port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            # Reads stderr itself if the server dies while starting: no copier before this.
            _wait_listening(port, process, timeout=30)
        except BaseException:
            process.kill()
            process.wait()
            raise
        copier = threading.Thread(target=_copy, args=(process, log), daemon=True)
        copier.start()
        return cls(process, port, log, copier)

    def kill(self) -> int | None:
        """SIGKILL the server (if it still runs) and wait for it; its exit status.

        After this the FileStorage lock is released and the log is complete.
        """
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        status = self.process.wait(timeout=30)
        self._copier.join(timeout=30)
        return status

    def stderr(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def _copy(process: subprocess.Popen[bytes], log: Path) -> None:
    """Keep the server's stderr pipe empty (a full pipe would stall the server)."""
    assert process.stderr is not None
    with log.open("wb") as out:
        for line in process.stderr:
            out.write(line)
            out.flush()


Servers = Callable[[Path, str], ServerProcess]
