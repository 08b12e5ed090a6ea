"""Throwaway database servers for the store tests: a ZEO server and a PostgreSQL cluster.

Each runs as its own process on a free loopback port, in a temporary
directory, and is stopped and removed by the fixture that started it.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.integration.clients import free_port

LOOPBACK = "127.0.0.1"


def wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode} before listening")
        try:
            socket.create_connection((LOOPBACK, port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listened on {LOOPBACK}:{port} within {timeout} s")


@contextmanager
def zeo_server(directory: Path, port: int = 0) -> Iterator[str]:
    """A ZEO server (runzeo) on a FileStorage in ``directory`` (on ``port``, or a free
    one); yields its zeo:// URI."""
    port = port or free_port()
    log = (directory / "zeo.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ZEO.runzeo",
            "-a",
            f"{LOOPBACK}:{port}",
            "-f",
            str(directory / "Data.fs"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for_port(port, process)
        yield f"zeo://{LOOPBACK}:{port}"
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def postgres_bin(name: str) -> str | None:
    """A PostgreSQL server program from PATH or Debian's versioned directory."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    return str(candidates[-1]) if candidates else None


def postgres_unavailable() -> str | None:
    """Why a throwaway cluster cannot be started here, or None if it can."""
    missing = [name for name in ("initdb", "pg_ctl") if postgres_bin(name) is None]
    if missing:
        return (
            f"PostgreSQL server programs not found ({', '.join(missing)}): "
            "apt-get install -y postgresql (see tests/stores/SETUP.md)"
        )
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' user to run initdb as"
    return None


class PostgresServer:
    """A throwaway PostgreSQL cluster on a free loopback port, in a temporary folder.

    initdb refuses to run as root, so as root the cluster belongs to the
    'postgres' user. ``durable``: fsync and synchronous commits on (a benchmark's
    figures); off, the default, for tests that check the store, not the disk.
    """

    def __init__(self, durable: bool = False) -> None:
        self.user = "postgres" if os.geteuid() == 0 else None
        self.directory = Path(tempfile.mkdtemp(prefix="wiremq-pg-"))
        if self.user:
            shutil.chown(self.directory, self.user)
        self.data = self.directory / "data"
        self.port = free_port()
        self.durable = durable
        self._pg_ctl = [str(postgres_bin("pg_ctl")), "-D", str(self.data)]
        try:
            self._run(
                str(postgres_bin("initdb")),
                "-D",
                str(self.data),
                "-U",
                "wiremq",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            )
        except BaseException:
            shutil.rmtree(self.directory, ignore_errors=True)
            raise

    def _run(self, *command: str) -> None:
        subprocess.run(
            command,
            user=self.user,
            check=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )

    def start(self) -> None:
        options = f"-p {self.port} -k {self.directory} -c listen_addresses={LOOPBACK}"
        if not self.durable:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        log = str(self.directory / "server.log")
        self._run(*self._pg_ctl, "-o", options, "-l", log, "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop it (``fast``: every session ended; ``immediate``: as a crash would)."""
        self._run(*self._pg_ctl, "-m", mode, "-w", "-t", "60", "stop")

    def uri(self, database: str) -> str:
        return f"postgresql://wiremq@{LOOPBACK}:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """A new, empty database; its URI."""
        import psycopg2

        admin = psycopg2.connect(host=LOOPBACK, port=self.port, user="wiremq", dbname="postgres")
        try:
            admin.autocommit = True
            admin.cursor().execute(f'CREATE DATABASE "{name}"')
        finally:
            admin.close()
        return self.uri(name)

    def remove(self) -> None:
        """Stop it as a crash would (if it runs) and delete its folder."""
        subprocess.run(
            [*self._pg_ctl, "-m", "immediate", "-w", "stop"],
            user=self.user,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        shutil.rmtree(self.directory, ignore_errors=True)


@contextmanager
def postgres_cluster(durable: bool = False) -> Iterator[str]:
    """A fresh PostgreSQL cluster with one database; yields its postgresql:// URI."""
    server = PostgresServer(durable)
    try:
        server.start()
        yield server.create_database("wiremq_test")
    finally:
        server.remove()
