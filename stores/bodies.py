"""Large message bodies pickled out of band: beside a pickle, not copied into it.

Pickling a message copies its body into the pickle, and whatever the pickle is
joined to next copies it again: for a large message (100 MiB) those copies are
what the store's memory peaks are made of. Pickle protocol 5 can leave a buffer
out of the stream (``PickleBuffer``): the stream marks its place, the buffer
goes beside it (written from the very bytes object the server holds), and
loading takes it back as that object, uncopied. A small body stays inside the
pickle, where it costs least.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any, cast

# A body at least this large goes out of band (as the decoder's FILL_FROM: where a
# copy starts to cost more than the bookkeeping that avoids it).
OUT_OF_BAND_FROM = 64 * 1024
BODY = 3  # the body's place in ``StoredMessage.fields()``


def out_of_band(fields: tuple[Any, ...]) -> tuple[Any, ...]:
    """A message's fields (``StoredMessage.fields()``) with its body marked to be pickled
    out of band, if it is large."""
    body = fields[BODY]
    if len(body) < OUT_OF_BAND_FROM:
        return fields
    return (*fields[:BODY], pickle.PickleBuffer(body), *fields[BODY + 1 :])


def dumps(value: object) -> tuple[bytes, tuple[bytes, ...]]:
    """A pickle (protocol 5) of ``value`` and, in order, the bodies marked out of band in
    it (the objects themselves)."""
    marked: list[pickle.PickleBuffer] = []
    data = pickle.dumps(value, protocol=5, buffer_callback=marked.append)
    return data, tuple(cast(bytes, buffer.raw().obj) for buffer in marked)


def loads(data: bytes | memoryview, bodies: Sequence[bytes]) -> Any:
    """What ``dumps`` pickled, its bodies put back in their places."""
    return pickle.loads(data, buffers=bodies)
