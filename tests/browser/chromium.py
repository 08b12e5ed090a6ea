"""Headless Chromium for the browser tests: Debian's chromium, a fresh profile, no network
beyond the page's own, and a small HTTP server the page is loaded from and reports to."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# This machine's network is closed: without the background-networking flags Chromium's own
# connections are refused and slow it down.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def chromium_binary() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "no chromium: `make test` installs Debian's chromium package"
    return found


class PageServer:
    """Serves ``files`` (URL path -> file) and keeps what the page POSTs to /result."""

    def __init__(self, files: dict[str, Path]) -> None:
        self.files = files
        self.result: dict[str, Any] | None = None
        self.reported = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                path = owner.files.get(self.path.split("?")[0].split("#")[0])
                if path is None:
                    self.send_error(404)
                    return
                body = path.read_bytes()
                kind = "text/html" if path.suffix == ".html" else "text/javascript"
                self.send_response(200)
                self.send_header("content-type", f"{kind}; charset=utf-8")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("content-length", "0"))
                owner.result = json.loads(self.rfile.read(length))
                self.send_response(204)
                self.end_headers()
                owner.reported.set()

            def log_message(self, *args: object) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.http.server_address[1]
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@contextmanager
def chromium(url: str) -> Iterator[subprocess.Popen[bytes]]:
    """Headless Chromium showing ``url``, with a profile of its own; killed at the end."""
    with tempfile.TemporaryDirectory(prefix="wiremq-chromium-") as profile:
        process = subprocess.Popen(
            [chromium_binary(), *FLAGS, f"--user-data-dir={profile}", url],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its helper processes go with it
        )
        try:
            yield process
        finally:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
