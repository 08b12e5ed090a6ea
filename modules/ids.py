"""Message and session ids: unique within a server run, and across runs by a random prefix."""

from __future__ import annotations

import itertools
import os
from functools import partial


class Ids:
    """``message()`` and ``session()`` each return the next id. They are C callables (an
    iterator's ``next``), not methods: a message id is made for every SEND."""

    def __init__(self) -> None:
        prefix = f"wmq-{os.urandom(4).hex()}-"
        self.message = partial(next, map(f"{prefix}{{}}".format, itertools.count(1)))
        self.session = partial(next, map(f"{prefix}s{{}}".format, itertools.count(1)))
