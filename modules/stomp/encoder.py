"""The one place STOMP frames the server sends are turned into bytes.

Control frames (CONNECTED, RECEIPT, ERROR, heart-beats) are built whole. A
MESSAGE frame is built in two parts so that a message delivered to many
subscribers is encoded once: a short per-delivery head (``MESSAGE``, the
``subscription`` line, and in a client-acknowledged STOMP 1.2 subscription the
``ack`` line) and a tail shared by every delivery of the message (its headers
and body). The head's layout is known only here, so the discard indication is
added here too.
"""

from __future__ import annotations

from collections.abc import Iterable

# plain_message_tail: the C fast path of escaped_message_tail (None when a header needs
# escaping), offered here so that every frame's bytes come from this module.
from wiremq.modules.stomp._fast import message_tail as plain_message_tail  # noqa: F401
from wiremq.modules.stomp.codec import escape

HEARTBEAT = b"\n"
MESSAGE_COMMAND = b"MESSAGE\n"
# In a MESSAGE head: the first message of a message group this consumer gets.
GROUP_FIRST_LINE = b"JMSXGroupFirstForConsumer:true\n"
# Commands whose headers are never escaped (the version is not agreed yet).
_UNESCAPED = frozenset({"CONNECT", "STOMP", "CONNECTED"})


def encode_frame(
    command: str,
    headers: Iterable[tuple[str, str]] = (),
    body: bytes = b"",
    version: str = "1.2",
) -> bytes:
    """Any frame, headers escaped for ``version``; ``content-length`` is added for a body."""
    escaped = command not in _UNESCAPED
    lines = [command]
    for name, value in headers:
        if escaped:
            name, value = escape(name, version), escape(value, version)
        lines.append(f"{name}:{value}")
    if body or command in ("SEND", "MESSAGE", "ERROR"):
        lines.append(f"content-length:{len(body)}")
    lines.append("\n")
    return "\n".join(lines).encode() + body + b"\0"


def connected(version: str, server: str, session: str, heart_beat: tuple[int, int]) -> bytes:
    headers = (
        ("version", version),
        ("server", server),
        ("session", session),
        ("heart-beat", f"{heart_beat[0]},{heart_beat[1]}"),
    )
    return encode_frame("CONNECTED", headers)


def receipt(receipt_id: str, version: str) -> bytes:
    return b"RECEIPT\nreceipt-id:" + escape(receipt_id, version).encode() + b"\n\n\0"


def recovered(receipt_id: str, xids: list[str], version: str) -> bytes:
    """RECOVER's RECEIPT: how many XA branches are prepared, and their XIDs (XIDs hold
    no comma)."""
    headers = (("receipt-id", receipt_id), ("xa-count", str(len(xids))), ("xids", ",".join(xids)))
    return encode_frame("RECEIPT", headers, b"", version)


def error(
    message: str, detail: str, receipt_id: str | None, version: str, offer_versions: str = ""
) -> bytes:
    """An ERROR frame; ``offer_versions`` lists the versions the server speaks, for a
    client whose CONNECT failed."""
    headers = [("message", message), ("content-type", "text/plain")]
    if receipt_id is not None:
        headers.append(("receipt-id", receipt_id))
    if offer_versions:
        headers.append(("version", offer_versions))
    return encode_frame("ERROR", headers, (detail or message).encode(), version)


def naming_error(message: str, detail: str, named: list[tuple[str, str]], version: str) -> bytes:
    """An ERROR frame naming, in ``named`` headers, what the server ended while the
    connection goes on: a discarded transaction (``transaction``), a subscription that
    lost its read permission (``subscription``, ``destination``)."""
    headers = [("message", message), *named, ("content-type", "text/plain")]
    return encode_frame("ERROR", headers, (detail or message).encode(), version)


def subscription_head(sub_id: str, version: str) -> bytes:
    """The head of every MESSAGE one subscription receives (before any ``ack`` line)."""
    return MESSAGE_COMMAND + b"subscription:" + escape(sub_id, version).encode() + b"\n"


def ack_line(message_id: str, suffix: bytes) -> bytes:
    """The ``ack`` line of a STOMP 1.2 client-acknowledged delivery: ``ack:<id>@<n>``."""
    return b"ack:" + message_id.encode() + suffix


def ack_suffix(subscription_number: int) -> bytes:
    """What follows the message id in an ``ack`` value: ``@<number of the subscription>``."""
    return b"@%d\n" % subscription_number


def with_discard_indication(head: bytes, discarded: int) -> bytes:
    """A MESSAGE head that also says how many messages were discarded before it."""
    return MESSAGE_COMMAND + b"discarded:%d\n" % discarded + head[len(MESSAGE_COMMAND) :]


def browser_end(head: bytes, destination: str) -> bytes:
    """The MESSAGE that ends a queue browser's snapshot (after the subscription's head)."""
    return head + b"destination:" + escape(destination, "1.2").encode() + b"\nbrowser:end\n\n\0"


def escaped_message_tail(
    message_id: str,
    destination: str,
    headers: dict[str, str],
    exclude: frozenset[str],
    body: bytes,
    redelivered: bool,
    version: str,
) -> bytes:
    """A MESSAGE frame after its per-delivery head: ``headers`` but those in ``exclude``,
    escaped for ``version``.

    Most headers hold nothing to escape: then ``plain_message_tail``, the C fast path
    of ``_fast.c``, builds the same bytes (it returns None otherwise), so callers try
    it first.
    """
    pairs = [("destination", destination)]
    pairs += [(name, value) for name, value in headers.items() if name not in exclude]
    text = "\n".join(f"{escape(n, version)}:{escape(v, version)}" for n, v in pairs)
    redelivered_line = "redelivered:true\n" if redelivered else "redelivered:false\n"
    head = f"message-id:{message_id}\n{redelivered_line}{text}\ncontent-length:{len(body)}\n\n"
    return head.encode() + body + b"\0"
