"""Changing parameters while the server runs: checked, saved to config.xml, applied if live.

Every change goes the same way, whoever asks (the console, the JSON API, the
wizard): each value is checked by its parameter (type, bounds, choices), then
all of them together with the values in force and those waiting for a restart
against the registry's rules between parameters; then config.xml is rewritten
(the previous file kept beside it); only then are the live ones put in force
(``Settings.change`` tells the pieces of the running server). A parameter that
is not live keeps its value in force until the next start: it is reported as
waiting for a restart. Nothing is changed if anything is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from wiremq.config.registry import Parameter, RelationError, Value
from wiremq.config.settings import DESTINATION_GROUP, Settings
from wiremq.config.xmlconfig import ConfigError, save_values

CONFIG_FILE = "config.xml"


class TuningError(ValueError):
    """A change refused; ``parameter`` names the one to blame, if one is."""

    def __init__(self, problem: str, parameter: str | None = None) -> None:
        super().__init__(f"{parameter}: {problem}" if parameter else problem)
        self.problem = problem
        self.parameter = parameter


class UnknownParameter(TuningError):
    """A key the registry does not know."""


class SaveFailed(Exception):
    """config.xml could not be written (the change was not made)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a change did to one parameter: in force now, or after a restart."""

    key: str
    value: Value | None  # None: a destination's override removed
    applied: bool


def coerce(param: Parameter, raw: object) -> Value:
    """A value given as JSON (or text) as the parameter's type, checked; ``ValueError``
    says what is allowed. A whole number is taken for a float; text is parsed as in
    config.xml; nothing else is converted (``true`` is no number, ``1`` no boolean)."""
    if isinstance(raw, str):
        return param.parse(raw)
    if param.kind is bool:
        ok = isinstance(raw, bool)
    elif param.kind is int:
        ok = isinstance(raw, int) and not isinstance(raw, bool)
    elif param.kind is float:
        ok = isinstance(raw, int | float) and not isinstance(raw, bool)
        raw = float(raw) if ok else raw  # type: ignore[arg-type]
    else:
        ok = False
    if not ok:
        raise ValueError(f"{raw!r} is not valid: expected {param.allowed()}")
    assert isinstance(raw, int | float | bool)
    param.check(raw)
    return raw


class Tuning:
    """The parameters as the operator changes them (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        config_path: str | Path,
        command_line: frozenset[str] = frozenset(),
    ) -> None:
        self.settings = settings  # the values in force
        self.path = Path(config_path)
        # Given on the command line: it overrides config.xml at the next start too.
        self.command_line = command_line
        self.pending: dict[str, Value] = {}  # saved, in force after a restart
        self.pending_destinations: dict[str, dict[str, Value | None]] = {}

    def param(self, key: str) -> Parameter:
        group, _, name = key.partition(".")
        found = self.settings.registry.get(group, name)
        if found is None:
            raise UnknownParameter(f"unknown parameter {key!r}")
        return found

    def configured(self, param: Parameter) -> Value:
        """The value config.xml gives now: in force, or waiting for a restart."""
        return self.pending.get(param.key, self.settings.get(param.group, param.name))

    def change(self, raw: Mapping[str, object]) -> list[Outcome]:
        """Change parameters (``Group.name`` -> value as JSON or text) all or none."""
        values: dict[str, Value] = {}
        for key, given in raw.items():
            param = self.param(key)
            try:
                values[param.key] = coerce(param, given)
            except ValueError as error:
                raise TuningError(str(error), param.key) from None
        self._check(values, {})
        self._save(values, {})
        live = {k: v for k, v in values.items() if self.param(k).live}
        self.settings.change(live)
        for key, value in values.items():
            if key in live or value == self.settings.get(*key.split(".", 1)):
                self.pending.pop(key, None)
            else:
                self.pending[key] = value
        return [Outcome(k, v, k in live) for k, v in values.items()]

    def change_destination(
        self, destination: str, raw: Mapping[str, object | None]
    ) -> list[Outcome]:
        """Change one destination's overrides of the ``Destination`` group (None removes
        one: the group's value applies again)."""
        overrides: dict[str, Value | None] = {}
        for name, given in raw.items():
            param = self.param(f"{DESTINATION_GROUP}.{name}")
            try:
                overrides[param.name] = None if given is None else coerce(param, given)
            except ValueError as error:
                raise TuningError(str(error), param.key) from None
        self._check({}, {destination: overrides})
        self._save({}, {destination: overrides})
        live = {n: v for n, v in overrides.items() if self.param(f"{DESTINATION_GROUP}.{n}").live}
        self.settings.change({}, {destination: live})
        waiting = self.pending_destinations.setdefault(destination, {})
        for name, value in overrides.items():
            if name in live:
                waiting.pop(name, None)
            else:
                waiting[name] = value
        if not waiting:
            del self.pending_destinations[destination]
        return [
            Outcome(f"{DESTINATION_GROUP}.{n}@{destination}", v, n in live)
            for n, v in overrides.items()
        ]

    def _check(
        self, values: dict[str, Value], destinations: dict[str, dict[str, Value | None]]
    ) -> None:
        """The rules between parameters, over what config.xml would then give."""
        trial = self.settings.copy()
        try:
            trial.change({**self.pending, **values}, destinations)
        except RelationError as error:
            raise TuningError(str(error), error.parameter.key) from None

    def _save(
        self, values: dict[str, Value], destinations: dict[str, dict[str, Value | None]]
    ) -> None:
        try:
            save_values(self.path, values, destinations, self.settings.registry)
        except (OSError, ConfigError) as error:
            raise SaveFailed(f"cannot write {self.path}: {error}") from None
