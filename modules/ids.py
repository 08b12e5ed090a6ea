"""Message and session ids: unique within a server run, and across runs by a random prefix."""

from __future__ import annotations

import itertools
import os


class Ids:
    def __init__(self) -> None:
        prefix = f"wmq-{os.urandom(4).hex()}-"
        self._messages = map(f"{prefix}{{}}".format, itertools.count(1))
        self._sessions = map(f"{prefix}s{{}}".format, itertools.count(1))

    def message(self) -> str:
        return next(self._messages)

    def session(self) -> str:
        return next(self._sessions)
