"""The syntax tree of a JMS message selector, and the parser that builds it.

Grammar (JMS 1.1, section 3.8.1.1), lowest precedence first::

    selector    := or
    or          := and ( OR and )*
    and         := not ( AND not )*
    not         := NOT not | predicate
    predicate   := sum [ ( = | <> | < | <= | > | >= ) sum
                       | [NOT] BETWEEN sum AND sum
                       | [NOT] IN '(' string ( ',' string )* ')'
                       | [NOT] LIKE string [ ESCAPE string ]
                       | IS [NOT] NULL ]
    sum         := product ( ( + | - ) product )*
    product     := unary ( ( * | / ) unary )*
    unary       := ( + | - ) unary | primary
    primary     := literal | identifier | '(' or ')'

Each node knows its static type (``Type``): a literal's, a JMS header
field's, or ``ANY`` for a message property, whose value is text that a
comparison reads as the type it needs (see ``values``). What cannot be
right whatever the message is refused here, at the position of the culprit:
arithmetic on strings, a string compared with a number, strings or booleans
ordered with ``<``, a selector that is not a condition, nesting too deep.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from wiremq.modules.selector.lexer import Kind, SelectorError, Token, tokenize
from wiremq.modules.selector.values import FIELDS

MAX_DEPTH = 40  # nesting of the tree: the compiled Python must stay within its parser's limits


class Type(Enum):
    BOOL = "boolean"
    NUM = "number"
    STR = "string"
    ANY = "property"  # a message property: its text, read as the type a comparison needs


@dataclass(frozen=True, slots=True)
class Node:
    position: int


@dataclass(frozen=True, slots=True)
class Literal(Node):
    value: str | int | float | bool

    @property
    def type(self) -> Type:
        if isinstance(self.value, bool):
            return Type.BOOL
        return Type.STR if isinstance(self.value, str) else Type.NUM


@dataclass(frozen=True, slots=True)
class Identifier(Node):
    name: str

    @property
    def type(self) -> Type:
        field = FIELDS.get(self.name)
        return Type.ANY if field is None else Type[field.type]


@dataclass(frozen=True, slots=True)
class Negative(Node):
    operand: Expression
    type = Type.NUM


@dataclass(frozen=True, slots=True)
class Arithmetic(Node):
    operator: str  # + - * /
    left: Expression
    right: Expression
    type = Type.NUM


@dataclass(frozen=True, slots=True)
class Comparison(Node):
    operator: str  # = <> < <= > >=
    left: Expression
    right: Expression
    type = Type.BOOL


@dataclass(frozen=True, slots=True)
class Between(Node):
    operand: Expression
    low: Expression
    high: Expression
    negated: bool
    type = Type.BOOL


@dataclass(frozen=True, slots=True)
class In(Node):
    operand: Identifier
    values: tuple[str, ...]
    negated: bool
    type = Type.BOOL


@dataclass(frozen=True, slots=True)
class Like(Node):
    operand: Identifier
    pattern: str
    escape: str | None
    negated: bool
    type = Type.BOOL


@dataclass(frozen=True, slots=True)
class IsNull(Node):
    operand: Identifier
    negated: bool
    type = Type.BOOL


@dataclass(frozen=True, slots=True)
class Not(Node):
    operand: Expression
    type = Type.BOOL


@dataclass(frozen=True, slots=True)
class Logical(Node):
    operator: str  # AND, OR
    operands: tuple[Expression, ...]
    type = Type.BOOL


Expression = (
    (Literal | Identifier | Negative | Arithmetic | Comparison | Between | In | Like | IsNull)
    | Not
    | Logical
)

ORDERING = ("<", "<=", ">", ">=")
COMPARISONS = ("=", "<>", *ORDERING)


def parse(text: str) -> Expression:
    """The tree of a selector; ``SelectorError`` says what is wrong and where."""
    parser = _Parser(text)
    tree = parser.or_()
    parser.expect_end()
    if tree.type not in (Type.BOOL, Type.ANY):
        raise SelectorError(f"a selector must be a condition, not a {tree.type.value}", 0, text)
    return tree


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.index = 0
        self.depth = 0

    # -- tokens ----------------------------------------------------------------------------

    @property
    def token(self) -> Token:
        return self.tokens[self.index]

    def error(self, reason: str, position: int | None = None) -> SelectorError:
        return SelectorError(
            reason, self.token.position if position is None else position, self.text
        )

    def at(self, *words: str) -> bool:
        token = self.token
        return token.kind in (Kind.KEYWORD, Kind.OPERATOR) and token.value in words

    def take(self, *words: str) -> Token | None:
        if self.at(*words):
            token = self.token
            self.index += 1
            return token
        return None

    def expect(self, word: str, what: str) -> Token:
        token = self.take(word)
        if token is None:
            raise self.error(f"expected {what}, found {self.describe()}")
        return token

    def expect_end(self) -> None:
        if self.token.kind is not Kind.END:
            raise self.error(f"unexpected {self.describe()}")

    def describe(self) -> str:
        token = self.token
        if token.kind is Kind.END:
            return "the end of the selector"
        return f"{token.kind.value} {token.text!r}"

    def nested(self, position: int) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error(f"selector nested too deeply (more than {MAX_DEPTH} levels)", position)

    # -- conditions ------------------------------------------------------------------------

    def or_(self) -> Expression:
        return self._logical("OR", self.and_)

    def and_(self) -> Expression:
        return self._logical("AND", self.not_)

    def _logical(self, word: str, operand: object) -> Expression:
        start = self.token.position
        parts = [operand()]  # type: ignore[operator]
        while True:
            token = self.take(word)
            if token is None:
                break
            parts.append(operand())  # type: ignore[operator]
        if len(parts) == 1:
            return parts[0]
        for part in parts:
            self.condition(part, word)
        return Logical(start, word, tuple(parts))

    def not_(self) -> Expression:
        token = self.take("NOT")
        if token is None:
            return self.predicate()
        self.nested(token.position)
        operand = self.not_()
        self.depth -= 1
        self.condition(operand, "NOT")
        return Not(token.position, operand)

    def condition(self, node: Expression, operator: str) -> None:
        if node.type not in (Type.BOOL, Type.ANY):
            raise self.error(
                f"{operator} needs a condition, not a {node.type.value}", node.position
            )

    def predicate(self) -> Expression:
        left = self.sum()
        token = self.take(*COMPARISONS)
        if token is not None:
            right = self.sum()
            return self.comparison(token, left, right)
        negated_at = self.token.position
        negated = self.take("NOT") is not None
        if self.take("BETWEEN"):
            low = self.sum()
            self.expect("AND", "AND between the two bounds of BETWEEN")
            high = self.sum()
            for node in (left, low, high):
                self.numeric(node, "BETWEEN")
            return Between(left.position, left, low, high, negated)
        if self.take("IN"):
            return In(left.position, self.property(left, "IN"), self.strings(), negated)
        if self.take("LIKE"):
            return self.like(left, negated)
        if negated:
            raise self.error("NOT here must be followed by BETWEEN, IN or LIKE", negated_at)
        if self.take("IS"):
            negated = self.take("NOT") is not None
            self.expect("NULL", "NULL after IS")
            return IsNull(left.position, self.property(left, "IS NULL"), negated)
        return left

    def comparison(self, token: Token, left: Expression, right: Expression) -> Comparison:
        operator = str(token.value)
        types = {left.type, right.type} - {Type.ANY}
        if len(types) > 1:
            kinds = " with a ".join(sorted(t.value for t in types))
            raise self.error(f"cannot compare a {kinds}", token.position)
        if operator in ORDERING and types & {Type.STR, Type.BOOL}:
            raise self.error(
                f"{operator} compares numbers; strings and booleans only = and <>", token.position
            )
        return Comparison(left.position, operator, left, right)

    def property(self, node: Expression, operator: str) -> Identifier:
        if not isinstance(node, Identifier):
            raise self.error(f"{operator} applies to an identifier", node.position)
        if node.type in (Type.NUM, Type.BOOL) and operator != "IS NULL":
            raise self.error(f"{node.name} is a {node.type.value}, not a string", node.position)
        return node

    def strings(self) -> tuple[str, ...]:
        self.expect("(", "( after IN")
        values = [self.string("IN")]
        while self.take(","):
            values.append(self.string("IN"))
        self.expect(")", ") or , in the IN list")
        return tuple(values)

    def string(self, operator: str) -> str:
        token = self.token
        if token.kind is not Kind.STRING:
            raise self.error(f"{operator} takes string literals, found {self.describe()}")
        self.index += 1
        return str(token.value)

    def like(self, left: Expression, negated: bool) -> Like:
        operand = self.property(left, "LIKE")
        pattern_at = self.token.position
        pattern = self.string("LIKE")
        escape = None
        if self.take("ESCAPE"):
            at = self.token.position
            escape = self.string("ESCAPE")
            if len(escape) != 1:
                raise self.error("the ESCAPE string must be one character", at)
            if pattern.endswith(escape) and not _escaped_end(pattern, escape):
                raise self.error("the LIKE pattern ends with its escape character", pattern_at)
        return Like(left.position, operand, pattern, escape, negated)

    # -- arithmetic ------------------------------------------------------------------------

    def numeric(self, node: Expression, operator: str) -> None:
        if node.type not in (Type.NUM, Type.ANY):
            raise self.error(f"{operator} needs numbers, not a {node.type.value}", node.position)

    def sum(self) -> Expression:
        return self._arithmetic(("+", "-"), self.product)

    def product(self) -> Expression:
        return self._arithmetic(("*", "/"), self.unary)

    def _arithmetic(self, operators: tuple[str, ...], operand: object) -> Expression:
        left: Expression = operand()  # type: ignore[operator]
        levels = 0
        while True:
            token = self.take(*operators)
            if token is None:
                break
            right: Expression = operand()  # type: ignore[operator]
            self.numeric(left, str(token.value))
            self.numeric(right, str(token.value))
            self.nested(token.position)
            levels += 1
            left = Arithmetic(left.position, str(token.value), left, right)
        self.depth -= levels
        return left

    def unary(self) -> Expression:
        token = self.take("+", "-")
        if token is None:
            return self.primary()
        self.nested(token.position)
        operand = self.unary()
        self.depth -= 1
        self.numeric(operand, str(token.value))
        if token.value == "+":
            return operand
        if isinstance(operand, Literal) and not isinstance(operand.value, (bool, str)):
            return Literal(token.position, -operand.value)
        return Negative(token.position, operand)

    def primary(self) -> Expression:
        token = self.token
        if token.kind in (Kind.STRING, Kind.EXACT, Kind.APPROXIMATE):
            self.index += 1
            return Literal(token.position, token.value)  # type: ignore[arg-type]
        if token.kind is Kind.IDENTIFIER:
            self.index += 1
            return Identifier(token.position, token.text)
        if self.take("TRUE", "FALSE"):
            return Literal(token.position, token.value == "TRUE")
        if self.take("("):
            self.nested(token.position)
            inner = self.or_()
            self.depth -= 1
            self.expect(")", "a closing )")
            return inner
        if token.kind is Kind.KEYWORD:
            raise self.error(f"{token.text} is a reserved word, not a value")
        raise self.error(f"expected a value, found {self.describe()}")


def _escaped_end(pattern: str, escape: str) -> bool:
    """Whether the escape character at the end of ``pattern`` is itself escaped."""
    run = len(pattern) - len(pattern.rstrip(escape))
    return run % 2 == 0
