"""Tokens of a JMS message selector, each with the position it starts at.

The lexical rules are the JMS specification's (section 3.8.1.1): string
literals in single quotes (two quotes for one), exact numeric literals as
Java integer literals (decimal, ``0x`` hexadecimal, octal with a leading
``0``, an optional ``L``), approximate numeric literals as Java floating
point literals (``7E3``, ``-57.9E2``, ``7.``, ``.5``, an optional ``F`` or
``D``), ``TRUE`` / ``FALSE``, identifiers as Java identifiers, and the
reserved words, whose case does not matter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum


class SelectorError(ValueError):
    """A selector that cannot be used: ``position`` is where, counting from 0."""

    def __init__(self, reason: str, position: int, text: str) -> None:
        super().__init__(f"{reason} at position {position + 1}")
        self.reason = reason
        self.position = position
        self.text = text

    def pointer(self) -> str:
        """The selector and a caret under the position of the error (for an ERROR body)."""
        line = self.text.replace("\n", " ").replace("\r", " ").replace("\t", " ")
        return f"{line}\n{' ' * self.position}^"


class Kind(Enum):
    STRING = "string"
    EXACT = "exact number"
    APPROXIMATE = "approximate number"
    IDENTIFIER = "identifier"
    KEYWORD = "keyword"
    OPERATOR = "operator"
    END = "end of the selector"


KEYWORDS = frozenset(
    {"NOT", "AND", "OR", "BETWEEN", "LIKE", "IN", "IS", "NULL", "TRUE", "FALSE", "ESCAPE"}
)


@dataclass(frozen=True, slots=True)
class Token:
    kind: Kind
    text: str  # as written; a keyword in upper case
    value: object  # a literal's value (str, int, float); a keyword or operator's text
    position: int


_SPACE = re.compile(r"[ \t\f\r\n]+")
_APPROXIMATE = re.compile(
    r"(?:\d+\.\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)[fFdD]?|\d+[fFdD]"
)
_EXACT = re.compile(r"0[xX][0-9a-fA-F]+[lL]?|\d+[lL]?")
_IDENTIFIER = re.compile(r"[^\W\d]|\$", re.UNICODE)
_OPERATORS = ("<>", "<=", ">=", "=", "<", ">", "+", "-", "*", "/", "(", ")", ",")


def tokenize(text: str) -> list[Token]:
    """Every token of ``text``, ending with an END token; ``SelectorError`` if one is bad."""
    tokens: list[Token] = []
    position = 0
    end = len(text)
    while True:
        space = _SPACE.match(text, position)
        if space:
            position = space.end()
        if position >= end:
            tokens.append(Token(Kind.END, "", None, end))
            return tokens
        char = text[position]
        if char == "'":
            token = _string(text, position)
        elif char.isdigit() or (char == "." and text[position + 1 : position + 2].isdigit()):
            token = _number(text, position)
        elif _IDENTIFIER.match(char):
            token = _word(text, position)
        else:
            token = _operator(text, position)
        tokens.append(token)
        position += len(token.text)


def _string(text: str, start: int) -> Token:
    position = start + 1
    parts = []
    while True:
        close = text.find("'", position)
        if close < 0:
            raise SelectorError("string not closed (a quote is missing)", start, text)
        parts.append(text[position:close])
        if text[close + 1 : close + 2] == "'":  # '' is one quote
            parts.append("'")
            position = close + 2
            continue
        return Token(Kind.STRING, text[start : close + 1], "".join(parts), start)


def _number(text: str, start: int) -> Token:
    approximate = _APPROXIMATE.match(text, start)
    exact = _EXACT.match(text, start)
    if approximate and (not exact or approximate.end() > exact.end()):
        written = approximate.group()
        token = Token(Kind.APPROXIMATE, written, float(written.rstrip("fFdD")), start)
    else:
        assert exact is not None
        written = exact.group()
        digits = written.rstrip("lL")
        if digits[:2] in ("0x", "0X"):
            value = int(digits, 16)
        elif len(digits) > 1 and digits[0] == "0":
            if any(d in "89" for d in digits):
                raise SelectorError(f"{written} is not an octal number", start, text)
            value = int(digits, 8)
        else:
            value = int(digits)
        token = Token(Kind.EXACT, written, value, start)
    after = start + len(token.text)
    if after < len(text) and (text[after].isalnum() or text[after] in "_$."):
        raise SelectorError(f"malformed number {text[start : after + 1]!r}", start, text)
    return token


def _word(text: str, start: int) -> Token:
    position = start + 1
    while position < len(text) and (text[position].isalnum() or text[position] in "_$"):
        position += 1
    word = text[start:position]
    upper = word.upper()
    if upper in KEYWORDS:
        return Token(Kind.KEYWORD, word, upper, start)
    return Token(Kind.IDENTIFIER, word, word, start)


def _operator(text: str, start: int) -> Token:
    for operator in _OPERATORS:
        if text.startswith(operator, start):
            return Token(Kind.OPERATOR, operator, operator, start)
    if text.startswith("!=", start):
        raise SelectorError("'!=' is written '<>' in a selector", start, text)
    if text[start] == '"':
        raise SelectorError("strings are written in single quotes", start, text)
    raise SelectorError(f"unexpected character {text[start]!r}", start, text)
