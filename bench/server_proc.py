"""Starting, watching and stopping the wiremq server under test.

The server is a subprocess with its own fresh data directory, one per
scenario, so every scenario starts from an empty broker and empty stores, and
its CPU time can be read with psutil to report server CPU per message.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

import psutil


def free_port(host: str) -> int:
    """Ask the kernel for a free port by binding port 0."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def server_cpu_seconds(proc: psutil.Process) -> float:
    """User+system CPU of the server and any processes it started."""
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            times = p.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


class PeriodicSampler:
    """Calls ``sample`` every ``interval`` seconds in a background thread while the ``with``
    block runs, and once more as it ends, so what happened last is sampled too.

    ``join_timeout`` bounds the wait for the thread at the end (None: wait as long as it takes).
    """

    def __init__(self, interval: float, name: str, join_timeout: float | None = None) -> None:
        self.interval = interval
        self.join_timeout = join_timeout
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def sample(self) -> None:
        """Take one sample; what that is, the subclass says."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(self.join_timeout)

    def _run(self) -> None:
        while True:
            stopping = self._stop.wait(self.interval)
            self.sample()
            if stopping:
                return


class ServerStartError(RuntimeError):
    """The server exited or did not listen in time; the message includes its log tail."""


class ManagedServer:
    """``wiremq serve`` on 127.0.0.1:<free port> with a temporary data directory.

    ``settings`` are ``GROUP.NAME=VALUE`` parameter overrides, each passed as ``--set``;
    ``admin_port`` is the console's (0: none).
    """

    def __init__(
        self,
        executable: str,
        settings: Sequence[str] = (),
        host: str = "127.0.0.1",
        start_timeout: float = 30.0,
        admin_port: int = 0,
    ) -> None:
        self.executable = executable
        self.settings = settings
        self.host = host
        self.port = 0
        self.start_timeout = start_timeout
        self.admin_port = admin_port
        self.workdir = Path(tempfile.mkdtemp(prefix="wiremq-bench-"))
        self.log_path = self.workdir / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.keep_workdir = False  # set when the log is worth reading afterwards

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def command(self) -> list[str]:
        return [
            self.executable,
            "serve",
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--data",
            str(self.workdir / "data"),
            "--admin-port",
            str(self.admin_port),
            *(arg for setting in self.settings for arg in ("--set", setting)),
        ]

    def start(self) -> None:
        self.port = free_port(self.host)
        (self.workdir / "data").mkdir(exist_ok=True)  # kept by a restart
        with open(self.log_path, "ab") as log:
            try:
                self.proc = subprocess.Popen(
                    self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
                )
            except OSError as exc:
                raise ServerStartError(f"cannot run {self.executable}: {exc}") from exc
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self.proc.poll() is not None:
                self.keep_workdir = True
                raise ServerStartError(
                    f"server exited with code {self.proc.returncode} during start-up "
                    f"(log {self.log_path}):\n{self.log_tail()}"
                )
            try:
                socket.create_connection((self.host, self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    self.keep_workdir = True
                    raise ServerStartError(
                        f"server did not accept connections on port {self.port} within "
                        f"{self.start_timeout} s (log {self.log_path}):\n"
                        f"{self.log_tail()}"
                    ) from None
                time.sleep(0.1)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after 10 s; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.keep_workdir = True
                with open(self.log_path, "ab") as log:
                    log.write(b"\n[loadgen] server ignored SIGTERM for 10 s; killed\n")
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL, as a crash would; the data directory stays for a restart."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> ManagedServer:
        try:
            self.start()
        except BaseException:
            self.stop()
            self._remove_workdir()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
        self._remove_workdir()

    def _remove_workdir(self) -> None:
        if not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
