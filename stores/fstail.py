"""Reading what lies past the last committed transaction of a FileStorage file.

A process killed during a commit leaves an incomplete transaction at the end
of ``Data.fs`` (its header says "checkpoint" or its length runs past the end
of the file). FileStorage cuts such a tail off when it opens the file; before
that happens we read it here, to log exactly what is lost and to refuse when
the "tail" is really damage in the middle with committed transactions after
it, which FileStorage would otherwise cut off too.
"""

from __future__ import annotations

import io
import pickle
import struct
from dataclasses import dataclass, field
from typing import BinaryIO

from persistent.timestamp import TimeStamp
from ZODB.FileStorage.format import DATA_HDR, DATA_HDR_LEN, TRANS_HDR, TRANS_HDR_LEN
from ZODB.utils import get_pickle_metadata

from .model import BlockData

_BLOCK_CLASS = (BlockData.__module__, BlockData.__qualname__)


@dataclass(frozen=True, slots=True)
class LostTail:
    """The incomplete transaction at the end of a FileStorage file."""

    offset: int  # where the last committed transaction ends
    size: int  # bytes past it
    time: str = ""  # when the lost transaction began, if its header survived
    note: str = ""  # the store's note for it ("wiremq persqueue: append 3")
    records: int = 0  # complete object records found in it
    messages: list[tuple[str, str]] = field(default_factory=list)  # (destination, id)
    committed_after: bool = False  # a complete committed transaction ends the file


class _Unpickler(pickle.Unpickler):
    def persistent_load(self, pid: object) -> None:
        return None


def read_tail(file: BinaryIO, offset: int, file_size: int) -> LostTail:
    """Describe the bytes of ``file`` from ``offset`` (end of committed data) to its end."""
    size = file_size - offset
    file.seek(offset)
    header = file.read(TRANS_HDR_LEN)
    if len(header) < TRANS_HDR_LEN:
        return LostTail(offset, size)
    tid, tlen, _status, ulen, dlen, elen = struct.unpack(TRANS_HDR, header)
    file.seek(offset + TRANS_HDR_LEN + ulen)
    note = file.read(dlen).decode("utf-8", "replace")
    end = min(offset + tlen, file_size)
    records, messages = _read_records(file, offset + TRANS_HDR_LEN + ulen + dlen + elen, end)
    return LostTail(
        offset,
        size,
        time=str(TimeStamp(tid)) if tid.strip(b"\0") else "",
        note=note,
        records=records,
        messages=messages,
        committed_after=_ends_with_committed_transaction(file, offset, file_size),
    )


def _read_records(file: BinaryIO, pos: int, end: int) -> tuple[int, list[tuple[str, str]]]:
    """Count the complete data records in [pos, end) and name the messages among them."""
    records = 0
    messages = []
    while pos + DATA_HDR_LEN <= end:
        file.seek(pos)
        _oid, _tid, prev, _tloc, _vlen, plen = struct.unpack(DATA_HDR, file.read(DATA_HDR_LEN))
        record_end = pos + DATA_HDR_LEN + (plen or 8)
        if record_end > end:
            break
        records += 1
        data = file.read(plen)
        # Only a block's content brings messages (it is written once; removals rewrite
        # the block's bookkeeping, a record of its own).
        if plen and prev == 0 and get_pickle_metadata(data) == _BLOCK_CLASS:
            messages.extend(_messages_of(data))
        pos = record_end
    return records, messages


def _messages_of(data: bytes) -> list[tuple[str, str]]:
    """(destination, message id) of each message in a BlockData's pickle: class, then state.

    Best effort: this only feeds a log line, so a record that will not decode
    is named as such instead of stopping the recovery.
    """
    try:
        unpickler = _Unpickler(io.BytesIO(data))
        unpickler.load()
        state = unpickler.load()
        messages = pickle.loads(state["data"])
        return [(str(fields[1]), str(fields[0])) for fields in messages if fields is not None]
    except Exception:
        return [("?", "(undecodable record)")]


def _ends_with_committed_transaction(file: BinaryIO, offset: int, file_size: int) -> bool:
    """Whether the file's last bytes close a complete committed transaction beyond ``offset``.

    Every transaction ends with a redundant copy of its length; a torn write
    almost never ends with one that points back at a matching header.
    """
    if file_size - offset < TRANS_HDR_LEN + 8:
        return False
    file.seek(file_size - 8)
    (tlen,) = struct.unpack(">Q", file.read(8))
    start = file_size - 8 - tlen
    if not offset < start <= file_size - 8 - TRANS_HDR_LEN:
        return False
    file.seek(start)
    _tid, header_tlen, status, *_ = struct.unpack(TRANS_HDR, file.read(TRANS_HDR_LEN))
    return bool(header_tlen == tlen and status in (b" ", b"p"))
