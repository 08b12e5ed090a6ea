"""An XA resource over STOMP for the tests: a stomp.py connection that runs each XA request
and waits for its RECEIPT (or ERROR), as a transaction coordinator's resource adapter would."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable

import stomp
import stomp.exception
from stomp.utils import Frame

from tests.integration.clients import TIMEOUT


class XAError(Exception):
    """The server answered an XA request with an ERROR."""

    def __init__(self, frame: Frame) -> None:
        super().__init__(f"{frame.headers.get('message')}: {frame.body}")
        self.frame = frame
        self.message = frame.headers.get("message", "")


class XAResource(stomp.ConnectionListener):
    """One connection; every request waits for its answer."""

    def __init__(self, port: int, **connect_headers: str) -> None:
        self.connection = stomp.Connection12([("127.0.0.1", port)], auto_content_length=True)
        self.connection.set_listener("xa", self)
        self.answers: dict[str, Frame] = {}
        self.errors: list[Frame] = []
        self.messages: list[Frame] = []
        self._changed = threading.Condition()
        self._numbers = itertools.count()
        self.connection.connect(wait=True, headers=connect_headers)

    def on_receipt(self, frame: Frame) -> None:
        self._record(lambda: self.answers.__setitem__(frame.headers["receipt-id"], frame))

    def on_error(self, frame: Frame) -> None:
        self._record(lambda: self.errors.append(frame))

    def on_message(self, frame: Frame) -> None:
        self._record(lambda: self.messages.append(frame))

    def _record(self, action: Callable[[], None]) -> None:
        with self._changed:
            action()
            self._changed.notify_all()

    def wait(self, condition: Callable[[], bool], timeout: float = TIMEOUT) -> bool:
        with self._changed:
            return self._changed.wait_for(condition, timeout)

    def request(self, command: str, xid: str | None, xa: str | None, **headers: str) -> Frame:
        """Send a request with a receipt; its RECEIPT, or ``XAError`` for an ERROR."""
        receipt = f"r{next(self._numbers)}"
        sent = dict(headers, receipt=receipt)
        if xid is not None:
            sent["transaction"] = xid
        if xa is not None:
            sent["xa"] = xa
        errors = len(self.errors)
        self.connection.send_frame(command, sent)
        assert self.wait(lambda: receipt in self.answers or len(self.errors) > errors), (
            f"no answer to {command} {sent}"
        )
        if receipt in self.answers:
            return self.answers[receipt]
        raise XAError(self.errors[-1])

    def start(self, xid: str, **headers: str) -> None:
        self.request("BEGIN", xid, "start", **headers)

    def end(self, xid: str) -> None:
        self.request("COMMIT", xid, "end")

    def prepare(self, xid: str) -> None:
        self.request("COMMIT", xid, "prepare")

    def commit(self, xid: str, one_phase: bool = False) -> None:
        self.request("COMMIT", xid, "onephase" if one_phase else "commit")

    def rollback(self, xid: str) -> None:
        self.request("ABORT", xid, "rollback")

    def recover(self) -> list[str]:
        answer = self.request("RECOVER", None, None)
        xids = [x for x in answer.headers["xids"].split(",") if x]
        assert int(answer.headers["xa-count"]) == len(xids)
        return xids

    def send(self, destination: str, body: str, xid: str, **headers: str) -> None:
        self.connection.send(destination, body, headers=headers, transaction=xid)

    def close(self) -> None:
        """DISCONNECT, unless the server ended the connection after an ERROR: stomp.py may
        not have seen that close yet, and its DISCONNECT then meets a closed socket (or, had its
        receiver thread just seen it, stomp.py's NotConnectedException)."""
        if not self.connection.is_connected():
            return
        try:
            self.connection.disconnect()
        except (OSError, stomp.exception.NotConnectedException):
            if not self.errors:
                raise
