"""JMS message selectors: parsed once per subscription into a compiled predicate.

``compile_selector(text)`` returns a ``Selector`` whose ``match(message)`` says
whether the selector is TRUE for the message, or raises ``SelectorError``
with the position of what is wrong. How header text takes part in
comparisons (the numeric rule) is in ``values``; the grammar in ``syntax``;
the compilation in ``compiler``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

from wiremq.modules.selector.compiler import compile_tree
from wiremq.modules.selector.lexer import SelectorError
from wiremq.modules.selector.syntax import Comparison, Identifier, Literal, Logical, Type, parse

__all__ = ["Selector", "SelectorError", "compile_selector"]

Equality = tuple[str, str | int | float]  # a header that must equal a literal: (name, value)


class Selector:
    """A compiled selector, shared by every subscription with the same text."""

    __slots__ = ("text", "match", "source", "expression", "constants", "equalities")

    def __init__(
        self,
        text: str,
        compiled: tuple[Callable[[Any], bool], str, str, dict[str, object]],
        equalities: list[Equality],
    ) -> None:
        self.text = text
        # match: message -> bool, the selector is TRUE for it; source: the Python it was
        # compiled to; expression: what match returns, of ``m`` and ``h`` (m.headers), with
        # the constants it names, for a function that tests several (``Matcher``).
        self.match, self.source, self.expression, self.constants = compiled
        # Conditions every selected message meets: ``name = literal`` at the top level,
        # by which a queue indexes its selectors (see ``modules/destinations/filters.py``).
        self.equalities = equalities

    def __repr__(self) -> str:
        return f"<Selector {self.text!r}>"


@lru_cache(maxsize=4096)
def compile_selector(text: str) -> Selector:
    """The compiled selector of ``text`` (compiled once per distinct text)."""
    tree = parse(text)
    return Selector(text, compile_tree(tree), _equalities(tree))


def _equalities(tree: object) -> list[Equality]:
    conjuncts = tree.operands if isinstance(tree, Logical) and tree.operator == "AND" else (tree,)
    found: list[Equality] = []
    for node in conjuncts:
        if isinstance(node, Comparison) and node.operator == "=":
            sides = (node.left, node.right)
            names = [n for n in sides if isinstance(n, Identifier) and n.type is Type.ANY]
            values = [n for n in sides if isinstance(n, Literal) and n.type in (Type.STR, Type.NUM)]
            if names and values:
                found.append((names[0].name, values[0].value))  # type: ignore[arg-type]
    return found
