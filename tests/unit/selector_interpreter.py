"""A straightforward interpreter of selector trees: the reference the compiled predicates
are compared with (``test_selector_properties.py``).

It walks the tree and computes SQL three-valued logic with ``None`` for unknown,
by the truth tables of the JMS specification, with the numeric rule of
``values`` — written as plainly as possible, without the compiler's
two-sided (TRUE / FALSE) expressions.
"""

from __future__ import annotations

from typing import Any

from wiremq.modules.selector.syntax import (
    Arithmetic,
    Between,
    Comparison,
    Expression,
    Identifier,
    In,
    IsNull,
    Like,
    Literal,
    Logical,
    Negative,
    Not,
    Type,
)
from wiremq.modules.selector.values import boolean, divide, like_pattern, number


def field_value(name: str, message: Any) -> object:
    """A JMS header field's value, or a property's text (None when absent)."""
    headers = message.headers
    fields = {
        "JMSPriority": lambda: message.priority,
        "JMSTimestamp": lambda: message.timestamp,
        "JMSMessageID": lambda: message.message_id,
        "JMSCorrelationID": lambda: headers.get("correlation-id"),
        "JMSType": lambda: headers.get("type"),
        "JMSDeliveryMode": lambda: "PERSISTENT" if message.persistent else "NON_PERSISTENT",
        "JMSRedelivered": lambda: message.redelivered,
        "JMSExpiration": lambda: message.expires,
        "JMSXDeliveryCount": lambda: message.redeliveries + 1,
    }
    if name in fields:
        return fields[name]()
    return headers.get(name)


def as_type(value: object, kind: Type, node: Expression) -> object:
    """A value read as ``kind``: a property's text converted, a typed value kept if it is
    of that type, else None (unknown)."""
    if isinstance(node, Identifier) and node.type is Type.ANY:
        if value is None:
            return None
        return {Type.NUM: number, Type.STR: lambda v: v, Type.BOOL: boolean}[kind](value)
    wanted = {Type.NUM: (int, float), Type.STR: (str,), Type.BOOL: (bool,)}[kind]
    if isinstance(value, bool) and kind is not Type.BOOL:
        return None
    return value if isinstance(value, wanted) else None


def evaluate(node: Expression, message: Any, kind: Type = Type.BOOL) -> object:
    """``node``'s value for ``message`` as ``kind`` (conditions: True, False or None)."""
    if isinstance(node, Literal):
        return as_type(node.value, kind, node)
    if isinstance(node, Identifier):
        return as_type(field_value(node.name, message), kind, node)
    if isinstance(node, Negative):
        value = evaluate(node.operand, message, Type.NUM)
        return None if value is None else -value  # type: ignore[operator]
    if isinstance(node, Arithmetic):
        left = evaluate(node.left, message, Type.NUM)
        right = evaluate(node.right, message, Type.NUM)
        if left is None or right is None:
            return None
        if node.operator == "+":
            return left + right  # type: ignore[operator]
        if node.operator == "-":
            return left - right  # type: ignore[operator]
        if node.operator == "*":
            return left * right  # type: ignore[operator]
        return divide(left, right)  # type: ignore[arg-type]
    if isinstance(node, Not):
        value = evaluate(node.operand, message)
        return None if value is None else not value
    if isinstance(node, Logical):
        values = [evaluate(n, message) for n in node.operands]
        if node.operator == "AND":
            if False in values:
                return False
            return None if None in values else True
        if True in values:
            return True
        return None if None in values else False
    if isinstance(node, Comparison):
        return compare(node, message)
    if isinstance(node, Between):
        low = Comparison(node.position, "<=", node.low, node.operand)
        high = Comparison(node.position, "<=", node.operand, node.high)
        inside = evaluate(Logical(node.position, "AND", (low, high)), message)
        return (None if inside is None else not inside) if node.negated else inside
    if isinstance(node, In):
        text = evaluate(node.operand, message, Type.STR)
        if text is None:
            return None
        return (text in node.values) != node.negated
    if isinstance(node, Like):
        text = evaluate(node.operand, message, Type.STR)
        if text is None:
            return None
        found = like_pattern(node.pattern, node.escape).fullmatch(text) is not None  # type: ignore[arg-type]
        return found != node.negated
    if isinstance(node, IsNull):
        return (field_value(node.operand.name, message) is None) != node.negated
    raise AssertionError(node)


def compare(node: Comparison, message: Any) -> bool | None:
    types = {node.left.type, node.right.type} - {Type.ANY}
    if types:
        kind = types.pop()
        left = evaluate(node.left, message, kind)
        right = evaluate(node.right, message, kind)
    else:  # two properties: numbers if both are, else text
        left_text = field_value(node.left.name, message)  # type: ignore[union-attr]
        right_text = field_value(node.right.name, message)  # type: ignore[union-attr]
        if left_text is None or right_text is None:
            return None
        left, right = number(left_text), number(right_text)  # type: ignore[arg-type]
        if left is None or right is None:
            if node.operator not in ("=", "<>"):
                return None
            left, right = left_text, right_text
    if left is None or right is None:
        return None
    operator = node.operator
    if operator == "=":
        return left == right
    if operator == "<>":
        return left != right
    if operator == "<":
        return left < right  # type: ignore[operator]
    if operator == "<=":
        return left <= right  # type: ignore[operator]
    if operator == ">":
        return left > right  # type: ignore[operator]
    return left >= right  # type: ignore[operator]
