"""The values in force: registry defaults, overridden by config.xml and the command line."""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from wiremq.config.registry import Parameter, Registry, Value

DESTINATION_GROUP = "Destination"


class Settings:
    """Typed, validated parameter values, read as ``settings.get("Group", "name")``.

    Parameters of the ``Destination`` group are defaults that single destinations
    may override (``<Destination name="/queue/x" maxttl="5000"/>``); read them
    with ``for_destination``.
    """

    def __init__(self, registry: Registry, values: Mapping[str, Value] | None = None) -> None:
        self.registry = registry
        self._values: dict[str, Value] = {p.key: p.default for p in registry}
        self._given: dict[str, int] = {}  # when each value not left at its default was given
        self._sets = itertools.count(1)
        self.destinations: dict[str, dict[str, Value]] = {}
        for key, value in (values or {}).items():
            self.set(key, value)
        self.check_relations()

    def _param(self, group: str, name: str) -> Parameter:
        param = self.registry.get(group, name)
        if param is None:
            raise KeyError(f"unknown parameter {group}.{name}")
        return param

    def get(self, group: str, name: str) -> Value:
        return self._values[self._param(group, name).key]

    def get_int(self, group: str, name: str) -> int:
        value = self.get(group, name)
        assert isinstance(value, int)
        return value

    def get_float(self, group: str, name: str) -> float:
        value = self.get(group, name)
        assert isinstance(value, int | float)
        return float(value)

    def get_str(self, group: str, name: str) -> str:
        return str(self.get(group, name))

    def set(self, key: str, value: Value) -> None:
        """Set ``Group.name``; the value must already be typed and is checked on its own.

        Rules between parameters are checked by ``check_relations`` once every
        value is given: a high watermark given before its low one is no error.
        """
        group, _, name = key.partition(".")
        param = self._param(group, name)
        param.check(value)
        self._values[param.key] = value
        self._given[param.key] = next(self._sets)

    def check_relations(self) -> None:
        """Raise ``RelationError`` if the values break a rule between two parameters,
        blaming the parameter of the two given last."""
        self.registry.check(lambda p: self._values[p.key], lambda p: self._given.get(p.key, 0))

    def set_for_destination(self, destination: str, name: str, value: Value) -> None:
        """Override a ``Destination`` parameter for one destination; the value is checked."""
        param = self._param(DESTINATION_GROUP, name)
        param.check(value)
        self.destinations.setdefault(destination, {})[param.name] = value

    def for_destination(self, destination: str, name: str) -> Value:
        """A ``Destination`` parameter as it applies to ``destination``."""
        override = self.destinations.get(destination)
        if override is not None and name in override:
            return override[name]
        return self.get(DESTINATION_GROUP, name)

    def items(self) -> list[tuple[str, Value]]:
        return list(self._values.items())
