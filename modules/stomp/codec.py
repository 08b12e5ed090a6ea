"""Sans-io STOMP decoding: bytes in, frames out; and the header escaping rules.

Nothing here touches a socket or a clock, so it is tested with plain bytes and
fuzzed. The decoder keeps one buffer per connection and never rescans bytes it
has already searched, so a large body arriving in many small pieces costs
linear time. Plain, complete frames (no CR or backslash in the head, nothing
near a limit) are decoded by the C fast path of ``_fast.c``; everything else,
every error included, by the Python code here, which is the definition of
what a frame is. For the session, a SEND with a destination comes out as its
request (``events.Send``), so that the frame the server reads most is made once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, TypeAlias

from wiremq.modules.stomp._fast import fill, new_body, scan
from wiremq.modules.stomp.events import Send
from wiremq.modules.stomp.frames import Frame, ProtocolError

# What ``FrameDecoder.feed`` returns: frames, and with ``sends`` the SEND requests.
Decoded: TypeAlias = Frame | Send

# A body declared (content-length) at least this large, and not complete in the bytes
# at hand, is copied into its bytes object as its pieces arrive: held once, where
# keeping the pieces, joining them and slicing the body out holds it up to three times
# over. A smaller one is cheaper to join.
FILL_FROM = 64 * 1024

# ``FrameDecoder.refused_rest`` of a frame refused for its size whose length was not
# declared: it ends at its NUL.
UNTIL_NUL = -1

_ESCAPES_11 = {"\\\\": "\\", "\\n": "\n", "\\c": ":"}
_ESCAPES_12 = {**_ESCAPES_11, "\\r": "\r"}


@dataclass(frozen=True, slots=True)
class DecoderLimits:
    """Bounds on what one frame may hold; past them the frame is refused."""

    max_body_bytes: int
    max_headers: int
    max_header_bytes: int  # one header line, and the command line


def unescape(value: str, version: str) -> str:
    """Undo STOMP 1.1/1.2 header escaping; an undefined escape is a protocol error."""
    table = _ESCAPES_12 if version == "1.2" else _ESCAPES_11
    out: list[str] = []
    i = 0
    while True:
        j = value.find("\\", i)
        if j < 0:
            out.append(value[i:])
            return "".join(out)
        out.append(value[i:j])
        pair = value[j : j + 2]
        replacement = table.get(pair)
        if replacement is None:
            raise ProtocolError(
                "undefined escape sequence in header",
                f"{pair!r} is not a STOMP {version} header escape",
            )
        out.append(replacement)
        i = j + 2


def escape(value: str, version: str) -> str:
    """Apply STOMP header escaping for ``version``. STOMP 1.0 has none, but a raw CR or LF
    would end the header (and let a value forge headers or a content-length), so a value
    holding one is escaped the 1.2 way."""
    if version == "1.0":
        if "\n" in value or "\r" in value:
            return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
        return value
    value = value.replace("\\", "\\\\").replace("\n", "\\n").replace(":", "\\c")
    if version == "1.2":
        value = value.replace("\r", "\\r")
    return value


class FrameDecoder:
    """Incremental decoder for one connection.

    ``feed`` returns every frame completed by the new bytes. A protocol error
    poisons the decoder: the connection is to be closed after an ERROR frame.
    Frames decoded before the bad one are returned first, with the error kept
    in ``error``; ``feed`` raises it when no good frame precedes it.
    ``version`` is set by the session once negotiated, since header escaping
    depends on it; until then the decoder stops after each frame, so that the
    frames after CONNECT are decoded with the negotiated version (the session
    calls ``feed(b"")`` to go on). An incomplete frame's bytes are kept as a list of chunks and
    joined only once enough have arrived, so a large body costs linear time; a large
    body of known length is copied straight into its bytes object instead (``FILL_FROM``).
    """

    def __init__(self, limits: DecoderLimits, sends: bool = False) -> None:
        """``sends``: once the version is negotiated, a SEND frame whose destination
        header is not empty is decoded to the session's request, ``Send(destination,
        headers, body)``, made once here (in C for a plain frame) instead of a ``Frame``
        the session would turn into one."""
        self.limits = limits
        self._send: type[Send] | None = Send if sends else None
        self.version: str | None = None
        self._chunks: list[bytes] = []
        self.buffered = 0  # bytes held for a frame not yet complete (a field: read per read)
        self._needed = 0  # bytes required before the pending frame can complete
        self._scanned = 0  # bytes of the pending frame already searched
        self._pending: _PendingFrame | None = None
        self._body: bytes | None = None  # the pending frame's large body, being filled
        self._filled = 0  # bytes of ``_body`` filled so far
        self._head_size = 0  # bytes of the head of the frame whose body is being filled
        self.completed = 0  # frames decoded so far (tells one pending frame from the next)
        self.error: ProtocolError | None = None
        # A frame refused for its size (``error``): the bytes of it still to come (0: none,
        # UNTIL_NUL: up to its NUL), and those thrown away since (``discard``). None: no
        # such frame (any other error, whose frame's end is unknown).
        self.refused_rest: int | None = None
        self.discarded = 0

    @property
    def pending_size(self) -> int:
        """The body size of the frame not yet complete: its content-length when its head
        is read and says so, else the bytes held for it so far (0: none pending)."""
        pending = self._pending
        if pending is not None and pending.length is not None:
            return pending.length
        return self.buffered

    def discard(self, data: bytes) -> None:
        """Throw away bytes that follow an error: the rest of a frame refused for its size
        is counted down (``refused_rest``), so that the connection can read it to its end
        before it closes and the client, still writing it, can finish and read the ERROR."""
        self.discarded += len(data)
        rest = self.refused_rest
        if not rest:
            return
        if rest == UNTIL_NUL:
            if b"\0" in data:
                self.refused_rest = 0
        else:
            self.refused_rest = max(0, rest - len(data))

    def feed(self, data: bytes) -> list[Decoded]:
        """Add bytes and return the frames they complete, in order."""
        if self.error is not None:
            raise self.error
        frames: list[Decoded] = []
        try:
            self._decode(data, frames)
        except ProtocolError as error:
            self.error = error
            if not frames:
                raise
        self.completed += len(frames)
        return frames

    def _decode(self, data: bytes, frames: list[Decoded]) -> None:
        if self._body is not None:
            rest = self._fill_body(data, frames)
            if rest is None:
                return
            data = rest
        if self._chunks:
            self._chunks.append(data)
            self.buffered += len(data)
            if self.buffered < self._needed:
                return
            pending = self._pending
            if pending is not None and pending.length is None and b"\0" not in data:
                self._check_body_size(self.buffered - pending.body_start, UNTIL_NUL)
                return
            buf = b"".join(self._chunks)
            self._chunks = []
        else:
            buf = data
        pos = 0
        end = len(buf)
        limits = self.limits
        while pos < end:
            pending = self._pending
            if pending is None and self._scanned == 0 and self.version is not None:
                # Plain complete frames in C; this loop takes whatever it leaves.
                pos = scan(
                    buf,
                    pos,
                    frames,
                    Frame,
                    self._send,
                    limits.max_body_bytes,
                    limits.max_headers,
                    limits.max_header_bytes,
                )
                if pos >= end:
                    break
            if pending is None:
                c = buf[pos]
                if c == 10 or c == 0:  # heart-beat, or an EOL or NUL after a frame's NUL
                    pos += 1
                    continue
                if c == 13:
                    if pos + 1 >= end:
                        break
                    if buf[pos + 1] != 10:
                        raise ProtocolError("malformed frame", "carriage return without line feed")
                    pos += 2
                    continue
                pending = self._read_head(buf, pos, end)
                if pending is None:
                    break
            if pending.length is not None:
                body_end = pending.body_start + pending.length
                if body_end >= end:
                    self._pending = pending
                    if pending.length >= FILL_FROM and self.version is not None:
                        self._start_body(pending, buf, pos, end)
                        return
                    self._needed = body_end + 1 - pos
                    break
                if buf[body_end] != 0:
                    raise ProtocolError(
                        "malformed frame", "body is not followed by NUL at its content-length"
                    )
            else:
                body_end = buf.find(b"\0", max(pending.body_start, self._scanned))
                if body_end < 0:
                    self._check_body_size(end - pending.body_start, UNTIL_NUL)
                    self._pending = pending
                    self._scanned = end
                    break
                self._check_body_size(body_end - pending.body_start, 0)
            body = buf[pending.body_start : body_end]
            frames.append(self._decoded(pending.command, pending.headers, body))
            pos = body_end + 1
            self._pending = None
            self._scanned = 0
            self._needed = 0
            if self.version is None:
                break
        if pos < end or self.buffered or self._scanned:  # else nothing is held, nothing kept
            self._keep_tail(buf, pos, end)

    def _decoded(self, command: str, headers: dict[str, str], body: bytes) -> Decoded:
        """A frame the C scan left, as the scan would have decoded it (a SEND before the
        version is negotiated stays a frame: the session answers it as not a CONNECT)."""
        if self._send is not None and command == "SEND" and self.version is not None:
            destination = headers.get("destination")
            if destination:
                return self._send(destination, headers, body)
        return Frame(command, headers, body)

    def _start_body(self, pending: _PendingFrame, buf: bytes, pos: int, end: int) -> None:
        """Make the pending frame (from ``pos``) a body and copy into it what ``buf`` holds
        of it; the frame's head counts as held too."""
        assert pending.length is not None
        body = self._body = new_body(pending.length)
        self._filled = fill(body, 0, memoryview(buf)[pending.body_start : end])
        self._head_size = pending.body_start - pos
        self._chunks = []
        self.buffered = self._head_size + self._filled
        self._scanned = 0
        self._needed = 0

    def _fill_body(self, data: bytes, frames: list[Decoded]) -> bytes | None:
        """Copy ``data`` into the body being filled; once it is full and its NUL has come,
        the frame is done and the bytes after it are returned (None: not done yet)."""
        body = self._body
        pending = self._pending
        assert body is not None and pending is not None
        used = fill(body, self._filled, data)
        self._filled += used
        self.buffered = self._head_size + self._filled
        if self._filled < len(body) or used == len(data):
            return None  # more body to come, or its NUL
        if data[used] != 0:
            raise ProtocolError(
                "malformed frame", "body is not followed by NUL at its content-length"
            )
        frames.append(self._decoded(pending.command, pending.headers, body))
        self._body = None
        self._pending = None
        self._filled = self.buffered = 0
        return data[used + 1 :]

    def _keep_tail(self, buf: bytes, pos: int, end: int) -> None:
        """Keep the bytes of the incomplete frame, with offsets made relative to its start."""
        if pos >= end:
            self.buffered = 0
            self._pending = None
            self._scanned = 0
            self._needed = 0
            return
        tail = buf[pos:] if pos else buf
        self._chunks = [tail]
        self.buffered = len(tail)
        self._scanned = max(0, self._scanned - pos)
        if self._pending is not None:
            self._pending = self._pending._replace(body_start=self._pending.body_start - pos)

    def _read_head(self, buf: bytes, pos: int, end: int) -> _PendingFrame | None:
        """Parse the command and headers of the frame at ``pos``, or None if incomplete."""
        search_from = max(pos, self._scanned - 2)
        head_end = buf.find(b"\n\n", search_from)
        crlf = buf.find(b"\n\r\n", search_from, head_end + 1 if head_end >= 0 else end)
        if crlf >= 0:  # the last line's own CR, if any, is _parse_head's to drop
            head_end, body_start = crlf, crlf + 3
        elif head_end >= 0:
            body_start = head_end + 2
        else:
            self._check_incomplete_head(buf, pos, end)
            self._scanned = end
            return None
        command, headers = self._parse_head(buf, pos, head_end)
        length_text = headers.get("content-length")
        length = None if length_text is None else self._content_length(length_text)
        if length is not None and length > self.limits.max_body_bytes:
            self.refused_rest = max(0, body_start + length + 1 - end)
            raise ProtocolError(
                "frame too large",
                f"content-length {length} exceeds the server's limit of "
                f"{self.limits.max_body_bytes} bytes",
            )
        self._scanned = body_start
        return _PendingFrame(command, headers, body_start, length)

    def _check_body_size(self, size: int, rest: int) -> None:
        """Refuse a body over the limit; ``rest``: what is still to come of its frame."""
        if size > self.limits.max_body_bytes:
            self.refused_rest = rest
            raise ProtocolError(
                "frame too large",
                f"body exceeds the server's limit of {self.limits.max_body_bytes} bytes",
            )

    def _check_incomplete_head(self, buf: bytes, pos: int, end: int) -> None:
        """Refuse an unfinished head that cannot become a valid one: longer than every
        line at its limit with a CRLF each, or whose last line is already too long (its
        last CR may be half a CRLF, so it does not count)."""
        limits = self.limits
        half_crlf = buf[end - 1] == 13
        if end - pos - half_crlf > (limits.max_header_bytes + 2) * (limits.max_headers + 1):
            raise ProtocolError("frame too large", "header section exceeds the server's limits")
        last_newline = buf.rfind(b"\n", pos, end)
        line = end - (last_newline + 1 if last_newline >= 0 else pos) - half_crlf
        if line > limits.max_header_bytes:
            raise ProtocolError(
                "header too long",
                f"a header line exceeds the server's limit of {limits.max_header_bytes} bytes",
            )

    def _content_length(self, text: str) -> int:
        if not (text.isascii() and text.isdigit()):
            raise ProtocolError("malformed frame", f"content-length {text!r} is not a number")
        return int(text)

    def _parse_head(self, buf: bytes, start: int, stop: int) -> tuple[str, dict[str, str]]:
        try:
            text = buf[start:stop].decode()
        except UnicodeDecodeError:
            raise ProtocolError("malformed frame", "frame headers are not UTF-8") from None
        if "\r" in text:  # CRLF ends a line; a lone CR is part of a 1.0/1.1 value
            text = text.replace("\r\n", "\n")
            if text.endswith("\r"):  # the last line's CR, before the blank line's LF
                text = text[:-1]
        lines = text.split("\n")
        command = lines[0]
        limits = self.limits
        if len(lines) - 1 > limits.max_headers:
            raise ProtocolError(
                "too many headers",
                f"{len(lines) - 1} headers exceed the server's limit of {limits.max_headers}",
            )
        # A line can only be over the byte limit if the whole head is.
        long_lines_possible = stop - start > limits.max_header_bytes
        if long_lines_possible and len(command.encode()) > limits.max_header_bytes:
            raise ProtocolError("malformed frame", "command line too long")
        version = self.version  # None until negotiated: CONNECT is never unescaped
        unescaping = "\\" in text and version not in (None, "1.0")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon:
                raise ProtocolError("malformed frame", f"header line {line[:80]!r} has no colon")
            if long_lines_possible and len(line.encode()) > limits.max_header_bytes:
                raise ProtocolError(
                    "header too long",
                    f"header {name[:80]!r} exceeds the server's limit of "
                    f"{limits.max_header_bytes} bytes",
                )
            if unescaping:
                assert version is not None
                name, value = unescape(name, version), unescape(value, version)
            if name not in headers:
                headers[name] = value
        return command, headers


class _PendingFrame(NamedTuple):
    """A frame whose head is parsed and whose body has not fully arrived."""

    command: str
    headers: dict[str, str]
    body_start: int
    length: int | None
