"""A selector's tree compiled into one Python function of a message.

The function says whether the selector is TRUE for a message; unknown and
false both say no. It is generated as Python source and compiled once, so
that evaluating it costs what the comparisons cost, not a walk of the tree:
``region = 'EU' AND price > 100`` becomes::

    def match(m):
        h = m.headers
        return (h.get('region') == 'EU' and
                ((_t0 := _number(h.get('price'))) is not None and _t0 > 100))

Three-valued logic is kept by compiling every condition twice over: the
expression that is true when the condition is TRUE (``_true``) and the one
that is true when it is FALSE (``_false``): ``NOT x`` is TRUE exactly when
``x`` is FALSE, ``a AND b`` is FALSE when either is, and an unknown value
makes both false. A value (``_value``) is a Python expression that gives
the value in the type asked, or None when it is unknown.

Literals enter the source through ``repr`` and names through ``repr`` of the
header name, so no selector text is ever run as code.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
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
from wiremq.modules.selector.values import (
    FIELDS,
    boolean,
    compare_properties,
    divide,
    like_pattern,
    number,
)

_PYTHON = {"=": "==", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


def compile_tree(tree: Expression) -> tuple[Callable[[Any], bool], str, str, dict[str, object]]:
    """The predicate of ``tree``, its Python source, and the expression it returns (of
    ``m``, the message, and ``h``, its headers) with the constants that expression names
    (named apart from every other selector's, so that one function may hold several:
    ``modules/destinations/filters.py``)."""
    compiler = _Compiler()
    body = compiler.true(tree)
    source = f"def match(m):\n    h = m.headers\n    return {body}\n"
    return define(source, "match", compiler.constants), source, body, compiler.constants


def define(source: str, name: str, constants: dict[str, object]) -> Callable[..., Any]:
    """The function ``name`` that ``source`` (generated from selectors) defines, with the
    helpers compiled selectors call and ``constants`` in its globals."""
    namespace: dict[str, object] = {
        "_number": number,
        "_boolean": boolean,
        "_divide": divide,
        "_compare": compare_properties,
        **constants,
    }
    exec(compile(source, "<selector>", "exec"), namespace)  # noqa: S102 - generated here
    return namespace[name]  # type: ignore[return-value]


_CONSTANTS = itertools.count()  # every selector's constants named apart


class _Compiler:
    def __init__(self) -> None:
        self.constants: dict[str, object] = {}
        self.temps = 0

    def temp(self) -> str:
        self.temps += 1
        return f"_t{self.temps}"

    def constant(self, value: object) -> str:
        name = f"_c{next(_CONSTANTS)}"
        self.constants[name] = value
        return name

    # -- conditions ------------------------------------------------------------------------

    def true(self, node: Expression) -> str:
        """Python that is true exactly when ``node`` is TRUE."""
        return self._condition(node, True)

    def false(self, node: Expression) -> str:
        """Python that is true exactly when ``node`` is FALSE."""
        return self._condition(node, False)

    def _condition(self, node: Expression, truth: bool) -> str:
        if isinstance(node, Literal):
            return repr(node.value is truth)
        if isinstance(node, Identifier):
            return f"({self._value(node, Type.BOOL)} is {truth})"
        if isinstance(node, Not):
            return self._condition(node.operand, not truth)
        if isinstance(node, Logical):
            # AND is TRUE when all are, FALSE when any is; OR the other way round.
            joiner = " and " if (node.operator == "AND") == truth else " or "
            return "(" + joiner.join(self._condition(n, truth) for n in node.operands) + ")"
        if isinstance(node, Comparison):
            return self._comparison(node, truth)
        if isinstance(node, Between):
            bounds = Logical(
                node.position,
                "AND",
                (
                    Comparison(node.position, ">=", node.operand, node.low),
                    Comparison(node.position, "<=", node.operand, node.high),
                ),
            )
            return self._condition(bounds, truth != node.negated)
        if isinstance(node, In):
            return self._membership(node, truth != node.negated)
        if isinstance(node, Like):
            return self._like(node, truth != node.negated)
        if isinstance(node, IsNull):
            test = "is" if truth != node.negated else "is not"
            return f"({self._raw(node.operand)} {test} None)"
        raise AssertionError(f"not a condition: {node}")

    def _comparison(self, node: Comparison, truth: bool) -> str:
        types = {node.left.type, node.right.type} - {Type.ANY}
        operator = node.operator
        if not types:  # two properties: decided by their values
            left, right = (self._raw(n) for n in (node.left, node.right))  # type: ignore[arg-type]
            return f"(_compare({left}, {right}, {operator!r}) is {truth})"
        kind = types.pop()
        python = _PYTHON[operator]
        left, right = node.left, node.right
        if isinstance(left, Literal) and not isinstance(right, Literal):
            left, right = right, left  # the constant on the right
            python = _MIRROR[python]
        left_code = self._value(left, kind)
        if isinstance(right, Literal):
            constant = repr(right.value)
            if truth and python == "==":  # None == constant is False: no test for None
                return f"({left_code} == {constant})"
            a = self.temp()
            test = f"{a} {python} {constant}"
            return f"(({a} := {left_code}) is not None and {test if truth else f'not {test}'})"
        a, b = self.temp(), self.temp()
        test = f"{a} {python} {b}"
        return (
            f"(({a} := {left_code}) is not None and ({b} := {self._value(right, kind)}) "
            f"is not None and {test if truth else f'not ({test})'})"
        )

    def _membership(self, node: In, truth: bool) -> str:
        values = self.constant(frozenset(node.values))
        text = self._value(node.operand, Type.STR)
        if truth:
            return f"({text} in {values})"
        t = self.temp()
        return f"(({t} := {text}) is not None and {t} not in {values})"

    def _like(self, node: Like, truth: bool) -> str:
        pattern = self.constant(like_pattern(node.pattern, node.escape))
        t = self.temp()
        found = "is not None" if truth else "is None"
        text = self._value(node.operand, Type.STR)
        return f"(({t} := {text}) is not None and {pattern}.fullmatch({t}) {found})"

    # -- values ----------------------------------------------------------------------------

    def _raw(self, node: Identifier) -> str:
        """An identifier's value as the message holds it (a header's text)."""
        field = FIELDS.get(node.name)
        return f"h.get({node.name!r})" if field is None else field.code

    def _value(self, node: Expression, kind: Type) -> str:
        """Python giving ``node``'s value as ``kind``, or None when it is unknown."""
        if isinstance(node, Literal):
            return repr(node.value) if node.type is kind else "None"
        if isinstance(node, Identifier):
            field = FIELDS.get(node.name)
            if field is not None:
                return field.code if field.type == kind.name else "None"
            raw = f"h.get({node.name!r})"
            if kind is Type.NUM:
                return f"_number({raw})"
            return raw if kind is Type.STR else f"_boolean({raw})"
        if isinstance(node, Negative):
            t = self.temp()
            return f"(None if ({t} := {self._value(node.operand, Type.NUM)}) is None else -{t})"
        if isinstance(node, Arithmetic):
            a, b = self.temp(), self.temp()
            left, right = self._value(node.left, Type.NUM), self._value(node.right, Type.NUM)
            result = f"_divide({a}, {b})" if node.operator == "/" else f"{a} {node.operator} {b}"
            return f"(None if ({a} := {left}) is None or ({b} := {right}) is None else {result})"
        # a condition used as a value: (a > 1) = TRUE
        return f"(True if {self.true(node)} else False if {self.false(node)} else None)"


_MIRROR = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
