"""Message and session ids: unique within a server run, and across runs by a random prefix."""

from __future__ import annotations

import os

from wiremq.modules._message import Numbered


class Ids:
    """``message()`` and ``session()`` each return the next id. They are C callables
    (``_message.c``'s ``Numbered``), not methods: a message id is made for every SEND."""

    def __init__(self) -> None:
        prefix = f"wmq-{os.urandom(4).hex()}-"
        self.message = Numbered(prefix)
        self.session = Numbered(f"{prefix}s")
