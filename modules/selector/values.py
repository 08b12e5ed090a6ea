"""What a selector's identifiers name, and how a property's text takes part in a comparison.

STOMP headers are text. A selector reads a message property (any header) as
the type the comparison needs:

- compared with a number, or in arithmetic or ``BETWEEN``: the header is a
  number if its whole value is written as a JMS numeric literal in decimal:
  an optional sign, then digits (``42``, ``-7``: an exact number), or
  digits with a decimal point and/or an exponent (``3.5``, ``1e3``,
  ``-.5E-2``: an approximate number). Anything else (``abc``, ``12 ``,
  ``0x1F``, ``1_000``, an empty value) is not a number: the comparison is
  unknown, as if the header were absent. So ``price > 100`` selects a
  message sent with ``price:150``. (ActiveMQ compares STOMP headers as
  strings, where ``price > 100`` never selects anything.)
- compared with a string, or in ``LIKE`` / ``IN``: the header's text as it
  is, so ``code = '007'`` selects ``code:007`` and ``code = 7`` selects
  ``code:7``, ``code:007`` and ``code:7.0``.
- compared with ``TRUE`` / ``FALSE`` or used as a condition: ``true`` or
  ``false`` in any case; any other value is unknown.
- two properties compared with each other: as numbers if both are numbers,
  else as text (``=`` and ``<>``; ordering text is unknown).

A header that is absent is NULL: every comparison with it is unknown, and
unknown is not true (SQL three-valued logic: ``NOT`` of unknown is
unknown, ``FALSE AND unknown`` is false, ``TRUE OR unknown`` is true).

The JMS header fields map to what the server knows of the message.
``number`` is in C (``_number.c``): every selector comparing a header with a
number runs it for every message it tests.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from wiremq.modules.selector._number import number

__all__ = ["FIELDS", "Field", "boolean", "compare_properties", "divide", "like_pattern", "number"]


@dataclass(frozen=True, slots=True)
class Field:
    """A JMS header field: its static type and the Python expression of its value in a
    compiled selector (``m`` is the message, ``h`` its headers)."""

    type: str  # NUM, STR or BOOL (syntax.Type names)
    code: str
    doc: str


FIELDS = {
    "JMSPriority": Field("NUM", "m.priority", "the priority header, 0-9, 4 when absent"),
    "JMSTimestamp": Field("NUM", "m.timestamp", "when the server received it, ms since 1970"),
    "JMSMessageID": Field("STR", "m.message_id", "the message-id the server gave it"),
    "JMSCorrelationID": Field("STR", "h.get('correlation-id')", "the correlation-id header"),
    "JMSType": Field("STR", "h.get('type')", "the type header"),
    "JMSDeliveryMode": Field(
        "STR",
        "('PERSISTENT' if m.persistent else 'NON_PERSISTENT')",
        "PERSISTENT or NON_PERSISTENT, from the persistent header",
    ),
    "JMSRedelivered": Field("BOOL", "m.redelivered", "whether it was delivered before"),
    "JMSExpiration": Field("NUM", "m.expires", "its expiry, ms since 1970 (0: never)"),
    "JMSXDeliveryCount": Field("NUM", "(m.redeliveries + 1)", "this delivery's number, from 1"),
}


def boolean(text: str | None) -> bool | None:
    """A property's value as a boolean: true / false in any case, else None."""
    if text is None:
        return None
    lowered = text.lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    return None


def divide(left: int | float, right: int | float) -> int | float | None:
    """Java's division: exact numbers truncate toward zero; by zero is unknown for exact
    numbers and infinite (or NaN) for approximate ones."""
    if isinstance(left, int) and isinstance(right, int):
        if right == 0:
            return None
        quotient = abs(left) // abs(right)
        return quotient if (left < 0) == (right < 0) else -quotient
    if right == 0:
        if left == 0 or left != left:
            return math.nan
        return math.copysign(math.inf, left) * math.copysign(1.0, right)
    return left / right


def compare_properties(left: str | None, right: str | None, operator: str) -> bool | None:
    """Two properties compared: as numbers if both are numbers, else as text (only = and
    <>); None when unknown."""
    if left is None or right is None:
        return None
    a, b = number(left), number(right)
    if a is not None and b is not None:
        return _ORDER[operator](a, b)
    if operator == "=":
        return left == right
    if operator == "<>":
        return left != right
    return None


_ORDER = {
    "=": lambda a, b: a == b,
    "<>": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def like_pattern(pattern: str, escape: str | None) -> re.Pattern[str]:
    """A LIKE pattern as a regular expression: ``%`` any run of characters, ``_`` one
    character, the escape character makes the next one literal."""
    parts = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if escape is not None and char == escape and index + 1 < len(pattern):
            parts.append(re.escape(pattern[index + 1]))
            index += 2
            continue
        parts.append(".*" if char == "%" else "." if char == "_" else re.escape(char))
        index += 1
    return re.compile("".join(parts), re.DOTALL)
