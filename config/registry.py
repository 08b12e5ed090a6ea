"""The parameter registry: every tunable of the server, described once.

A ``Parameter`` knows its group and name (the manual's, e.g.
``VolQueueStoreImpl.globalbytehighwatermark``), type, default, bounds, unit,
whether it may change while the server runs, and a one-line description.
config.xml parsing, validation, the default config file and the parameter
reference are all derived from it; a parameter is added in one place
(``parameters.py``). Rules between parameters are declared there too, as
``Order``s (a low watermark not above its high one) and ``Condition``s (what
an order cannot say: HA needs both stores in PostgreSQL), and checked by
``Registry.check`` wherever values are given, so that a configuration that
passes its parameters one by one cannot break the server later.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

Value = int | float | bool | str


@dataclass(frozen=True, slots=True)
class Parameter:
    """One tunable."""

    group: str
    name: str
    kind: type
    default: Value
    doc: str
    unit: str = ""
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    live: bool = False  # may be changed while the server runs
    off: int | None = None  # a value outside the bounds that switches the feature off (-1)
    aliases: tuple[str, ...] = ()  # other spellings the manual uses for the same parameter

    @property
    def key(self) -> str:
        return f"{self.group}.{self.name}"

    def allowed(self) -> str:
        """The allowed values, in words, for error messages and the reference."""
        if self.kind is bool:
            return "true or false"
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.kind in (int, float):
            low = "" if self.minimum is None else self._number(self.minimum)
            high = "" if self.maximum is None else self._number(self.maximum)
            text = f"a {'whole ' if self.kind is int else ''}number"
            if low and high:
                text += f" from {low} to {high}"
            elif low:
                text += f" of at least {low}"
            elif high:
                text += f" of at most {high}"
            if self.off is not None:
                text += f", or {self.off} to switch it off"
            return text
        return "any text"

    def _number(self, value: float) -> str:
        return str(int(value)) if self.kind is int else f"{value:g}"

    def parse(self, text: str) -> Value:
        """Convert and validate a value given as text; ``ValueError`` says what is allowed."""
        text = text.strip()
        try:
            if self.kind is bool:
                lowered = text.lower()
                if lowered not in ("true", "false"):
                    raise ValueError
                value: Value = lowered == "true"
            elif self.kind is int:
                value = int(text)
            elif self.kind is float:
                value = float(text)
            else:
                value = text
        except ValueError:
            raise ValueError(f"{text!r} is not valid: expected {self.allowed()}") from None
        self.check(value)
        return value

    def check(self, value: Value) -> None:
        """Raise ``ValueError`` if a typed value is outside what is allowed."""
        if self.choices and value not in self.choices:
            raise ValueError(f"{value!r} is not valid: expected {self.allowed()}")
        if isinstance(value, str) and _NOT_XML.search(value):
            raise ValueError(f"{value!r} is not valid: expected text without control characters")
        if self.kind in (int, float) and not isinstance(value, bool):
            assert isinstance(value, int | float)
            if math.isnan(value):
                raise ValueError(f"{value} is not valid: expected {self.allowed()}")
            if self.off is not None and value == self.off:
                return
            too_low = self.minimum is not None and value < self.minimum
            too_high = self.maximum is not None and value > self.maximum
            if too_low or too_high:
                raise ValueError(f"{value} is out of range: expected {self.allowed()}")


# What config.xml (XML 1.0) cannot hold: control characters but tab and line ends, lone
# surrogates, U+FFFE and U+FFFF. A text value with one could never be saved.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


@dataclass(frozen=True, slots=True)
class Order:
    """Two parameters (``Group.name``) whose values must not cross: ``low`` <= ``high``.

    With ``paired``, the two switch one feature on and off together (a
    watermark's high and low): both are off (their ``off`` value) or neither
    is, and the order holds only between values that are on. ``why`` says
    what the rule protects, for the operator who broke it.
    """

    low: str
    high: str
    why: str
    paired: bool = False


@dataclass(frozen=True, slots=True)
class Condition:
    """A rule over several parameters (``Group.name`` each) that an ``Order`` cannot say.

    ``holds`` and ``explain`` take the values of ``keys``, in that order:
    ``holds`` says whether they keep the rule, ``explain`` what is wrong when
    they do not (worded for the operator; it must not repeat a secret, such as
    a password in a storage URI). The parameter of them given last is blamed.
    """

    keys: tuple[str, ...]
    holds: Callable[..., bool]
    explain: Callable[..., str]


class RelationError(ValueError):
    """Values that break a rule (``Order``, ``Condition``); ``parameter`` is the one to
    blame."""

    def __init__(self, parameter: Parameter, problem: str) -> None:
        super().__init__(problem)
        self.parameter = parameter


class Registry:
    """All parameters, looked up by group and name without regard to case."""

    def __init__(
        self, parameters: Iterable[Parameter], relations: Iterable[Order | Condition] = ()
    ) -> None:
        self._by_key: dict[tuple[str, str], Parameter] = {}
        self._aliases: dict[tuple[str, str], Parameter] = {}
        self._groups: dict[str, str] = {}
        for p in parameters:
            key = (p.group.lower(), p.name.lower())
            if key in self._by_key:
                raise ValueError(f"parameter {p.key} is registered twice")
            p.check(p.default)
            self._by_key[key] = p
            for alias in p.aliases:
                self._aliases[(p.group.lower(), alias.lower())] = p
            self._groups.setdefault(p.group.lower(), p.group)
        self._relations: list[tuple[Order, Parameter, Parameter]] = []
        self._conditions: list[tuple[Condition, list[Parameter]]] = []
        for relation in relations:
            if isinstance(relation, Condition):
                self._conditions.append((relation, [self._known(k) for k in relation.keys]))
                continue
            low, high = self._known(relation.low), self._known(relation.high)
            self._relations.append((relation, low, high))
        try:
            self.check(lambda p: p.default, lambda p: 0)
        except RelationError as error:
            raise ValueError(f"the defaults break a rule: {error}") from None

    def _known(self, key: str) -> Parameter:
        group, _, name = key.partition(".")
        param = self.get(group, name)
        if param is None:
            raise ValueError(f"a rule names the unknown parameter {key}")
        return param

    def check(self, value: Callable[[Parameter], Value], given: Callable[[Parameter], int]) -> None:
        """Raise ``RelationError`` for the first ``Order`` the values break.

        ``value(p)`` is a parameter's value in force; ``given(p)`` orders when
        values were given (0 for a default), so that the error blames the
        parameter of the two given last: the one that broke the rule.
        """
        for problem in self.problems(value, given):
            raise problem

    def problems(
        self, value: Callable[[Parameter], Value], given: Callable[[Parameter], int]
    ) -> list[RelationError]:
        """Every rule the values break, each blaming one parameter (as ``check``)."""
        found = []
        for relation, low, high in self._relations:
            if not _holds(relation, low, high, value(low), value(high)):
                blamed, other = (low, high) if given(low) > given(high) else (high, low)
                problem = _problem(relation, blamed, value(blamed), other, value(other))
                found.append(RelationError(blamed, problem))
        for condition, params in self._conditions:
            values = [value(p) for p in params]
            if not condition.holds(*values):
                blamed = max(params, key=given)  # the first of them if none was given
                found.append(RelationError(blamed, condition.explain(*values)))
        return found

    def __iter__(self) -> Iterator[Parameter]:
        return iter(self._by_key.values())

    def group(self, name: str) -> str | None:
        """The canonical spelling of a group name, or None if unknown."""
        return self._groups.get(name.lower())

    def groups(self) -> list[str]:
        return list(self._groups.values())

    def get(self, group: str, name: str) -> Parameter | None:
        key = (group.lower(), name.lower())
        return self._by_key.get(key) or self._aliases.get(key)

    def in_group(self, group: str) -> list[Parameter]:
        return [p for p in self if p.group.lower() == group.lower()]

    def suggest(self, group: str, name: str) -> str:
        """A hint naming the closest known spelling, or the known names."""
        known = [p.name for p in self.in_group(group)]
        close = difflib.get_close_matches(name.lower(), [k.lower() for k in known], n=1)
        if close:
            return f"did you mean '{close[0]}'?"
        return "known parameters: " + ", ".join(known)


def _holds(
    relation: Order, low: Parameter, high: Parameter, low_value: Value, high_value: Value
) -> bool:
    """Whether the values keep ``relation`` (a paired rule holds while both are off)."""
    low_off, high_off = low_value == low.off, high_value == high.off
    if relation.paired and (low_off or high_off):
        return low_off and high_off
    assert isinstance(low_value, int | float) and isinstance(high_value, int | float)
    return low_value <= high_value


def _problem(
    relation: Order, blamed: Parameter, value: Value, other: Parameter, other_value: Value
) -> str:
    """What is wrong with ``blamed``'s value (against ``other``'s), worded for the operator."""
    why = relation.why
    if relation.paired and value == blamed.off:
        return (
            f"{value} switches it off but {other.key} is set ({other_value}); "
            f"{why}: set both, or neither"
        )
    if relation.paired and other_value == other.off:
        return f"{value} is set but {other.key} is off ({other_value}); {why}: set both, or neither"
    assert isinstance(value, int | float) and isinstance(other_value, int | float)
    side = "above" if value > other_value else "below"
    return f"{value} is {side} {other.key} ({other_value}); {why}"
