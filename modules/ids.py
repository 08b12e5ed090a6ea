"""Message and session ids: unique within a server run, and across runs by a random prefix."""

from __future__ import annotations

import itertools
import os


class Ids:
    def __init__(self) -> None:
        self._prefix = f"wmq-{os.urandom(4).hex()}-"
        self._messages = itertools.count(1)
        self._sessions = itertools.count(1)

    def message(self) -> str:
        return f"{self._prefix}{next(self._messages)}"

    def session(self) -> str:
        return f"{self._prefix}s{next(self._sessions)}"
