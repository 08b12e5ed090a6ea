"""The parameter registry: every tunable of the server, described once.

A ``Parameter`` knows its group and name (the manual's, e.g.
``VolQueueStoreImpl.globalbytehighwatermark``), type, default, bounds, unit,
whether it may change while the server runs, and a one-line description.
config.xml parsing, validation, the default config file and the parameter
reference are all derived from it; a parameter is added in one place
(``parameters.py``).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Iterator
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


class Registry:
    """All parameters, looked up by group and name without regard to case."""

    def __init__(self, parameters: Iterable[Parameter]) -> None:
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
