"""The values in force: registry defaults, overridden by config.xml and the command line."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping

from wiremq.config.registry import Parameter, Registry, RelationError, Value

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
        self._listeners: list[Callable[[frozenset[str]], None]] = []
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

    def relation_problems(self) -> list[RelationError]:
        """Every rule between two parameters the values break (``check_relations`` raises
        the first)."""
        return self.registry.problems(
            lambda p: self._values[p.key], lambda p: self._given.get(p.key, 0)
        )

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

    def param(self, key: str) -> Parameter:
        """The parameter ``Group.name`` names (any spelling the registry knows)."""
        group, _, name = key.partition(".")
        return self._param(group, name)

    # -- changes while the server runs -----------------------------------------------------

    def on_change(self, listener: Callable[[frozenset[str]], None]) -> Callable[[], None]:
        """Call ``listener(groups)`` after every ``change``, with the groups it changed;
        returns a function that stops it. The pieces that keep typed settings objects read
        them again there: that is how a change reaches the running server."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def change(
        self,
        values: Mapping[str, Value],
        destinations: Mapping[str, Mapping[str, Value | None]] | None = None,
    ) -> None:
        """Change values in force: each is checked alone, then all together against the
        rules between parameters; if any fails, none is changed (the ``ValueError`` says
        why). Then the listeners are told.

        ``destinations`` changes single destinations' overrides of the ``Destination``
        group (None removes an override).
        """
        saved = (dict(self._values), dict(self._given), _copy(self.destinations))
        groups: set[str] = set()
        try:
            for key, value in values.items():
                self.set(key, value)
                groups.add(self.param(key).group)
            for destination, overrides in (destinations or {}).items():
                for name, value in overrides.items():
                    if value is None:
                        self.destinations.get(destination, {}).pop(
                            self._param(DESTINATION_GROUP, name).name, None
                        )
                    else:
                        self.set_for_destination(destination, name, value)
                    groups.add(DESTINATION_GROUP)
            self.check_relations()
        except (ValueError, KeyError):
            self._values, self._given, self.destinations = saved
            raise
        self.destinations = {d: o for d, o in self.destinations.items() if o}
        changed = frozenset(groups)
        for listener in list(self._listeners):
            listener(changed)

    def copy(self) -> Settings:
        """The same values, without the listeners: to try changes on."""
        twin = Settings(self.registry)
        twin._values = dict(self._values)
        twin._given = dict(self._given)
        twin._sets = itertools.count(next(self._sets))
        twin.destinations = _copy(self.destinations)
        return twin


def _copy(destinations: dict[str, dict[str, Value]]) -> dict[str, dict[str, Value]]:
    return {name: dict(overrides) for name, overrides in destinations.items()}
